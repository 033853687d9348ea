#include "run/ledger.h"

#include <pwd.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "core/file_util.h"
#include "run/clock.h"

namespace tern::run {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
INSERT OR IGNORE INTO meta VALUES ('schema_version', '2');
CREATE TABLE IF NOT EXISTS jobs(
  job_id TEXT PRIMARY KEY, run_dir TEXT NOT NULL, config TEXT, overrides TEXT, project TEXT,
  instance TEXT, billing TEXT, price_per_hour REAL, ranks INTEGER, where_run TEXT,
  max_attempts INTEGER, budget_usd REAL, deadline_unix REAL, created_unix REAL, updated_unix REAL,
  state TEXT, reason TEXT, host TEXT, supervisor_pid INTEGER, cancel_requested INTEGER NOT NULL DEFAULT 0,
  slurm_job_id TEXT);
CREATE INDEX IF NOT EXISTS jobs_by_run_dir ON jobs(run_dir, created_unix);
CREATE TABLE IF NOT EXISTS attempts(
  job_id TEXT NOT NULL, attempt INTEGER NOT NULL, state TEXT,
  start_unix REAL, end_unix REAL, seen_unix REAL, start_utc TEXT, end_utc TEXT, host TEXT, ranks INTEGER,
  exit_code INTEGER, signal INTEGER, reason TEXT, message TEXT,
  first_step INTEGER, last_step INTEGER, resumed_from INTEGER, tokens INTEGER,
  wall_s REAL, startup_s REAL, productive_s REAL, lost_steps INTEGER, lost_s REAL, lost_usd REAL,
  checkpoint_s REAL, instance TEXT, billing TEXT, price_per_hour REAL, cost_usd REAL,
  trainer_pid INTEGER, trainer_start TEXT, metrics_offset INTEGER, log TEXT,
  slurm_job_id TEXT, slurm_restart_count INTEGER,
  PRIMARY KEY(job_id, attempt));
CREATE TABLE IF NOT EXISTS switches(
  job_id TEXT NOT NULL, at_unix REAL NOT NULL, at_utc TEXT, attempt INTEGER, from_cluster TEXT,
  to_cluster TEXT, why TEXT, PRIMARY KEY(job_id, at_unix));
CREATE VIEW IF NOT EXISTS job_totals AS
  SELECT job_id, COUNT(*) AS attempts, SUM(wall_s) AS wall_s, SUM(MAX(startup_s, 0)) AS startup_s,
         SUM(productive_s) AS productive_s, SUM(lost_steps) AS lost_steps, SUM(lost_s) AS lost_s,
         SUM(lost_usd) AS lost_usd, SUM(checkpoint_s) AS checkpoint_s, SUM(tokens) AS tokens,
         MAX(last_step) AS last_step, SUM(cost_usd) AS cost_usd
  FROM attempts GROUP BY job_id;
)sql";

// Columns added after schema version 1, by table: a ledger written by an older tern gets them (empty) when
// it is opened, so its rows read as they were and new rows have room for the new facts.
struct AddedColumn {
  const char* table;
  const char* column;
  const char* type;
};
constexpr AddedColumn kAddedColumns[] = {
    {"jobs", "slurm_job_id", "TEXT"},
    {"attempts", "slurm_job_id", "TEXT"},
    {"attempts", "slurm_restart_count", "INTEGER"},
};
constexpr int kSchemaVersion = 2;

// One prepared statement: bind in order, step, read columns in order.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) { rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr); }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt& Bind(const std::string& v) {
    sqlite3_bind_text(s_, ++in_, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& Bind(double v) {
    sqlite3_bind_double(s_, ++in_, v);
    return *this;
  }
  Stmt& Bind(int64_t v) {
    sqlite3_bind_int64(s_, ++in_, v);
    return *this;
  }
  Stmt& Bind(int v) { return Bind(static_cast<int64_t>(v)); }
  Stmt& BindStep(int v) {  // a step or -1: NULL for none
    if (v < 0) {
      sqlite3_bind_null(s_, ++in_);
      return *this;
    }
    return Bind(v);
  }
  // SQLITE_ROW: true; SQLITE_DONE: false; else *st set.
  bool Step(Status* st) {
    if (rc_ != SQLITE_OK) {
      *st = Status::Internal(fmt::format("ledger: {}", sqlite3_errmsg(db_)));
      return false;
    }
    out_ = 0;
    const int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) *st = Error(rc);
    return false;
  }
  Status Error(int rc) const {
    return Status::IoError(
        fmt::format("ledger {}: {} (is another process holding it? check the disk and permissions)",
                    sqlite3_db_filename(db_, "main"), sqlite3_errmsg(db_)));
  }
  std::string Text() {
    const unsigned char* t = sqlite3_column_text(s_, out_++);
    return t ? reinterpret_cast<const char*>(t) : "";
  }
  double Real() { return sqlite3_column_double(s_, out_++); }
  int64_t Int() { return sqlite3_column_int64(s_, out_++); }
  int StepOrNone() {
    const bool null = sqlite3_column_type(s_, out_) == SQLITE_NULL;
    const int64_t v = Int();
    return null ? -1 : static_cast<int>(v);
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
  int rc_ = SQLITE_OK, in_ = 0, out_ = 0;
};

constexpr const char* kJobColumns =
    "job_id, run_dir, config, overrides, project, instance, billing, price_per_hour, ranks, where_run, "
    "max_attempts, budget_usd, deadline_unix, created_unix, updated_unix, state, reason, host, "
    "supervisor_pid, cancel_requested, slurm_job_id";

JobRow ReadJob(Stmt& s) {
  JobRow j;
  j.job_id = s.Text();
  j.run_dir = s.Text();
  j.config = s.Text();
  j.overrides = s.Text();
  j.project = s.Text();
  j.instance = s.Text();
  j.billing = s.Text();
  j.price_per_hour = s.Real();
  j.ranks = static_cast<int>(s.Int());
  j.where = s.Text();
  j.max_attempts = static_cast<int>(s.Int());
  j.budget_usd = s.Real();
  j.deadline_unix = s.Real();
  j.created_unix = s.Real();
  j.updated_unix = s.Real();
  j.state = s.Text();
  j.reason = s.Text();
  j.host = s.Text();
  j.supervisor_pid = static_cast<int>(s.Int());
  j.cancel_requested = s.Int() != 0;
  j.slurm_job_id = s.Text();
  return j;
}

constexpr const char* kAttemptColumns =
    "job_id, attempt, state, start_unix, end_unix, seen_unix, host, ranks, exit_code, signal, reason, "
    "message, first_step, last_step, resumed_from, tokens, wall_s, startup_s, productive_s, lost_steps, "
    "lost_s, lost_usd, checkpoint_s, instance, billing, price_per_hour, cost_usd, trainer_pid, "
    "trainer_start, metrics_offset, log, slurm_job_id, slurm_restart_count";

AttemptRow ReadAttempt(Stmt& s) {
  AttemptRow a;
  a.job_id = s.Text();
  a.attempt = static_cast<int>(s.Int());
  a.state = s.Text();
  a.start_unix = s.Real();
  a.end_unix = s.Real();
  a.seen_unix = s.Real();
  a.host = s.Text();
  a.ranks = static_cast<int>(s.Int());
  a.exit_code = s.StepOrNone();
  a.signal = static_cast<int>(s.Int());
  a.reason = s.Text();
  a.message = s.Text();
  a.first_step = s.StepOrNone();
  a.last_step = s.StepOrNone();
  a.resumed_from = s.StepOrNone();
  a.tokens = static_cast<uint64_t>(s.Int());
  a.wall_s = s.Real();
  a.startup_s = s.Real();
  a.productive_s = s.Real();
  a.lost_steps = static_cast<int>(s.Int());
  a.lost_s = s.Real();
  a.lost_usd = s.Real();
  a.checkpoint_s = s.Real();
  a.instance = s.Text();
  a.billing = s.Text();
  a.price_per_hour = s.Real();
  a.cost_usd = s.Real();
  a.trainer_pid = static_cast<int>(s.Int());
  a.trainer_start = s.Text();
  a.metrics_offset = static_cast<uint64_t>(s.Int());
  a.log = s.Text();
  a.slurm_job_id = s.Text();
  a.slurm_restart_count = s.StepOrNone();
  return a;
}

}  // namespace

JobTotals SumAttempts(const std::vector<AttemptRow>& attempts) {
  JobTotals t;
  for (const AttemptRow& a : attempts) {
    t.attempts++;
    t.wall_s += a.wall_s;
    t.startup_s += std::max(0.0, a.startup_s);
    t.productive_s += a.productive_s;
    t.lost_steps += a.lost_steps;
    t.lost_s += a.lost_s;
    t.lost_usd += a.lost_usd;
    t.checkpoint_s += a.checkpoint_s;
    t.tokens += a.tokens;
    t.last_step = std::max(t.last_step, a.last_step);
    t.cost_usd += a.cost_usd;
  }
  return t;
}

Result<std::unique_ptr<Ledger>> Ledger::Open(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  if (!dir.empty()) TERN_RETURN_IF_ERROR(MakeDirs(dir));
  std::unique_ptr<Ledger> l(new Ledger());
  l->path_ = path;
  if (sqlite3_open_v2(path.c_str(), &l->db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    return Status::IoError(fmt::format("cannot open the ledger {}: {}; set TERN_HOME to a writable directory",
                                       path, l->db_ ? sqlite3_errmsg(l->db_) : "out of memory"));
  }
  sqlite3_busy_timeout(l->db_, 15000);  // another supervisor or `tern job` holds the lock for milliseconds
  TERN_RETURN_IF_ERROR(l->Exec("PRAGMA synchronous=NORMAL;"));
  TERN_RETURN_IF_ERROR(l->Exec(kSchema));
  TERN_RETURN_IF_ERROR(l->Migrate());
  return l;
}

Ledger::~Ledger() {
  sqlite3_close(db_);
}

Status Ledger::Exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) == SQLITE_OK) return Status::Ok();
  std::string msg = err ? err : "unknown error";
  sqlite3_free(err);
  return Status::IoError(fmt::format("ledger {}: {}", path_, msg));
}

Status Ledger::Migrate() {
  Stmt version(db_, "SELECT value FROM meta WHERE key = 'schema_version'");
  Status st;
  const int found = version.Step(&st) ? std::atoi(version.Text().c_str()) : kSchemaVersion;
  TERN_RETURN_IF_ERROR(st);
  if (found > kSchemaVersion) {
    return Status::InvalidArgument(
        fmt::format("ledger {} has schema version {}, newer than this tern's {}: upgrade tern to read it",
                    path_, found, kSchemaVersion));
  }
  if (found == kSchemaVersion) return Status::Ok();
  for (const AddedColumn& c : kAddedColumns) {
    Stmt has(
        db_,
        fmt::format("SELECT 1 FROM pragma_table_info('{}') WHERE name = '{}'", c.table, c.column).c_str());
    const bool present = has.Step(&st);
    TERN_RETURN_IF_ERROR(st);
    if (!present)
      TERN_RETURN_IF_ERROR(Exec(fmt::format("ALTER TABLE {} ADD COLUMN {} {};", c.table, c.column, c.type)));
  }
  return Exec(fmt::format("UPDATE meta SET value = '{}' WHERE key = 'schema_version';", kSchemaVersion));
}

Status Ledger::PutJob(const JobRow& j) {
  Stmt s(db_,
         "INSERT INTO jobs (job_id, run_dir, config, overrides, project, instance, billing, price_per_hour, "
         "ranks, where_run, max_attempts, budget_usd, deadline_unix, created_unix, updated_unix, state, "
         "reason, host, supervisor_pid, slurm_job_id) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) "
         "ON CONFLICT(job_id) DO UPDATE SET run_dir=excluded.run_dir, config=excluded.config, "
         "overrides=excluded.overrides, project=excluded.project, instance=excluded.instance, "
         "billing=excluded.billing, price_per_hour=excluded.price_per_hour, ranks=excluded.ranks, "
         "where_run=excluded.where_run, max_attempts=excluded.max_attempts, budget_usd=excluded.budget_usd, "
         "deadline_unix=excluded.deadline_unix, created_unix=excluded.created_unix, "
         "updated_unix=excluded.updated_unix, state=excluded.state, reason=excluded.reason, "
         "host=excluded.host, supervisor_pid=excluded.supervisor_pid, slurm_job_id=excluded.slurm_job_id");
  s.Bind(j.job_id).Bind(j.run_dir).Bind(j.config).Bind(j.overrides).Bind(j.project).Bind(j.instance);
  s.Bind(j.billing).Bind(j.price_per_hour).Bind(j.ranks).Bind(j.where).Bind(j.max_attempts);
  s.Bind(j.budget_usd).Bind(j.deadline_unix).Bind(j.created_unix).Bind(j.updated_unix).Bind(j.state);
  s.Bind(j.reason).Bind(j.host).Bind(j.supervisor_pid).Bind(j.slurm_job_id);
  Status st;
  s.Step(&st);
  return st;
}

Status Ledger::PutAttempt(const AttemptRow& a) {
  Stmt s(db_, fmt::format("INSERT OR REPLACE INTO attempts ({}, start_utc, end_utc) VALUES "
                          "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                          kAttemptColumns)
                  .c_str());
  s.Bind(a.job_id).Bind(a.attempt).Bind(a.state).Bind(a.start_unix).Bind(a.end_unix).Bind(a.seen_unix);
  s.Bind(a.host).Bind(a.ranks).BindStep(a.exit_code).Bind(a.signal).Bind(a.reason).Bind(a.message);
  s.BindStep(a.first_step).BindStep(a.last_step).BindStep(a.resumed_from);
  s.Bind(static_cast<int64_t>(a.tokens)).Bind(a.wall_s).Bind(a.startup_s).Bind(a.productive_s);
  s.Bind(a.lost_steps).Bind(a.lost_s).Bind(a.lost_usd).Bind(a.checkpoint_s).Bind(a.instance);
  s.Bind(a.billing).Bind(a.price_per_hour).Bind(a.cost_usd).Bind(a.trainer_pid).Bind(a.trainer_start);
  s.Bind(static_cast<int64_t>(a.metrics_offset))
      .Bind(a.log)
      .Bind(a.slurm_job_id)
      .BindStep(a.slurm_restart_count)
      .Bind(FormatUtc(a.start_unix))
      .Bind(FormatUtc(a.end_unix));
  Status st;
  s.Step(&st);
  return st;
}

Status Ledger::SetCancel(const std::string& job_id, bool cancel) {
  Stmt s(db_, "UPDATE jobs SET cancel_requested = ? WHERE job_id = ?");
  s.Bind(cancel ? 1 : 0).Bind(job_id);
  Status st;
  s.Step(&st);
  return st;
}

Status Ledger::SetSlurmJob(const std::string& job_id, const std::string& slurm_job_id,
                           const std::string& reason) {
  Stmt s(db_,
         "UPDATE jobs SET slurm_job_id = ?, reason = CASE WHEN state = 'queued' THEN ? ELSE reason END "
         "WHERE job_id = ?");
  s.Bind(slurm_job_id).Bind(reason).Bind(job_id);
  Status st;
  s.Step(&st);
  return st;
}

Result<std::optional<JobRow>> Ledger::FindJob(const std::string& run_dir) {
  Stmt s(db_,
         fmt::format("SELECT {} FROM jobs WHERE run_dir = ? ORDER BY created_unix DESC LIMIT 1", kJobColumns)
             .c_str());
  s.Bind(run_dir);
  Status st;
  if (s.Step(&st)) return std::optional<JobRow>(ReadJob(s));
  if (!st.ok()) return st;
  return std::optional<JobRow>();
}

Result<std::optional<JobRow>> Ledger::GetJob(const std::string& job_id) {
  Stmt s(db_, fmt::format("SELECT {} FROM jobs WHERE job_id = ?", kJobColumns).c_str());
  s.Bind(job_id);
  Status st;
  if (s.Step(&st)) return std::optional<JobRow>(ReadJob(s));
  if (!st.ok()) return st;
  return std::optional<JobRow>();
}

Result<std::vector<JobRow>> Ledger::Jobs() {
  Stmt s(db_, fmt::format("SELECT {} FROM jobs ORDER BY created_unix DESC", kJobColumns).c_str());
  std::vector<JobRow> out;
  Status st;
  while (s.Step(&st)) out.push_back(ReadJob(s));
  if (!st.ok()) return st;
  return out;
}

Result<std::vector<AttemptRow>> Ledger::Attempts(const std::string& job_id) {
  Stmt s(db_,
         fmt::format("SELECT {} FROM attempts WHERE job_id = ? ORDER BY attempt", kAttemptColumns).c_str());
  s.Bind(job_id);
  std::vector<AttemptRow> out;
  Status st;
  while (s.Step(&st)) out.push_back(ReadAttempt(s));
  if (!st.ok()) return st;
  return out;
}

Status Ledger::PutSwitch(const SwitchRow& w) {
  Stmt s(db_,
         "INSERT OR REPLACE INTO switches (job_id, at_unix, at_utc, attempt, from_cluster, to_cluster, why) "
         "VALUES (?,?,?,?,?,?,?)");
  s.Bind(w.job_id)
      .Bind(w.at_unix)
      .Bind(FormatUtc(w.at_unix))
      .Bind(w.attempt)
      .Bind(w.from)
      .Bind(w.to)
      .Bind(w.why);
  Status st;
  s.Step(&st);
  return st;
}

Result<std::vector<SwitchRow>> Ledger::Switches(const std::string& job_id) {
  Stmt s(db_,
         "SELECT job_id, at_unix, attempt, from_cluster, to_cluster, why FROM switches WHERE job_id = ? "
         "ORDER BY at_unix");
  s.Bind(job_id);
  std::vector<SwitchRow> out;
  Status st;
  while (s.Step(&st)) {
    SwitchRow w;
    w.job_id = s.Text();
    w.at_unix = s.Real();
    w.attempt = static_cast<int>(s.Int());
    w.from = s.Text();
    w.to = s.Text();
    w.why = s.Text();
    out.push_back(std::move(w));
  }
  if (!st.ok()) return st;
  return out;
}

std::string DefaultLedgerPath() {
  if (const char* home = std::getenv("TERN_HOME"); home && *home) return std::string(home) + "/ledger.sqlite";
  const char* home = std::getenv("HOME");
  if (!home || !*home) {
    const passwd* pw = getpwuid(getuid());
    home = pw && pw->pw_dir ? pw->pw_dir : "/tmp";
  }
  return std::string(home) + "/.tern/ledger.sqlite";
}

std::string RunDirLedgerPath(const std::string& run_dir) {
  return run_dir + "/ledger.sqlite";
}

}  // namespace tern::run
