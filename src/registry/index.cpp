#include "registry/index.h"

#include <sqlite3.h>

#include <filesystem>

#include "core/file_util.h"

namespace tern::registry {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
INSERT OR IGNORE INTO meta VALUES ('schema_version', '1');
CREATE TABLE IF NOT EXISTS versions(
  name TEXT NOT NULL, version INTEGER NOT NULL, created_utc TEXT NOT NULL, manifest TEXT NOT NULL,
  manifest_sha256 TEXT NOT NULL, signed INTEGER NOT NULL DEFAULT 0, PRIMARY KEY(name, version));
CREATE TABLE IF NOT EXISTS aliases(
  name TEXT NOT NULL, alias TEXT NOT NULL, version INTEGER NOT NULL, PRIMARY KEY(name, alias));
CREATE TABLE IF NOT EXISTS alias_moves(
  id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, alias TEXT NOT NULL, version INTEGER NOT NULL,
  moved_unix REAL NOT NULL, moved_utc TEXT NOT NULL);
)sql";

// One prepared statement: bind in order, step, read columns in order.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &s_, nullptr) != SQLITE_OK) s_ = nullptr;
  }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt& Bind(const std::string& v) {
    sqlite3_bind_text(s_, ++n_, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& Bind(int64_t v) {
    sqlite3_bind_int64(s_, ++n_, v);
    return *this;
  }
  Stmt& Bind(double v) {
    sqlite3_bind_double(s_, ++n_, v);
    return *this;
  }
  // SQLITE_ROW, SQLITE_DONE, or an error.
  int Step() { return s_ ? sqlite3_step(s_) : SQLITE_ERROR; }
  std::string Text(int i) {
    const unsigned char* t = sqlite3_column_text(s_, i);
    return t ? reinterpret_cast<const char*>(t) : "";
  }
  int64_t Int(int i) { return sqlite3_column_int64(s_, i); }
  double Real(int i) { return sqlite3_column_double(s_, i); }
  Status Error(const std::string& what) const { return Status::IoError(what + ": " + sqlite3_errmsg(db_)); }

 private:
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
  int n_ = 0;
};

Status Done(Stmt& s, const std::string& what) {
  return s.Step() == SQLITE_DONE ? Status::Ok() : s.Error(what);
}

VersionRow ReadVersion(Stmt& s) {
  return {s.Text(0), static_cast<int>(s.Int(1)), s.Text(2), s.Text(3), s.Text(4), s.Int(5) != 0};
}

}  // namespace

Result<std::unique_ptr<Index>> Index::Open(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  if (!parent.empty()) TERN_RETURN_IF_ERROR(MakeDirs(parent));
  std::unique_ptr<Index> ix(new Index());
  ix->path_ = path;
  if (sqlite3_open(path.c_str(), &ix->db_) != SQLITE_OK)
    return Status::IoError("opening the registry index " + path + ": " + sqlite3_errmsg(ix->db_));
  sqlite3_busy_timeout(ix->db_, 10000);
  TERN_RETURN_IF_ERROR(ix->Exec(kSchema).WithContext("creating the registry index " + path));
  return ix;
}

Index::~Index() {
  sqlite3_close(db_);
}

Status Index::Exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) == SQLITE_OK) return Status::Ok();
  Status st = Status::IoError(path_ + ": " + (err ? err : "sqlite error"));
  sqlite3_free(err);
  return st;
}

Status Index::Begin() {
  return Exec("BEGIN IMMEDIATE");
}
Status Index::Commit() {
  return Exec("COMMIT");
}
void Index::Rollback() {
  (void)Exec("ROLLBACK");
}

Result<int> Index::LatestVersion(const std::string& name) {
  Stmt s(db_, "SELECT COALESCE(MAX(version), 0) FROM versions WHERE name = ?");
  s.Bind(name);
  if (s.Step() != SQLITE_ROW) return s.Error("reading the latest version of " + name);
  return static_cast<int>(s.Int(0));
}

Status Index::InsertVersion(const VersionRow& r) {
  Stmt s(db_,
         "INSERT INTO versions(name, version, created_utc, manifest, manifest_sha256, signed) "
         "VALUES (?, ?, ?, ?, ?, ?)");
  s.Bind(r.name).Bind(int64_t{r.version}).Bind(r.created_utc).Bind(r.manifest).Bind(r.manifest_sha256);
  s.Bind(int64_t{r.signed_entry ? 1 : 0});
  return Done(s, "recording " + r.name + " version " + std::to_string(r.version));
}

Result<std::optional<VersionRow>> Index::GetVersion(const std::string& name, int version) {
  Stmt s(db_,
         "SELECT name, version, created_utc, manifest, manifest_sha256, signed FROM versions "
         "WHERE name = ? AND version = ?");
  s.Bind(name).Bind(int64_t{version});
  int rc = s.Step();
  if (rc == SQLITE_DONE) return std::optional<VersionRow>();
  if (rc != SQLITE_ROW) return s.Error("reading " + name);
  return std::optional<VersionRow>(ReadVersion(s));
}

Result<std::vector<VersionRow>> Index::Versions(const std::string& name) {
  Stmt s(db_,
         "SELECT name, version, created_utc, manifest, manifest_sha256, signed FROM versions "
         "WHERE ? = '' OR name = ? ORDER BY name, version");
  s.Bind(name).Bind(name);
  std::vector<VersionRow> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) out.push_back(ReadVersion(s));
  if (rc != SQLITE_DONE) return s.Error("listing versions");
  return out;
}

Status Index::SetAlias(const std::string& name, const std::string& alias, int version, double now_unix,
                       const std::string& now_utc) {
  Stmt up(db_, "INSERT OR REPLACE INTO aliases(name, alias, version) VALUES (?, ?, ?)");
  up.Bind(name).Bind(alias).Bind(int64_t{version});
  TERN_RETURN_IF_ERROR(Done(up, "setting alias " + alias));
  Stmt mv(db_, "INSERT INTO alias_moves(name, alias, version, moved_unix, moved_utc) VALUES (?, ?, ?, ?, ?)");
  mv.Bind(name).Bind(alias).Bind(int64_t{version}).Bind(now_unix).Bind(now_utc);
  return Done(mv, "recording the move of alias " + alias);
}

Result<std::optional<int>> Index::AliasVersion(const std::string& name, const std::string& alias) {
  Stmt s(db_, "SELECT version FROM aliases WHERE name = ? AND alias = ?");
  s.Bind(name).Bind(alias);
  int rc = s.Step();
  if (rc == SQLITE_DONE) return std::optional<int>();
  if (rc != SQLITE_ROW) return s.Error("reading alias " + alias);
  return std::optional<int>(static_cast<int>(s.Int(0)));
}

Result<std::vector<AliasMove>> Index::Aliases(const std::string& name) {
  Stmt s(db_,
         "SELECT a.name, a.alias, a.version, MAX(m.moved_unix), m.moved_utc FROM aliases a "
         "JOIN alias_moves m ON m.name = a.name AND m.alias = a.alias AND m.version = a.version "
         "WHERE ? = '' OR a.name = ? GROUP BY a.name, a.alias ORDER BY a.name, a.alias");
  s.Bind(name).Bind(name);
  std::vector<AliasMove> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW)
    out.push_back({s.Text(0), s.Text(1), static_cast<int>(s.Int(2)), s.Real(3), s.Text(4)});
  if (rc != SQLITE_DONE) return s.Error("listing aliases");
  return out;
}

Result<std::vector<AliasMove>> Index::History(const std::string& name) {
  Stmt s(db_,
         "SELECT name, alias, version, moved_unix, moved_utc FROM alias_moves WHERE name = ? ORDER BY id");
  s.Bind(name);
  std::vector<AliasMove> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW)
    out.push_back({s.Text(0), s.Text(1), static_cast<int>(s.Int(2)), s.Real(3), s.Text(4)});
  if (rc != SQLITE_DONE) return s.Error("reading the alias history of " + name);
  return out;
}

}  // namespace tern::registry
