// Starting the trainer of one attempt and watching it: a narrow interface (launch; then poll, signal,
// kill), one implementation per place a job runs. `local` is this machine: fork/exec, through mpirun when
// the job has more than one rank; inside a Slurm allocation the same fork/exec runs srun (run/slurm.h).
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "run/job_spec.h"

namespace tern::run {

struct LaunchSpec {
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;  // added to the supervisor's environment
  std::string log_path;                                  // stdout and stderr go here (appended)
};

struct ExitStatus {
  int code = -1;                 // the exit code, -1 when a signal ended it
  int signal = 0;                // the signal that ended it, 0 = none
  std::string Describe() const;  // "exit 75", "killed by SIGKILL"
};

class TrainerProcess {
 public:
  virtual ~TrainerProcess() = default;
  virtual pid_t pid() const = 0;
  virtual std::string start_time() const = 0;    // recognises this process after a supervisor restart
  virtual std::optional<ExitStatus> Poll() = 0;  // non-blocking; the exit once it has happened
  virtual void Signal(int sig) = 0;              // to the trainer (or to mpirun, which forwards it)
  virtual void Kill() = 0;                       // SIGKILL to its whole process group
};

class Launcher {
 public:
  virtual ~Launcher() = default;
  virtual Result<std::unique_ptr<TrainerProcess>> Launch(const LaunchSpec& spec) = 0;
};

// fork/exec on this machine. The child gets its own process group (a Ctrl-C at the terminal reaches the
// supervisor only, which stops the trainer with a SIGTERM so that it saves) and SIGTERM when the
// supervisor dies (PR_SET_PDEATHSIG), so a `kill -9`ed supervisor leaves no trainer behind that would
// race its successor.
class LocalLauncher : public Launcher {
 public:
  Result<std::unique_ptr<TrainerProcess>> Launch(const LaunchSpec& spec) override;
};

// What one attempt knows when it is launched.
struct AttemptVars {
  int attempt = 1;
  std::string job_id;
  double cost_offset_usd = 0;     // the job's spend before this attempt
  double billing_start_unix = 0;  // this attempt's launch
  double mtbf_s = 0;              // the job's preemption hazard for ckpt.every: auto (run/hazard.h); 0 = none
  std::string mtbf_source;        // where it came from, in words
};

// The attempt's command: [mpirun ARGS -np N | srun ARGS (job.on slurm)] TRAINER... CONFIG --resume auto
// [--set k=v]... plus the keys that make the trainer's cost the job's (run.price_per_hour,
// run.cost_offset_usd, run.billing_start_unix). `trainer` is the command before CONFIG, e.g.
// {"/usr/bin/tern", "train"}.
std::vector<std::string> AttemptArgv(const JobSpec& spec, const std::vector<std::string>& trainer,
                                     const AttemptVars& vars);
// The variables the trainer gets: TERN_JOB_ID, TERN_ATTEMPT.
std::vector<std::pair<std::string, std::string>> AttemptEnv(const AttemptVars& vars);
// With ranks > 1 as root, mpirun refuses to start unless told: an error naming the fix, before launching.
[[nodiscard]] Status CheckMpirunAllowed(const JobSpec& spec);

// /proc/PID/stat's start time of a process ("" when there is none), and whether PID is that process and
// alive (not a zombie).
std::string ProcessStartTime(pid_t pid);
bool ProcessAlive(pid_t pid, const std::string& start_time);

}  // namespace tern::run
