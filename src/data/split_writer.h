// Inside `tern prepare` (data/prepare.cpp, data/prepare_chat.cpp): one split's shards, NAME_000.bin,
// NAME_001.bin, ... of at most shard_tokens tokens each, and with masks their loss masks NAME_NNN.mask.bin
// (data/loader.h MaskPathFor), written in step. Not for use outside src/data.
#pragma once

#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/shard.h"

namespace tern {

class SplitWriter {
 public:
  SplitWriter(std::string dir, std::string name, uint32_t vocab, uint64_t shard_tokens, bool masks = false)
      : dir_(std::move(dir)),
        name_(std::move(name)),
        vocab_(vocab),
        shard_tokens_(shard_tokens),
        masks_(masks) {}

  // `mask` (with masks): n values, 1 = learned, 0 = only read.
  Status Append(const int32_t* t, size_t n, const int32_t* mask = nullptr) {
    while (n > 0) {
      if (!cur_) {
        std::string file = fmt::format("{}_{:03}.bin", name_, files_.size());
        TERN_ASSIGN_OR_RETURN(cur_, ShardWriter::Create(dir_ + "/" + file, vocab_));
        files_.push_back(file);
        if (masks_) {
          std::string mfile = fmt::format("{}_{:03}.mask.bin", name_, mask_files_.size());
          TERN_ASSIGN_OR_RETURN(cur_mask_, ShardWriter::Create(dir_ + "/" + mfile, 2));
          mask_files_.push_back(mfile);
        }
      }
      size_t k = static_cast<size_t>(std::min<uint64_t>(n, shard_tokens_ - cur_->count()));
      TERN_RETURN_IF_ERROR(cur_->Append(t, k));
      if (masks_) TERN_RETURN_IF_ERROR(cur_mask_->Append(mask, k));
      t += k;
      if (mask) mask += k;
      n -= k;
      total_ += k;
      if (cur_->count() == shard_tokens_) TERN_RETURN_IF_ERROR(Close());
    }
    return Status::Ok();
  }
  Status Close() {
    if (!cur_) return Status::Ok();
    Status st = cur_->Finish();
    hashes_.push_back(cur_->content_xxh3());
    cur_.reset();
    if (cur_mask_) {
      Status ms = cur_mask_->Finish();
      mask_hashes_.push_back(cur_mask_->content_xxh3());
      cur_mask_.reset();
      if (st.ok()) st = ms;
    }
    return st;
  }
  // The split's content identity (data/shard.h ShardsFingerprint), once Close() has run.
  std::string fingerprint() const { return ShardsFingerprint(hashes_, mask_hashes_); }
  const std::vector<std::string>& files() const { return files_; }  // names, relative to dir
  const std::vector<std::string>& mask_files() const { return mask_files_; }
  uint64_t total() const { return total_; }

 private:
  std::string dir_, name_;
  uint32_t vocab_;
  uint64_t shard_tokens_, total_ = 0;
  bool masks_;
  std::unique_ptr<ShardWriter> cur_, cur_mask_;
  std::vector<std::string> files_, mask_files_;
  std::vector<uint64_t> hashes_, mask_hashes_;
};

}  // namespace tern
