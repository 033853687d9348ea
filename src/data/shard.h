// Token shards: the files tern prepare writes and the loader memory-maps.
//
// Layout (little-endian; docs/formats.md has the full description):
//   offset  0  char[8]  magic "TERNTOKS"
//   offset  8  uint32   version = 1
//   offset 12  uint32   vocab_size
//   offset 16  uint64   token_count
//   offset 24  uint32   bytes_per_token (2 when vocab_size <= 65536, else 4)
//   offset 28  zeros
//   offset 32  uint64   content_xxh3: XXH3-64 of the token bytes (offset 64 to the end); 0 = not recorded
//                       (older shards read the same, without a content identity)
//   offset 40  zeros up to 64
//   offset 64  token_count tokens, each an unsigned integer of bytes_per_token bytes
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tern {

inline constexpr char kShardMagic[8] = {'T', 'E', 'R', 'N', 'T', 'O', 'K', 'S'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderBytes = 64;

inline uint32_t ShardBytesPerToken(uint32_t vocab_size) {
  return vocab_size <= 65536 ? 2 : 4;
}

// Streams tokens into PATH.tmp and publishes it as PATH on Finish(): header patched with the final count,
// fsynced, renamed. Until then nothing exists under PATH; a writer destroyed without Finish() deletes its
// temp file, so a crash or error never leaves half a shard under the final name.
class ShardWriter {
 public:
  static Result<std::unique_ptr<ShardWriter>> Create(const std::string& path, uint32_t vocab_size);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Fails (InvalidArgument) when a token is negative or >= vocab_size.
  Status Append(const int32_t* tokens, size_t n);
  Status Append(const std::vector<int32_t>& tokens) { return Append(tokens.data(), tokens.size()); }
  Status Finish();
  // Drops the temp file (also done by the destructor when Finish() was not called).
  void Abort();

  uint64_t count() const { return count_; }
  const std::string& path() const { return path_; }
  // XXH3-64 of the token bytes, the header's content_xxh3: set by Finish() (0 before).
  uint64_t content_xxh3() const { return content_; }

 private:
  ShardWriter(std::string path, int fd, uint32_t vocab_size);
  Status Flush();

  std::string path_, tmp_path_;
  int fd_;
  uint32_t vocab_size_, bytes_per_token_;
  uint64_t count_ = 0, content_ = 0;
  std::vector<unsigned char> buf_;
  bool done_ = false;
  std::shared_ptr<void> hash_;  // the XXH3 state of the bytes flushed so far (xxhash.h stays in shard.cpp)
};

// What a shard header says, once checked against the file's length.
struct ShardHeader {
  uint32_t vocab_size = 0, bytes_per_token = 2;
  uint64_t count = 0;
  uint64_t content_xxh3 = 0;  // 0: not recorded
};
// Checks the first bytes of a shard (`head`, at least the header when the file has one) against the file's
// length `file_len`. Corruption, naming `path`, as ShardReader::Open describes.
Result<ShardHeader> ParseShardHeader(std::string_view head, uint64_t file_len, const std::string& path);

// Memory-maps a shard after checking its header against the file's length.
class ShardReader {
 public:
  // NotFound/IoError when the file cannot be opened; Corruption (naming the file) when it is not a shard,
  // has an unknown version, or its length disagrees with its header (truncated or partly written).
  static Result<ShardReader> Open(const std::string& path);

  ShardReader(ShardReader&& other) noexcept;
  ShardReader& operator=(ShardReader&& other) noexcept;
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;
  ~ShardReader();

  uint64_t size() const { return count_; }
  uint32_t vocab_size() const { return vocab_size_; }
  uint32_t bytes_per_token() const { return bytes_per_token_; }
  const std::string& path() const { return path_; }
  // The header's XXH3-64 of the token bytes, 0 when the shard predates it. Not checked at Open (that would
  // read the whole file); VerifyContent() reads and checks it.
  uint64_t content_xxh3() const { return content_xxh3_; }
  // Reads every token byte and compares their XXH3-64 with the header's: Corruption naming the file when
  // they differ (the file changed after tern prepare wrote it). Ok when the header records none.
  Status VerifyContent() const;

  uint32_t Get(uint64_t i) const {
    const unsigned char* p = tokens_ + i * bytes_per_token_;
    if (bytes_per_token_ == 2) return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8);
    return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
           (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
  }
  uint32_t operator[](uint64_t i) const { return Get(i); }
  // Copies tokens [offset, offset + n) to out; InvalidArgument when the range is outside the shard;
  // Corruption (naming the file and what to do) when the file on disk has become shorter than it was at
  // Open (truncated in place while mapped: reading the lost pages would kill the process with SIGBUS).
  Status Read(uint64_t offset, uint64_t n, int32_t* out) const;

 private:
  ShardReader() = default;
  void Release();

  std::string path_;
  int fd_ = -1;  // kept open so that Read() can check the file's length
  void* map_ = nullptr;
  size_t map_len_ = 0;
  const unsigned char* tokens_ = nullptr;
  uint64_t count_ = 0;
  uint64_t content_xxh3_ = 0;
  uint32_t vocab_size_ = 0, bytes_per_token_ = 2;
};

// The content identity of a split (or a dataset): XXH3-64 over the shards' content_xxh3 in order, each
// followed by its loss mask's (0 without a mask), as 16 hex digits; "" when a shard records none (written by
// an older tern). prepare.json's "content" and the trainer's resume check (train/train_checkpoint.h) use it.
std::string ShardsFingerprint(std::span<const uint64_t> shard_hashes, std::span<const uint64_t> mask_hashes);

}  // namespace tern
