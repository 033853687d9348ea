// A job's rows, kept in both ledgers at once: the run directory's copy (the job's own record, read first)
// and the all-jobs ledger. Every write goes to both; rows are whole (upserts), so a write that failed is
// mended by the next one. Also the run directory's lock: one supervisor per run directory.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "run/job_spec.h"
#include "run/ledger.h"

namespace tern::run {

class JobBook {
 public:
  // Opens RUN_DIR/ledger.sqlite and `global_path` ("" = none) and reads the run directory's newest job,
  // if any (from its copy, else from the global ledger).
  static Result<std::unique_ptr<JobBook>> Open(const std::string& run_dir, const std::string& global_path);

  bool has_job() const { return !job_.job_id.empty(); }
  JobRow& job() { return job_; }
  std::vector<AttemptRow>& attempts() { return attempts_; }
  JobTotals totals() const { return SumAttempts(attempts_); }
  // The highest step the job's attempts before `attempt` reached (-1 = none).
  int LastStepBefore(int attempt) const;

  Status SaveJob();
  Status SaveAttempt(const AttemptRow& a);  // also updates attempts()
  Status SaveSwitch(const SwitchRow& w);    // the live spot policy's switches (both ledgers)
  // The switches in the run directory's ledger, oldest first.
  Result<std::vector<SwitchRow>> Switches();
  // Whether `tern job cancel` asked this job to stop (read from the run directory's ledger).
  bool CancelRequested();
  Status ClearCancel();
  std::vector<std::string> ledger_paths() const;

 private:
  JobBook() = default;
  std::unique_ptr<Ledger> local_, global_;
  JobRow job_;
  std::vector<AttemptRow> attempts_;
};

// An exclusive lock on RUN_DIR/.tern-run.lock (flock: released by the kernel when the holder dies, even
// by kill -9). Holds "pid host" of its holder for the message a second supervisor gets.
class RunDirLock {
 public:
  [[nodiscard]] static Result<std::unique_ptr<RunDirLock>> Take(const std::string& run_dir);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

 private:
  RunDirLock() = default;
  int fd_ = -1;
};

std::string HostName();

// A new job's id: the run directory's name, the UTC time, and 4 hex digits of its path (two run directories
// of the same name started in the same second are still two jobs): "demo-20250102T030405-1a2b".
std::string NewJobId(const std::string& run_dir, double now_unix);
// Copies what the job spec says about the job (config, price, ranks, limits, ...) into its row.
void DescribeJob(const JobSpec& spec, JobRow* job);

}  // namespace tern::run
