// The registry's index: one SQLite file with every version (its manifest and the manifest's SHA-256), the
// aliases, and every alias move with its UTC time. A version is visible exactly when its row is committed;
// Registry::Register writes the manifest to the store inside the same transaction, so a failure at any point
// leaves no visible version (registry.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

struct sqlite3;

namespace tern::registry {

struct VersionRow {
  std::string name;
  int version = 0;
  std::string created_utc;
  std::string manifest;         // the manifest's JSON as written to the store
  std::string manifest_sha256;  // of `manifest`: the store's copy must still hash to this
  bool signed_entry = false;    // refused without a key, even if the manifest lost its signature
};

struct AliasMove {
  std::string name, alias;
  int version = 0;
  double moved_unix = 0;
  std::string moved_utc;
};

class Index {
 public:
  static Result<std::unique_ptr<Index>> Open(const std::string& path);
  ~Index();
  Index(const Index&) = delete;
  Index& operator=(const Index&) = delete;

  Status Begin();  // BEGIN IMMEDIATE: one writer at a time
  Status Commit();
  void Rollback();  // best effort

  Result<int> LatestVersion(const std::string& name);  // 0 = none
  Status InsertVersion(const VersionRow& row);
  Result<std::optional<VersionRow>> GetVersion(const std::string& name, int version);
  Result<std::vector<VersionRow>> Versions(const std::string& name);  // "" = every name; by name, version
  // Points `alias` at `version` and records the move.
  Status SetAlias(const std::string& name, const std::string& alias, int version, double now_unix,
                  const std::string& now_utc);
  Result<std::optional<int>> AliasVersion(const std::string& name, const std::string& alias);
  Result<std::vector<AliasMove>> Aliases(const std::string& name);  // the current ones, with their last move
  Result<std::vector<AliasMove>> History(const std::string& name);  // every move, oldest first

 private:
  Index() = default;
  Status Exec(const std::string& sql);
  sqlite3* db_ = nullptr;
  std::string path_;
};

}  // namespace tern::registry
