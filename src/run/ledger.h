// The ledger: one SQLite file for every job (`$TERN_HOME/ledger.sqlite`, default ~/.tern/), and a copy of
// each job's own rows in its run directory (RUN_DIR/ledger.sqlite), which travels with the run. One row per
// job and one per attempt; the view job_totals sums the attempts. The schema is in docs/jobs.md.
//
// Writers: the supervisor of the job (one per run directory: RunDirLock, run/job_book.h), and `tern job
// cancel`, which only sets jobs.cancel_requested (PutJob never overwrites it). SQLite's own locking
// serialises them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

struct sqlite3;

namespace tern::run {

struct JobRow {
  std::string job_id;     // "<run dir name>-<UTC yyyymmddThhmmss>"
  std::string run_dir;    // absolute
  std::string config;     // the training config as given
  std::string overrides;  // the --set k=v given, one per line
  std::string project;
  std::string instance;  // provider:region:type:billing, or "" for a price given by hand
  std::string billing;   // on-demand | spot | reserved | custom | none
  double price_per_hour = 0;
  int ranks = 1;
  std::string where = "local";
  int max_attempts = 0;
  double budget_usd = 0;     // 0 = none
  double deadline_unix = 0;  // 0 = none
  double created_unix = 0, updated_unix = 0;
  // running | done | failed (the trainer refused the config) | stopped (max attempts, budget, deadline)
  // | paused (the supervisor was signalled: run `tern run` again) | cancelled
  std::string state = "running";
  std::string reason;  // why it is in that state, in words
  std::string host;    // of the supervisor
  int supervisor_pid = 0;
  bool cancel_requested = false;  // read only here; set by SetCancel
  std::string slurm_job_id;       // where = slurm: the Slurm job that runs it ("" = none yet)
};

struct AttemptRow {
  std::string job_id;
  int attempt = 0;                                     // 1, 2, ...: continues across supervisor restarts
  std::string state = "running";                       // running | ended | lost (its supervisor died)
  double start_unix = 0, end_unix = 0, seen_unix = 0;  // seen: the supervisor last looked (lost attempts)
  std::string host;
  int ranks = 1;
  int exit_code = -1;  // -1: none (killed by a signal, or lost)
  int signal = 0;      // the signal that ended it, 0 = none
  // done | preempted | crashed | signal | hung | bad_config | interrupted | budget | deadline | cancelled
  // | lost | launch_failed
  std::string reason;
  std::string message;  // the trainer's last words (bad config, crash) or the supervisor's
  int first_step = -1, last_step = -1, resumed_from = -1;  // -1 = none
  uint64_t tokens = 0;
  double wall_s = 0;        // launch to exit, start-up included: what is billed
  double startup_s = -1;    // launch to the start of the first step; -1 = unknown
  double productive_s = 0;  // time in steps that advanced the job
  int lost_steps = 0;       // steps redone: at or below the job's last step before this attempt
  double lost_s = 0, lost_usd = 0;
  double checkpoint_s = 0;  // training time spent saving: stalls, waits, the emergency save
  std::string instance, billing;
  double price_per_hour = 0;
  double cost_usd = 0;  // price x wall
  int trainer_pid = 0;
  std::string trainer_start;     // /proc/PID/stat start time, to recognise the process after a restart
  uint64_t metrics_offset = 0;   // size of metrics.jsonl at launch: this attempt's rows follow
  std::string log;               // the trainer's stdout and stderr
  std::string slurm_job_id;      // under Slurm: SLURM_JOB_ID of the allocation it ran in
  int slurm_restart_count = -1;  // SLURM_RESTART_COUNT (0 = the job's first start; -1 = not under Slurm)
};

// A switch of the live spot policy (`tern run --policy uniform-progress`, run/live_policy.h): at a decision
// the job moved from one cluster to another (spot | on-demand | none: waiting for spot), and why.
struct SwitchRow {
  std::string job_id;
  double at_unix = 0;  // the decision's time
  int attempt = 0;     // the attempt running when it was decided, or the last one before (0 = none yet)
  std::string from, to, why;
};

struct JobTotals {
  int attempts = 0;
  double wall_s = 0, startup_s = 0, productive_s = 0, lost_s = 0, lost_usd = 0, checkpoint_s = 0;
  int lost_steps = 0, last_step = -1;
  uint64_t tokens = 0;
  double cost_usd = 0;
};
JobTotals SumAttempts(const std::vector<AttemptRow>& attempts);

class Ledger {
 public:
  // Opens (creating it, its directory and the schema if needed) the ledger at `path`.
  static Result<std::unique_ptr<Ledger>> Open(const std::string& path);
  ~Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  Status PutJob(const JobRow& job);  // insert or update; never touches cancel_requested
  Status PutAttempt(const AttemptRow& attempt);
  Status SetCancel(const std::string& job_id, bool cancel);
  // Sets jobs.slurm_job_id, and the reason while the job is still "queued" (one statement: a supervisor
  // that started meanwhile keeps its state).
  Status SetSlurmJob(const std::string& job_id, const std::string& slurm_job_id,
                     const std::string& reason);  // `tern job cancel`; a new supervisor clears it
  Result<std::optional<JobRow>> FindJob(const std::string& run_dir);  // the newest job of that run dir
  Result<std::optional<JobRow>> GetJob(const std::string& job_id);
  Result<std::vector<JobRow>> Jobs();  // newest first
  Result<std::vector<AttemptRow>> Attempts(const std::string& job_id);
  Status PutSwitch(const SwitchRow& row);  // insert or replace (one per job and time)
  Result<std::vector<SwitchRow>> Switches(const std::string& job_id);  // oldest first
  const std::string& path() const { return path_; }

 private:
  Ledger() = default;
  Status Exec(const std::string& sql);
  Status Migrate();  // adds the columns an older ledger lacks; refuses a newer one
  sqlite3* db_ = nullptr;
  std::string path_;
};

// $TERN_HOME/ledger.sqlite, else ~/.tern/ledger.sqlite ($HOME, else the passwd entry).
std::string DefaultLedgerPath();
// RUN_DIR/ledger.sqlite: the run directory's copy.
std::string RunDirLedgerPath(const std::string& run_dir);

}  // namespace tern::run
