// Small filesystem helpers that return Status instead of throwing.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace tern {

Result<std::string> ReadFileToString(const std::string& path);

// Publishes `contents` at `path` atomically: write a temp file beside it, fsync, rename over the
// target, fsync the directory. A reader sees the old file or the new one, never half of either.
Status WriteFileAtomic(const std::string& path, std::string_view contents);

// fsyncs the directory holding `path` so that a rename or create in it is durable.
Status SyncParentDir(const std::string& path);

// Creates the directory and its parents; ok if it exists.
Status MakeDirs(const std::string& path);

}  // namespace tern
