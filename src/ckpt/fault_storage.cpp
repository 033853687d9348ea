#include "ckpt/fault_storage.h"

#include <random>

namespace tern::ckpt {

Status MemStorage::Put(const std::string& key, std::string_view data) {
  std::lock_guard<std::mutex> lock(mu_);
  objects_[key] = std::string(data);
  return Status::Ok();
}

Result<std::string> MemStorage::Get(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return Status::NotFound(fmt::format("mem://{} does not exist", key));
  return it->second;
}

Result<std::vector<ObjectInfo>> MemStorage::List(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ObjectInfo> out;
  for (auto it = objects_.lower_bound(prefix); it != objects_.end() && it->first.starts_with(prefix); ++it)
    out.push_back({it->first, it->second.size()});
  return out;
}

Status MemStorage::Delete(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  objects_.erase(key);
  return Status::Ok();
}

Result<bool> MemStorage::Exists(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return objects_.count(key) > 0;
}

void FaultInjectionStorage::SetCapacity(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  capacity_ = bytes;
}

void FaultInjectionStorage::FailCalls(unsigned ops, std::string key_substring, Status error, int count) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_ops_ = ops;
  fail_key_ = std::move(key_substring);
  fail_error_ = std::move(error);
  fail_count_ = count;
}

void FaultInjectionStorage::ClearFailures() {
  std::lock_guard<std::mutex> lock(mu_);
  fail_ops_ = 0;
  ops_left_ = -1;
}

void FaultInjectionStorage::FreezeAfter(int ops) {
  std::lock_guard<std::mutex> lock(mu_);
  ops_left_ = ops;
}

Status FaultInjectionStorage::Injected(Op op, const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ops_left_ == 0) return Status::IoError("simulated crash: the process is gone");
  if (ops_left_ > 0) ops_left_--;
  if (!(fail_ops_ & op) || key.find(fail_key_) == std::string::npos || fail_count_ == 0) return Status::Ok();
  if (fail_count_ > 0) fail_count_--;
  return fail_error_;
}

uint64_t FaultInjectionStorage::UsedBytes() {
  auto all = base_->List("");
  uint64_t used = 0;
  if (all.ok())
    for (const auto& o : *all) used += o.size;
  return used;
}

Status FaultInjectionStorage::Put(const std::string& key, std::string_view data) {
  TERN_RETURN_IF_ERROR(Injected(kPut, key));
  uint64_t capacity;
  {
    std::lock_guard<std::mutex> lock(mu_);
    capacity = capacity_;
  }
  if (capacity > 0) {
    uint64_t old_size = 0;  // an overwrite frees the old object's space once renamed
    auto same = base_->List(key);
    if (same.ok())
      for (const auto& o : *same)
        if (o.key == key) old_size = o.size;
    uint64_t used = UsedBytes() - old_size;
    if (used + data.size() > capacity) {
      return Status::IoError(fmt::format("writing {} failed: No space left on device ({} of {} bytes used)",
                                         key, used, capacity));
    }
  }
  TERN_RETURN_IF_ERROR(base_->Put(key, data));
  std::lock_guard<std::mutex> lock(mu_);
  unsynced_.insert(key);
  return Status::Ok();
}

Status FaultInjectionStorage::SyncDir(const std::string& dir) {
  TERN_RETURN_IF_ERROR(Injected(kSync, dir));
  TERN_RETURN_IF_ERROR(base_->SyncDir(dir));
  std::lock_guard<std::mutex> lock(mu_);
  const std::string prefix = dir.empty() || dir.back() == '/' ? dir : dir + "/";
  for (auto it = unsynced_.begin(); it != unsynced_.end();) {
    it = it->starts_with(prefix) ? unsynced_.erase(it) : std::next(it);
  }
  return Status::Ok();
}

Result<std::string> FaultInjectionStorage::Get(const std::string& key) {
  TERN_RETURN_IF_ERROR(Injected(kGet, key));
  return base_->Get(key);
}

Result<std::vector<ObjectInfo>> FaultInjectionStorage::List(const std::string& prefix) {
  TERN_RETURN_IF_ERROR(Injected(kList, prefix));
  return base_->List(prefix);
}

Status FaultInjectionStorage::Delete(const std::string& key) {
  TERN_RETURN_IF_ERROR(Injected(kDelete, key));
  return base_->Delete(key);
}

Result<bool> FaultInjectionStorage::Exists(const std::string& key) {
  TERN_RETURN_IF_ERROR(Injected(kGet, key));  // counts as a read
  return base_->Exists(key);
}

void FaultInjectionStorage::SimulateCrash(bool keep_some, uint64_t seed) {
  std::lock_guard<std::mutex> lock(mu_);
  std::mt19937_64 rng(seed);
  for (const auto& key : unsynced_) {
    if (keep_some && (rng() & 1)) continue;
    base_->Delete(key).ok();  // best effort: this is the "lost on power failure" path
  }
  unsynced_.clear();
}

size_t FaultInjectionStorage::unsynced_count() {
  std::lock_guard<std::mutex> lock(mu_);
  return unsynced_.size();
}

}  // namespace tern::ckpt
