// Where a trial's rungs run (docs/sweep.md). Each rung is one `tern run` command; a TrialRunner starts it,
// says when it has ended, and after a restart of the sweep says whether a rung recorded as running is still
// being run somewhere (so that it is followed again, not started twice):
//
//   LocalTrials   the command as a child process of the sweep (N at a time on this machine); the children
//                 die with the sweep, so a restart runs the rung again
//   SlurmTrials   the command with --on=slurm: `tern run` writes the batch script and submits it
//   (run/slurm.h,
//                 the same as `tern run --on slurm`), the Slurm job id is recorded in the trial's row, and
//                 the job is followed with scontrol; a restart follows the recorded job again while Slurm
//                 still has it (queued or running), and takes its end as Slurm says it (COMPLETED, or failed)
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "run/slurm.h"
#include "sweep/store.h"

namespace tern::sweep {

// How a rung ended: ok (the command succeeded; the loss is read from the run directory), or why not.
struct RungEnd {
  bool ok = false;
  std::string why;
};

class TrialRunner {
 public:
  virtual ~TrialRunner() = default;
  // Starts the rung of `t` (args: the `tern run` command, with the place's own flags added here); may record
  // what it needs to follow the rung in *t (the Slurm job id), which the sweep then stores.
  [[nodiscard]] virtual Status Start(TrialRow* t, const std::vector<std::string>& args) = 0;
  // The rung's end, or nullopt while it runs.
  [[nodiscard]] virtual Result<std::optional<RungEnd>> Poll(const TrialRow& t) = 0;
  // After a restart, for a trial recorded as running: true when its rung is followed again (Poll will say
  // how it ended), false when it must be started again.
  [[nodiscard]] virtual Result<bool> Reattach(TrialRow* t) = 0;
};

class LocalTrials : public TrialRunner {
 public:
  Status Start(TrialRow* t, const std::vector<std::string>& args) override;
  Result<std::optional<RungEnd>> Poll(const TrialRow& t) override;
  Result<bool> Reattach(TrialRow*) override { return false; }  // the rung died with the sweep

 private:
  std::map<int, int> pids_;  // trial id -> pid
};

// What SlurmTrials asks of Slurm, behind an interface so that the re-attach logic is tested with a fake.
class SlurmClient {
 public:
  virtual ~SlurmClient() = default;
  // Runs `tern run ... --on=slurm` (args) to its end, its output appended to `log`, and returns the Slurm
  // job id it submitted (as the run directory's ledger records it).
  [[nodiscard]] virtual Result<std::string> Submit(const std::vector<std::string>& args,
                                                   const std::string& run_dir, const std::string& log) = 0;
  // scontrol show job (state "" once Slurm has forgotten it).
  [[nodiscard]] virtual Result<run::SlurmJobInfo> Query(const std::string& slurm_job_id) = 0;
  // The Slurm job id the run directory's ledger holds ("" = none): a submission the sweep did not record.
  // Read once any submission still in flight has ended (a sweep killed while `tern run --on slurm` was
  // submitting leaves that child running: it holds RUN_DIR.lock until it has recorded the job).
  [[nodiscard]] virtual Result<std::string> LedgerSlurmJob(const std::string& run_dir) = 0;
  // The run directory's job state in its ledger ("done", "stopped", ...; "" = no job).
  virtual std::string LedgerJobState(const std::string& run_dir) = 0;
};

// The real one: the tern binary, scontrol, the run directory's ledger.
class RealSlurmClient : public SlurmClient {
 public:
  Result<std::string> Submit(const std::vector<std::string>& args, const std::string& run_dir,
                             const std::string& log) override;
  Result<run::SlurmJobInfo> Query(const std::string& slurm_job_id) override;
  Result<std::string> LedgerSlurmJob(const std::string& run_dir) override;
  std::string LedgerJobState(const std::string& run_dir) override;
};

class SlurmTrials : public TrialRunner {
 public:
  // `poll_s`: the least time between two queries of one job.
  explicit SlurmTrials(SlurmClient* client, double poll_s = 1.0) : client_(client), poll_s_(poll_s) {}
  Status Start(TrialRow* t, const std::vector<std::string>& args) override;
  Result<std::optional<RungEnd>> Poll(const TrialRow& t) override;
  Result<bool> Reattach(TrialRow* t) override;

 private:
  SlurmClient* client_;
  double poll_s_;
  std::map<int, double> last_poll_;  // trial id -> when its job was last queried (steady seconds)
};

// The sweep's job: keys as `tern run` flags: {"time_limit", "0:30:00"} -> "--time-limit=0:30:00".
std::vector<std::string> JobFlags(const std::vector<std::pair<std::string, std::string>>& job);

}  // namespace tern::sweep
