// Slurm as the place a job runs (`tern run --on slurm`, docs/jobs.md). The job's supervisor runs inside the
// allocation, in a batch script tern writes and submits with sbatch:
//
//   tern run CONFIG --on slurm        -> RUN_DIR/slurm/job.sbatch, `sbatch --parsable`, the job row "queued"
//   the batch script                  -> `tern run CONFIG ... --slurm-batch` (the supervisor), which launches
//                                        each attempt as `srun -n RANKS tern train CONFIG --resume auto`
//                                        (one rank: `tern train` in the batch step itself)
//   USR1 before the time limit        -> (--signal=B:USR1@job.signal_lead) the script tells the supervisor,
//                                        the trainer saves, the supervisor exits 75, the script requeues
//   a preemption, `scontrol requeue`  -> Slurm's SIGTERM reaches every process: the trainer saves and
//                                        exits 75; Slurm starts the script again (SLURM_RESTART_COUNT + 1)
//   tern job status / cancel          -> `scontrol show job`, `scancel`
//
// Every restart of the script continues the same job from its ledger (the run directory must be on a file
// system the nodes share), so a job requeued N times is one job with N+1 attempts and one bill.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "run/job_spec.h"

namespace tern::run {

// A program run to its end without a shell (argv as given): its exit code and what it printed.
struct ProgramResult {
  int code = -1;  // -1: killed by a signal
  std::string out, err;
};
// An error only when it could not be started (not installed: the message names `what_to_install`).
[[nodiscard]] Result<ProgramResult> RunProgram(const std::vector<std::string>& argv,
                                               const std::string& what_to_install);

// Single-quoted for bash: safe for any text.
std::string ShellQuote(const std::string& text);

// What the batch script runs: `TERN run RUN_ARGS... --slurm-batch` in WORKDIR.
struct BatchCommand {
  std::string tern;                   // the tern binary, absolute
  std::vector<std::string> run_args;  // the arguments `tern run` was given (CONFIG, --set, the job flags)
  std::string workdir;                // where they were given: relative paths in them resolve from here
};
// The sbatch script: #SBATCH lines from the job (--job-name, --nodes, --ntasks, --gpus-per-task, --time,
// --requeue, --signal=B:USR1@lead, --open-mode=append, --output to RUN_DIR/logs/slurm-%j.out, --chdir,
// then job.sbatch_args), then the supervisor, the signal traps, and the requeue at the time limit.
std::string SbatchScript(const JobSpec& spec, const BatchCommand& command);
// Where the script is written: RUN_DIR/slurm/job.sbatch.
std::string SbatchScriptPath(const JobSpec& spec);

// The command before the trainer inside the allocation. One rank: none, the trainer runs in the batch step
// itself. More: srun --ntasks N --kill-on-bad-exit=1 and job.srun_args (default --mpi=pmix: Debian's Open
// MPI needs PMIx under srun). srun answers a SIGTERM by killing its tasks (SIGKILL: "forcing job
// termination"), so the supervisor stops an srun step with SIGUSR1, which srun forwards and the trainer
// saves on; a SIGTERM from Slurm itself (a preemption without warning, a plain scancel) costs a multi-rank
// step the steps since its last checkpoint (the ledger counts them as lost work).
std::vector<std::string> SrunPrefix(const JobSpec& spec);

struct SlurmJobInfo {
  std::string id;
  std::string state;   // PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, ...; "" = Slurm forgot the job
  std::string reason;  // why it waits (BeginTime, Resources, Priority, ...); "None" when it does not
  std::string nodes;   // where it runs
  int restarts = 0;    // requeues so far
  // Still Slurm's: waiting, running, or on its way (configuring, completing, requeued, suspended).
  bool active() const;
};
// sbatch --parsable SCRIPT -> the job id.
[[nodiscard]] Result<std::string> SubmitBatch(const std::string& script_path);
// `scontrol show job -o ID` (Slurm keeps a finished job for MinJobAge, 300 s by default; after that the
// state is "").
[[nodiscard]] Result<SlurmJobInfo> QuerySlurmJob(const std::string& id);
// scancel ID: Slurm sends SIGTERM to every process of the job (the trainer saves), then SIGKILL after
// KillWait.
[[nodiscard]] Status CancelSlurmJob(const std::string& id);

// Inside an allocation: SLURM_JOB_ID ("" outside) and SLURM_RESTART_COUNT (0 when unset: the first start).
std::string SlurmJobIdFromEnv();
int SlurmRestartCountFromEnv();

}  // namespace tern::run
