// prepare.json read as a manifest: what a dataset published to S3 consists of (train/remote_data.h fetches
// these files and nothing else) and what it holds. A pure parser of bytes that come from a store: anything
// malformed is an error naming `where`, never an exception (fuzz/prepare_json).
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "core/status.h"

namespace tern {

struct PreparedManifest {
  // The files a fetch needs: tokenizer.model (and tokenizer.vocab, a convenience copy), every shard of both
  // splits, and for a chat dataset (`chat` recorded) every shard's loss mask.
  std::set<std::string> files;
  bool chat = false;
  int vocab_size = 0;
  uint64_t shard_bytes = 0;  // tokens of both splits x bytes per token (0 when the counts are not recorded)
};

// `where` names the file in messages ("s3://b/p/prepare.json"). A shard name must be a plain file name.
Result<PreparedManifest> ParsePreparedManifest(const std::string& text, const std::string& where);

}  // namespace tern
