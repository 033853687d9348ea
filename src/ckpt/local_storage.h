// A directory on a local or shared filesystem as checkpoint Storage.
#pragma once

#include "ckpt/storage.h"

namespace tern::ckpt {

class LocalStorage : public Storage {
 public:
  // `root` is created (with parents) when missing.
  static Result<std::unique_ptr<LocalStorage>> Open(const std::string& root);

  std::string uri() const override { return root_; }
  bool is_local() const override { return true; }
  // Writes KEY.tmp.<pid> beside the target in 8 MiB chunks, fsyncs it and renames it over KEY. Missing
  // parent directories are created. ENOSPC and friends come back as IoError naming the file.
  Status Put(const std::string& key, std::string_view data) override;
  // fsyncs ROOT/dir and each parent up to ROOT, so new entries (and the step directory itself) persist.
  Status SyncDir(const std::string& dir) override;
  Result<std::string> Get(const std::string& key) override;
  Result<std::vector<ObjectInfo>> List(const std::string& prefix) override;
  // Removes the file, then its directory if that became empty (a deleted checkpoint leaves no folder).
  Status Delete(const std::string& key) override;
  Result<bool> Exists(const std::string& key) override;

  std::string PathOf(const std::string& key) const;

 private:
  explicit LocalStorage(std::string root) : root_(std::move(root)) {}
  // What to do about a failed write with errno `err` of a `bytes`-byte file: names the full disk (free and
  // total space) or the read-only directory; "" for other errors.
  std::string DiskHint(int err, uint64_t bytes) const;
  std::string root_;
};

}  // namespace tern::ckpt
