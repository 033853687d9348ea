#include "data/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>

#include <xxhash.h>

#include "core/file_util.h"

namespace tern {

static_assert(std::endian::native == std::endian::little, "shards are little-endian; add byte swapping here");

namespace {

constexpr size_t kWriteBufferBytes = 1 << 20;

Status WriteAll(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::IoError(
          fmt::format("writing {} failed: {} (is the disk full?)", path, std::strerror(errno)));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

void EncodeHeader(unsigned char* h, uint32_t vocab_size, uint64_t count, uint32_t bpt, uint64_t content) {
  std::memset(h, 0, kShardHeaderBytes);
  std::memcpy(h, kShardMagic, 8);
  std::memcpy(h + 8, &kShardVersion, 4);
  std::memcpy(h + 12, &vocab_size, 4);
  std::memcpy(h + 16, &count, 8);
  std::memcpy(h + 24, &bpt, 4);
  std::memcpy(h + 32, &content, 8);
}

XXH3_state_t* State(const std::shared_ptr<void>& p) {
  return static_cast<XXH3_state_t*>(p.get());
}

}  // namespace

// ---------------------------------------------------------------------------------------------- writer

ShardWriter::ShardWriter(std::string path, int fd, uint32_t vocab_size)
    : path_(std::move(path)),
      tmp_path_(path_ + ".tmp"),
      fd_(fd),
      vocab_size_(vocab_size),
      bytes_per_token_(ShardBytesPerToken(vocab_size)),
      hash_(XXH3_createState(), [](void* p) { XXH3_freeState(static_cast<XXH3_state_t*>(p)); }) {
  buf_.reserve(kWriteBufferBytes);
  XXH3_64bits_reset(State(hash_));
}

Result<std::unique_ptr<ShardWriter>> ShardWriter::Create(const std::string& path, uint32_t vocab_size) {
  if (vocab_size == 0) return Status::InvalidArgument("shard vocab_size must be > 0");
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IoError(fmt::format("cannot create {}: {}", tmp, std::strerror(errno)));
  std::unique_ptr<ShardWriter> w(new ShardWriter(path, fd, vocab_size));
  // A placeholder header (count 0) reserves the space; Finish() writes the real one.
  unsigned char header[kShardHeaderBytes];
  EncodeHeader(header, vocab_size, 0, w->bytes_per_token_, 0);
  TERN_RETURN_IF_ERROR(WriteAll(fd, header, sizeof(header), tmp));
  return w;
}

ShardWriter::~ShardWriter() {
  if (!done_) Abort();
}

void ShardWriter::Abort() {
  if (done_) return;
  done_ = true;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_path_.c_str());
}

Status ShardWriter::Append(const int32_t* tokens, size_t n) {
  if (done_) return Status::Internal(fmt::format("append to finished shard {}", path_));
  for (size_t i = 0; i < n; ++i) {  // validate first so that a bad token appends nothing
    if (tokens[i] < 0 || static_cast<uint32_t>(tokens[i]) >= vocab_size_) {
      return Status::InvalidArgument(
          fmt::format("token {} does not fit shard {} with vocab size {}", tokens[i], path_, vocab_size_));
    }
  }
  size_t old = buf_.size();
  buf_.resize(old + n * bytes_per_token_);
  unsigned char* p = buf_.data() + old;
  if (bytes_per_token_ == 4) {
    std::memcpy(p, tokens, n * 4);
  } else {
    for (size_t i = 0; i < n; ++i) {
      p[2 * i] = static_cast<unsigned char>(tokens[i] & 0xFF);
      p[2 * i + 1] = static_cast<unsigned char>((tokens[i] >> 8) & 0xFF);
    }
  }
  count_ += n;
  if (buf_.size() >= kWriteBufferBytes) TERN_RETURN_IF_ERROR(Flush());
  return Status::Ok();
}

Status ShardWriter::Flush() {
  XXH3_64bits_update(State(hash_), buf_.data(), buf_.size());
  Status st = WriteAll(fd_, buf_.data(), buf_.size(), tmp_path_);
  buf_.clear();
  return st;
}

Status ShardWriter::Finish() {
  if (done_) return Status::Internal(fmt::format("shard {} finished twice", path_));
  Status st = Flush();
  if (st.ok()) {
    unsigned char header[kShardHeaderBytes];
    content_ = XXH3_64bits_digest(State(hash_));
    EncodeHeader(header, vocab_size_, count_, bytes_per_token_, content_);
    if (::pwrite(fd_, header, sizeof(header), 0) != static_cast<ssize_t>(sizeof(header))) {
      st = Status::IoError(
          fmt::format("writing the header of {} failed: {}", tmp_path_, std::strerror(errno)));
    }
  }
  if (st.ok() && ::fsync(fd_) != 0) {
    st = Status::IoError(fmt::format("fsync of {} failed: {}", tmp_path_, std::strerror(errno)));
  }
  if (!st.ok()) {
    Abort();
    return st;
  }
  ::close(fd_);
  fd_ = -1;
  done_ = true;
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    std::string err = std::strerror(errno);
    ::unlink(tmp_path_.c_str());
    return Status::IoError(fmt::format("rename {} -> {} failed: {}", tmp_path_, path_, err));
  }
  return SyncParentDir(path_);
}

// ---------------------------------------------------------------------------------------------- reader

ShardReader::ShardReader(ShardReader&& o) noexcept {
  *this = std::move(o);
}

ShardReader& ShardReader::operator=(ShardReader&& o) noexcept {
  if (this != &o) {
    Release();
    path_ = std::move(o.path_);
    fd_ = o.fd_;
    o.fd_ = -1;
    map_ = o.map_;
    map_len_ = o.map_len_;
    tokens_ = o.tokens_;
    count_ = o.count_;
    content_xxh3_ = o.content_xxh3_;
    vocab_size_ = o.vocab_size_;
    bytes_per_token_ = o.bytes_per_token_;
    o.map_ = nullptr;
    o.map_len_ = 0;
    o.tokens_ = nullptr;
    o.count_ = 0;
  }
  return *this;
}

ShardReader::~ShardReader() {
  Release();
}

void ShardReader::Release() {
  if (map_) ::munmap(map_, map_len_);
  map_ = nullptr;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Result<ShardReader> ShardReader::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      return Status::NotFound(fmt::format("shard {} does not exist (run tern prepare)", path));
    return Status::IoError(fmt::format("cannot open shard {}: {}", path, std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    std::string err = std::strerror(errno);
    ::close(fd);
    return Status::IoError(fmt::format("cannot stat shard {}: {}", path, err));
  }
  const uint64_t file_len = static_cast<uint64_t>(st.st_size);
  if (file_len < kShardHeaderBytes) {
    ::close(fd);
    return ParseShardHeader({}, file_len, path).status();
  }
  void* map = ::mmap(nullptr, file_len, PROT_READ, MAP_SHARED, fd, 0);
  int map_errno = errno;
  if (map == MAP_FAILED) {
    ::close(fd);
    return Status::IoError(fmt::format("cannot mmap shard {}: {}", path, std::strerror(map_errno)));
  }
  ShardReader r;
  r.fd_ = fd;
  r.path_ = path;
  r.map_ = map;
  r.map_len_ = file_len;
  const auto* h = static_cast<const unsigned char*>(map);
  TERN_ASSIGN_OR_RETURN(
      ShardHeader header,
      ParseShardHeader({reinterpret_cast<const char*>(h), kShardHeaderBytes}, file_len, path));
  r.vocab_size_ = header.vocab_size;
  r.count_ = header.count;
  r.bytes_per_token_ = header.bytes_per_token;
  r.content_xxh3_ = header.content_xxh3;
  r.tokens_ = h + kShardHeaderBytes;
  return r;
}

Result<ShardHeader> ParseShardHeader(std::string_view head, uint64_t file_len, const std::string& path) {
  const std::string redo = "re-run tern prepare to rewrite it";
  if (file_len < kShardHeaderBytes || head.size() < kShardHeaderBytes) {
    return Status::Corruption(
        fmt::format("{} is {} bytes, shorter than the {}-byte shard header: truncated or not "
                    "a tern token shard; {}",
                    path, file_len, kShardHeaderBytes, redo));
  }
  const char* h = head.data();
  if (std::memcmp(h, kShardMagic, 8) != 0) {
    return Status::Corruption(
        fmt::format("{} is not a tern token shard (its first bytes are not \"TERNTOKS\"); "
                    "pass the shards written by tern prepare",
                    path));
  }
  ShardHeader out;
  uint32_t version, bpt;
  uint64_t count;
  std::memcpy(&version, h + 8, 4);
  std::memcpy(&out.vocab_size, h + 12, 4);
  std::memcpy(&count, h + 16, 8);
  std::memcpy(&bpt, h + 24, 4);
  if (version != kShardVersion) {
    return Status::Corruption(fmt::format("{} has shard format version {}, this tern reads version {}; {}",
                                          path, version, kShardVersion, redo));
  }
  if (bpt != ShardBytesPerToken(out.vocab_size)) {
    return Status::Corruption(
        fmt::format("{} header is inconsistent: {} bytes per token for vocab size {}; {}", path, bpt,
                    out.vocab_size, redo));
  }
  const uint64_t want = kShardHeaderBytes + count * bpt;
  if (count > (file_len / bpt) || want != file_len) {
    return Status::Corruption(
        fmt::format("{} is {} bytes but its header promises {} tokens ({} bytes): the file "
                    "is truncated or was only partly written; {}",
                    path, file_len, count, want, redo));
  }
  out.count = count;
  out.bytes_per_token = bpt;
  std::memcpy(&out.content_xxh3, h + 32, 8);
  return out;
}

Status ShardReader::VerifyContent() const {
  if (content_xxh3_ == 0) return Status::Ok();
  struct stat st;
  if (fd_ >= 0 && ::fstat(fd_, &st) == 0 && static_cast<uint64_t>(st.st_size) < map_len_) {
    return Status::Corruption(
        fmt::format("shard {} shrank on disk after it was opened; re-run tern prepare", path_));
  }
  const uint64_t got = XXH3_64bits(tokens_, count_ * bytes_per_token_);
  if (got == content_xxh3_) return Status::Ok();
  return Status::Corruption(fmt::format(
      "shard {} does not hold what tern prepare wrote: its tokens hash to {:016x}, its header says {:016x} "
      "(the file was modified or damaged on disk). Re-run tern prepare (--force) to rewrite the dataset",
      path_, got, content_xxh3_));
}

std::string ShardsFingerprint(std::span<const uint64_t> shard_hashes, std::span<const uint64_t> mask_hashes) {
  std::vector<uint64_t> all;
  all.reserve(2 * shard_hashes.size());
  for (size_t i = 0; i < shard_hashes.size(); ++i) {
    if (shard_hashes[i] == 0) return "";
    all.push_back(shard_hashes[i]);
    all.push_back(i < mask_hashes.size() ? mask_hashes[i] : 0);
  }
  return fmt::format("{:016x}", XXH3_64bits(all.data(), all.size() * sizeof(uint64_t)));
}

Status ShardReader::Read(uint64_t offset, uint64_t n, int32_t* out) const {
  if (offset > count_ || n > count_ - offset) {
    return Status::InvalidArgument(fmt::format("read of tokens [{}, {}) is outside shard {} of {} tokens",
                                               offset, offset + n, path_, count_));
  }
  // A shard truncated in place while mapped: the lost pages would raise SIGBUS. One fstat per read is
  // cheap next to a training step (a truncation between this check and the copy still crashes).
  struct stat st;
  if (fd_ >= 0 && ::fstat(fd_, &st) == 0 && static_cast<uint64_t>(st.st_size) < map_len_) {
    return Status::Corruption(fmt::format(
        "shard {} shrank on disk while training read it: {} bytes now, {} ({} tokens) when it was opened. "
        "Something truncated or is rewriting it in place; restore the file (or re-run tern prepare into a "
        "new directory), then continue with --resume auto",
        path_, st.st_size, map_len_, count_));
  }
  if (bytes_per_token_ == 4) {
    std::memcpy(out, tokens_ + offset * 4, n * 4);
  } else {
    const unsigned char* p = tokens_ + offset * 2;
    for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(p[2 * i] | (p[2 * i + 1] << 8));
  }
  return Status::Ok();
}

}  // namespace tern
