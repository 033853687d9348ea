// Handing a small secret from rank 0 to the other ranks through a file on a filesystem they all see: the
// NCCL unique id for launches without MPI (Slurm without PMIx), as llm.c does. Rank 0 publishes the file
// atomically (temp + rename); the others poll for it. The file carries the launch's job id as a tag, so
// that a file left by an earlier launch is not taken for this one's.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "core/status.h"

namespace tern::dist {

// Writes `secret` (any bytes) and `tag` to `path`, replacing what was there.
[[nodiscard]] Status PublishBootstrapFile(const std::string& path, const std::string& tag,
                                          std::string_view secret);

// Waits up to `timeout` for `path` to hold a secret of `size` bytes tagged `tag` (an empty tag accepts any
// file: then a stale file from an earlier launch is taken). Unavailable naming the path on timeout.
[[nodiscard]] Result<std::string> ReadBootstrapFile(const std::string& path, const std::string& tag,
                                                    size_t size, std::chrono::milliseconds timeout);

}  // namespace tern::dist
