#include "ckpt/local_storage.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>

#include "core/file_util.h"

namespace tern::ckpt {

namespace fs = std::filesystem;

namespace {

Status FsyncPath(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags);
  if (fd < 0) return Status::IoError(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return Status::IoError(fmt::format("fsync of {} failed: {}", path, std::strerror(err)));
  return Status::Ok();
}

// Writes all of data at offset into fd; with O_DIRECT the caller guarantees alignment.
bool WriteAll(int fd, std::string_view data, off_t offset) {
  constexpr size_t kChunk = 8u << 20;  // bounded syscalls; lets the kernel start writeback early
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::pwrite(fd, data.data() + done, std::min(kChunk, data.size() - done), offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

std::string LocalStorage::DiskHint(int err, uint64_t bytes) const {
  struct statvfs v;
  const bool known = ::statvfs(root_.c_str(), &v) == 0;
  const double mib = 1024.0 * 1024.0;
  if (err == ENOSPC || err == EDQUOT) {
    return fmt::format(
        " (the disk holding {} is full: {} free of {}, this file needs {:.1f} MiB; free space there or point "
        "ckpt.dir at a larger disk)",
        root_, known ? fmt::format("{:.1f} MiB", v.f_bavail * double(v.f_frsize) / mib) : "?",
        known ? fmt::format("{:.1f} MiB", v.f_blocks * double(v.f_frsize) / mib) : "?", bytes / mib);
  }
  if (err == EROFS || err == EACCES || err == EPERM) {
    return fmt::format(
        " (the checkpoint directory {} is not writable{}: remount it read-write, fix its "
        "permissions, or point ckpt.dir elsewhere)",
        root_, err == EROFS ? ": its filesystem is mounted read-only" : "");
  }
  return "";
}

Result<std::unique_ptr<LocalStorage>> LocalStorage::Open(const std::string& root) {
  if (root.empty()) return Status::InvalidArgument("empty checkpoint directory");
  std::error_code ec;
  std::string abs = fs::absolute(root, ec).lexically_normal().string();
  if (ec) return Status::IoError(fmt::format("cannot resolve {}: {}", root, ec.message()));
  while (abs.size() > 1 && abs.back() == '/') abs.pop_back();
  TERN_RETURN_IF_ERROR(MakeDirs(abs));
  return std::unique_ptr<LocalStorage>(new LocalStorage(abs));
}

std::string LocalStorage::PathOf(const std::string& key) const {
  return JoinKey(root_, key);
}

Status LocalStorage::Put(const std::string& key, std::string_view data) {
  const std::string path = PathOf(key);
  if (Status made = MakeDirs(fs::path(path).parent_path().string()); !made.ok()) {
    struct statvfs v;
    const bool ro = ::statvfs(root_.c_str(), &v) == 0 && (v.f_flag & ST_RDONLY);
    return Status::IoError(made.message() + (ro ? DiskHint(EROFS, data.size()) : ""));
  }
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int e = errno;
    return Status::IoError(
        fmt::format("cannot create {}: {}{}", tmp, std::strerror(e), DiskHint(e, data.size())));
  }
  auto fail = [&](const char* what) {
    const int e = errno;
    std::string err = std::strerror(e);
    ::close(fd);
    ::unlink(tmp.c_str());  // a failed Put leaves nothing behind, so a full disk is not made fuller
    return Status::IoError(fmt::format("{} {} failed: {}{}", what, tmp, err, DiskHint(e, data.size())));
  };
  // Large, page-aligned objects (the snapshot images) bypass the page cache: no copy into it and no memory
  // to reclaim, which leaves the CPU to training. The unaligned tail goes through the normal descriptor.
  constexpr size_t kPage = 4096;
  size_t direct = 0;
  if (data.size() >= (64u << 20) && reinterpret_cast<uintptr_t>(data.data()) % kPage == 0) {
    int dfd = ::open(tmp.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC);
    if (dfd >= 0) {  // tmpfs and some network filesystems refuse O_DIRECT: then all of it goes buffered
      direct = data.size() / kPage * kPage;
      bool ok = WriteAll(dfd, data.substr(0, direct), 0);
      int err = errno;
      ::close(dfd);
      errno = err;
      if (!ok) return fail("writing");
    }
  }
  if (!WriteAll(fd, data.substr(direct), static_cast<off_t>(direct))) return fail("writing");
  if (::fsync(fd) != 0) return fail("fsync of");
  if (::close(fd) != 0) {
    std::string err = std::strerror(errno);
    ::unlink(tmp.c_str());
    return Status::IoError(fmt::format("closing {} failed: {}", tmp, err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string err = std::strerror(errno);
    ::unlink(tmp.c_str());
    return Status::IoError(fmt::format("rename {} -> {} failed: {}", tmp, path, err));
  }
  return Status::Ok();
}

Status LocalStorage::SyncDir(const std::string& dir) {
  // The step directory's own entry lives in its parent, so walk up to the root.
  fs::path p = fs::path(PathOf(dir)).lexically_normal();
  const fs::path root(root_);
  while (true) {
    std::string s = p.string();
    while (s.size() > 1 && s.back() == '/') s.pop_back();
    std::error_code ec;
    if (fs::is_directory(s, ec)) TERN_RETURN_IF_ERROR(FsyncPath(s, O_RDONLY | O_DIRECTORY));
    if (s.size() <= root_.size()) break;
    p = fs::path(s).parent_path();
  }
  return Status::Ok();
}

Result<std::string> LocalStorage::Get(const std::string& key) {
  const std::string path = PathOf(key);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound(fmt::format("{} does not exist", path));
    return Status::IoError(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  }
  // One allocation of the exact size (checkpoint files are GBs: no doubling, no second copy).
  const off_t size = ::lseek(fd, 0, SEEK_END);
  std::string out(size > 0 ? static_cast<size_t>(size) : 0, '\0');
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::pread(fd, out.data() + done, std::min<size_t>(out.size() - done, 64u << 20), done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  int err = errno;
  ::close(fd);
  if (done != out.size())
    return Status::IoError(fmt::format("reading {} failed: {}", path, std::strerror(err)));
  return out;
}

Result<std::vector<ObjectInfo>> LocalStorage::List(const std::string& prefix) {
  std::vector<ObjectInfo> out;
  std::error_code ec;
  // Walk only the directory part of the prefix: listing "step_0000" must not read the whole tree twice.
  std::string dir_part = prefix.substr(0, prefix.rfind('/') == std::string::npos ? 0 : prefix.rfind('/'));
  const std::string start = PathOf(dir_part);
  if (!fs::is_directory(start, ec)) return out;
  for (auto it = fs::recursive_directory_iterator(start, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    std::string key = it->path().string().substr(root_.size() + 1);
    if (!key.starts_with(prefix)) continue;
    out.push_back({key, static_cast<uint64_t>(it->file_size(ec))});
  }
  if (ec) return Status::IoError(fmt::format("cannot list {}: {}", start, ec.message()));
  std::sort(out.begin(), out.end(), [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
  return out;
}

Status LocalStorage::Delete(const std::string& key) {
  const std::string path = PathOf(key);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Status::IoError(fmt::format("cannot delete {}: {}", path, std::strerror(errno)));
  }
  std::string parent = fs::path(path).parent_path().string();
  if (parent.size() > root_.size()) ::rmdir(parent.c_str());  // fails harmlessly while not empty
  return Status::Ok();
}

Result<bool> LocalStorage::Exists(const std::string& key) {
  std::error_code ec;
  bool e = fs::exists(PathOf(key), ec);
  if (ec) return Status::IoError(fmt::format("cannot stat {}: {}", PathOf(key), ec.message()));
  return e;
}

}  // namespace tern::ckpt
