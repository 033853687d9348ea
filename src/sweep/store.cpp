#include "sweep/store.h"

#include <sqlite3.h>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

namespace tern::sweep {
namespace {

using nlohmann::json;

struct Stmt {
  sqlite3_stmt* s = nullptr;
  ~Stmt() { sqlite3_finalize(s); }
};

std::string Text(sqlite3_stmt* s, int col) {
  const unsigned char* t = sqlite3_column_text(s, col);
  return t ? reinterpret_cast<const char*>(t) : "";
}

}  // namespace

Result<std::unique_ptr<SweepStore>> SweepStore::Open(const std::string& path) {
  std::unique_ptr<SweepStore> st(new SweepStore());
  if (sqlite3_open(path.c_str(), &st->db_) != SQLITE_OK) {
    return Status::IoError(fmt::format("cannot open the sweep state {}: {}", path, sqlite3_errmsg(st->db_)));
  }
  sqlite3_busy_timeout(st->db_, 5000);
  TERN_RETURN_IF_ERROR(st->Exec(
      "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
      "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
      "CREATE TABLE IF NOT EXISTS trials (id INTEGER PRIMARY KEY, params TEXT NOT NULL, run_dir TEXT NOT "
      "NULL,"
      " state TEXT NOT NULL, target_rung INTEGER NOT NULL, losses TEXT NOT NULL, cost_usd REAL NOT NULL,"
      " steps INTEGER NOT NULL, reason TEXT NOT NULL, slurm_job_id TEXT NOT NULL DEFAULT '');"));
  // A sweep directory from before --on slurm has no slurm_job_id column: added, empty.
  Stmt probe;
  if (sqlite3_prepare_v2(st->db_, "SELECT slurm_job_id FROM trials LIMIT 0", -1, &probe.s, nullptr) !=
      SQLITE_OK)
    TERN_RETURN_IF_ERROR(st->Exec("ALTER TABLE trials ADD COLUMN slurm_job_id TEXT NOT NULL DEFAULT '';"));
  return st;
}

SweepStore::~SweepStore() {
  sqlite3_close(db_);
}

Status SweepStore::Exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    Status st = Status::IoError(fmt::format("sweep state: {}", err ? err : "error"));
    sqlite3_free(err);
    return st;
  }
  return Status::Ok();
}

Result<std::string> SweepStore::Spec() {
  Stmt q;
  sqlite3_prepare_v2(db_, "SELECT value FROM meta WHERE key='spec'", -1, &q.s, nullptr);
  const int rc = sqlite3_step(q.s);
  if (rc == SQLITE_ROW) return Text(q.s, 0);
  if (rc == SQLITE_DONE) return std::string();
  return Status::IoError(fmt::format("sweep state: {}", sqlite3_errmsg(db_)));
}

Status SweepStore::SetSpec(const std::string& text) {
  Stmt q;
  sqlite3_prepare_v2(db_, "INSERT OR REPLACE INTO meta (key, value) VALUES ('spec', ?)", -1, &q.s, nullptr);
  sqlite3_bind_text(q.s, 1, text.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(q.s) != SQLITE_DONE)
    return Status::IoError(fmt::format("sweep state: {}", sqlite3_errmsg(db_)));
  return Status::Ok();
}

Status SweepStore::Put(const TrialRow& t) {
  json params = json::array();
  for (const auto& [k, v] : t.params) params.push_back({k, v});
  Stmt q;
  sqlite3_prepare_v2(
      db_,
      "INSERT OR REPLACE INTO trials (id, params, run_dir, state, target_rung, losses, cost_usd,"
      " steps, reason, slurm_job_id) VALUES (?,?,?,?,?,?,?,?,?,?)",
      -1, &q.s, nullptr);
  sqlite3_bind_int(q.s, 1, t.id);
  sqlite3_bind_text(q.s, 2, params.dump().c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(q.s, 3, t.run_dir.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(q.s, 4, t.state.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int(q.s, 5, t.target_rung);
  sqlite3_bind_text(q.s, 6, json(t.losses).dump().c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_double(q.s, 7, t.cost_usd);
  sqlite3_bind_int(q.s, 8, t.steps);
  sqlite3_bind_text(q.s, 9, t.reason.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(q.s, 10, t.slurm_job_id.c_str(), -1, SQLITE_TRANSIENT);
  if (sqlite3_step(q.s) != SQLITE_DONE)
    return Status::IoError(fmt::format("sweep state: {}", sqlite3_errmsg(db_)));
  return Status::Ok();
}

Result<std::vector<TrialRow>> SweepStore::Trials() {
  Stmt q;
  sqlite3_prepare_v2(
      db_,
      "SELECT id, params, run_dir, state, target_rung, losses, cost_usd, steps, reason, slurm_job_id FROM"
      " trials"
      " ORDER BY id",
      -1, &q.s, nullptr);
  std::vector<TrialRow> out;
  int rc;
  while ((rc = sqlite3_step(q.s)) == SQLITE_ROW) {
    TrialRow t;
    t.id = sqlite3_column_int(q.s, 0);
    const json params = json::parse(Text(q.s, 1), nullptr, false);
    const json losses = json::parse(Text(q.s, 5), nullptr, false);
    if (!params.is_array() || !losses.is_array())
      return Status::Corruption(fmt::format("sweep state: trial {} has unreadable params or losses", t.id));
    for (const json& p : params) t.params.emplace_back(p[0].get<std::string>(), p[1].get<std::string>());
    t.run_dir = Text(q.s, 2);
    t.state = Text(q.s, 3);
    t.target_rung = sqlite3_column_int(q.s, 4);
    t.losses = losses.get<std::vector<double>>();
    t.cost_usd = sqlite3_column_double(q.s, 6);
    t.steps = sqlite3_column_int(q.s, 7);
    t.reason = Text(q.s, 8);
    t.slurm_job_id = Text(q.s, 9);
    out.push_back(std::move(t));
  }
  if (rc != SQLITE_DONE) return Status::IoError(fmt::format("sweep state: {}", sqlite3_errmsg(db_)));
  return out;
}

}  // namespace tern::sweep
