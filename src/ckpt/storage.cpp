#include "ckpt/storage.h"

#include "ckpt/local_storage.h"
#include "ckpt/s3_storage.h"

namespace tern::ckpt {

bool IsS3Uri(const std::string& uri) {
  return uri.starts_with("s3://");
}

std::string JoinKey(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a.back() == '/' ? a + b : a + "/" + b;
}

Result<std::unique_ptr<Storage>> OpenStorage(const std::string& uri, const S3Options& s3) {
  if (IsS3Uri(uri)) {
    TERN_ASSIGN_OR_RETURN(auto s, S3Storage::Open(uri, s3));
    return std::unique_ptr<Storage>(std::move(s));
  }
  std::string path = uri.starts_with("file://") ? uri.substr(7) : uri;
  TERN_ASSIGN_OR_RETURN(auto s, LocalStorage::Open(path));
  return std::unique_ptr<Storage>(std::move(s));
}

}  // namespace tern::ckpt
