// Test doubles for Storage (leveldb's memenv and fault_injection_test in one place):
//   MemStorage             objects in memory; fast, no disk.
//   FaultInjectionStorage  wraps another Storage and injects the failures a real run meets:
//     * a crash that loses every Put not yet made durable by SyncDir() (each such object is dropped or,
//       with keep_some, kept at random: the kernel may have written some of them already);
//     * a disk that fills up after `capacity` bytes (Put fails with "No space left on device");
//     * any call failing on demand, for keys containing a substring;
//     * the process dying after N calls (every later call fails and has no effect).
#pragma once

#include <map>
#include <mutex>
#include <set>

#include "ckpt/storage.h"

namespace tern::ckpt {

class MemStorage : public Storage {
 public:
  std::string uri() const override { return "mem://"; }
  Status Put(const std::string& key, std::string_view data) override;
  Status SyncDir(const std::string&) override { return Status::Ok(); }
  Result<std::string> Get(const std::string& key) override;
  Result<std::vector<ObjectInfo>> List(const std::string& prefix) override;
  Status Delete(const std::string& key) override;
  Result<bool> Exists(const std::string& key) override;

 private:
  std::mutex mu_;
  std::map<std::string, std::string> objects_;
};

class FaultInjectionStorage : public Storage {
 public:
  enum Op : unsigned { kPut = 1, kGet = 2, kList = 4, kDelete = 8, kSync = 16, kAll = 31 };

  explicit FaultInjectionStorage(Storage* base) : base_(base) {}

  std::string uri() const override { return base_->uri(); }
  bool is_local() const override { return base_->is_local(); }
  Status Put(const std::string& key, std::string_view data) override;
  Status SyncDir(const std::string& dir) override;
  Result<std::string> Get(const std::string& key) override;
  Result<std::vector<ObjectInfo>> List(const std::string& prefix) override;
  Status Delete(const std::string& key) override;
  Result<bool> Exists(const std::string& key) override;

  // Total bytes the "disk" holds; a Put that would go beyond fails. 0 = unlimited.
  void SetCapacity(uint64_t bytes);
  // Calls of the ops in `ops` on keys containing `key_substring` fail with `error` (the next `count`
  // times; -1 = until cleared).
  void FailCalls(unsigned ops, std::string key_substring, Status error, int count = -1);
  void ClearFailures();
  // The process "dies" after `ops` more calls: every later call fails and changes nothing (not even the
  // cleanup a failing writer attempts). Follow with SimulateCrash() to lose what was not synced.
  void FreezeAfter(int ops);
  // Forgets every Put not covered by a later SyncDir(); with keep_some, a seeded coin decides per object.
  void SimulateCrash(bool keep_some = false, uint64_t seed = 1);
  size_t unsynced_count();

 private:
  Status Injected(Op op, const std::string& key);
  uint64_t UsedBytes();

  Storage* base_;
  std::mutex mu_;
  uint64_t capacity_ = 0;
  unsigned fail_ops_ = 0;
  std::string fail_key_;
  Status fail_error_;
  int fail_count_ = 0;
  int ops_left_ = -1;  // -1 = not freezing
  std::set<std::string> unsynced_;
};

}  // namespace tern::ckpt
