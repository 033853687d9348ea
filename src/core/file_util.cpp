#include "core/file_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tern {

namespace fs = std::filesystem;

Result<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IoError(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::IoError(fmt::format("error reading {}", path));
  return ss.str();
}

Status SyncParentDir(const std::string& path) {
  fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) parent = ".";
  int fd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0)
    return Status::IoError(
        fmt::format("cannot open directory {}: {}", parent.string(), std::strerror(errno)));
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0)
    return Status::IoError(
        fmt::format("fsync of directory {} failed: {}", parent.string(), std::strerror(errno)));
  return Status::Ok();
}

Status WriteFileAtomic(const std::string& path, std::string_view contents) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Status::IoError(fmt::format("cannot create {}: {}", tmp, std::strerror(errno)));
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::string err = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return Status::IoError(fmt::format("writing {} failed: {} (is the disk full?)", tmp, err));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return Status::IoError(fmt::format("fsync of {} failed: {}", tmp, std::strerror(errno)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string err = std::strerror(errno);
    ::unlink(tmp.c_str());
    return Status::IoError(fmt::format("rename {} -> {} failed: {}", tmp, path, err));
  }
  return SyncParentDir(path);
}

Status MakeDirs(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return Status::IoError(fmt::format("cannot create directory {}: {}", path, ec.message()));
  return Status::Ok();
}

}  // namespace tern
