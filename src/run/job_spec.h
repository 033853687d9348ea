// What `tern run` is asked to do: the training config, where and for how much it runs, and when to give
// up. Read from the config's `job:` section, then from the flags (a flag wins). docs/jobs.md lists the keys.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace tern::run {

struct JobSpec {
  // what to train
  std::string config_path;             // the training config (YAML), passed to `tern train` unchanged
  std::vector<std::string> overrides;  // --set section.key=value, passed on too
  std::string run_dir;                 // the config's run.dir after the overrides, absolute
  int total_steps = 0;                 // the config's train.steps (progress lines)
  bool cuda = false;                   // the config's train.device is cuda (Slurm: a GPU per rank)
  // where, and for how much
  std::string instance;          // job.instance / --instance: provider:region:type[:billing]; "" = none
  std::string billing = "none";  // on-demand | spot | reserved (from the instance) | custom | none
  double price_per_hour = 0;     // USD for the machine (all ranks); from the catalog or job.price_per_hour
  int ranks = 1;                 // trainer processes; > 1 launches them through mpirun (srun under Slurm)
  int min_ranks = 0;             // elastic (job.ranks MIN-MAX): fewer may start an attempt; 0 = exactly ranks
  std::string ranks_probe;       // elastic: a shell command that prints how many ranks can run now
  std::string where = "local";   // local | slurm
  std::vector<std::string> mpirun_args;  // e.g. --allow-run-as-root --oversubscribe (job.mpirun_args)
  // Slurm (where = slurm; docs/jobs.md)
  int nodes = 1;                         // sbatch --nodes
  int gpus_per_rank = -1;                // sbatch --gpus-per-task; -1 = 1 for a cuda config, else 0
  std::string time_limit;                // sbatch --time (e.g. "4:00:00"); "" = the partition's
  double signal_lead_s = 120;            // sbatch --signal=B:USR1@N: save this long before the limit
  std::vector<std::string> sbatch_args;  // more sbatch options, e.g. --partition=gpu --account=ml
  std::vector<std::string> srun_args;    // srun options for the trainer step; ranks > 1 default --mpi=pmix
  // when to give up
  int max_attempts = 10;  // attempts in all, across supervisor restarts
  double budget_usd = 0;  // stop when the job has spent this; 0 = no budget
  std::string deadline;   // "12h" (after the job was created) or a UTC time; "" = none
  std::string project;    // a tag for the spend reports (tern job ls --json)
  // the live spot policy (run/live_policy.h): "" = none (the instance's billing throughout), or
  // "uniform-progress": each attempt on spot or on-demand as Uniform Progress decides; needs a deadline
  std::string policy;
  double restart_overhead_s = 300;  // d: a new instance's start-up and resume, for the policy
  double policy_tick_s = 60;        // how often the policy decides while an attempt runs
  double spot_price_per_hour = 0;   // the instance's two prices (the catalog), for the policy's billing
  double ondemand_price_per_hour = 0;
  // watching the trainer
  double heartbeat_s = 600;    // metrics.jsonl silent this long = hung (killed, relaunched); 0 = off
  double kill_grace_s = 120;   // after a SIGTERM, how long the trainer may take to save before SIGKILL
  double backoff_s = 10;       // first wait after a crash; doubles per failure in a row
  double backoff_max_s = 600;  // the longest wait
};

// Sets one job key ("ranks", "budget", ... without the "job." prefix) from text, as the YAML section and
// the flags do. An unknown key or a bad value is an error naming it and what is allowed.
[[nodiscard]] Status SetJobKey(const std::string& key, const std::string& value, JobSpec* spec);
// The `job:` section of a config file, if it has one.
[[nodiscard]] Status LoadJobSection(const std::string& config_path, JobSpec* spec);
// Whether an attempt may start with fewer than `ranks` processes (job.ranks MIN-MAX, MIN < MAX).
inline bool Elastic(const JobSpec& spec) {
  return spec.min_ranks > 0 && spec.min_ranks < spec.ranks;
}
// Checks the spec as a whole (a price without an instance or with one, ranks, where).
[[nodiscard]] Status ValidateJobSpec(const JobSpec& spec);
// The deadline as UTC seconds for a job created at `created_unix`; 0 when there is none.
[[nodiscard]] Result<double> DeadlineUnix(const std::string& deadline, double created_unix);
// "600", "90s", "10m", "2h" -> seconds (a bare number is seconds).
[[nodiscard]] Result<double> ParseSeconds(const std::string& text, const std::string& what);
// Reads the training config with the overrides, as `tern train` will, and takes what the job needs from
// it: run.dir (made absolute), train.steps, and run.price_per_hour into *config_price. Its errors are the
// trainer's (an unknown key, a bad value, data.dir unset): exit 2 before anything is launched.
[[nodiscard]] Status ReadTrainConfig(JobSpec* spec, double* config_price);
// Every key with its meaning, for --help and the docs.
std::string DescribeJobKeys();

}  // namespace tern::run
