// The supervisor: launches `tern train --resume auto` until the job is done, and keeps the ledger.
//
//   exit 0                      -> done
//   exit 75 (preempted, saved)  -> relaunch at once
//   a crash, a signal, hung     -> relaunch after a backoff (doubling per failure in a row)
//   exit 2 (bad config)         -> stop with the trainer's message; a retry cannot help
//   max attempts, budget, deadline -> stop and say which (budget and deadline also stop a running trainer,
//                                     with a SIGTERM so that it saves first)
//   SIGTERM/SIGUSR1/SIGINT to the supervisor -> forwarded to the trainer (it saves and exits 75), then the
//                                     supervisor exits 75 itself: run it again to continue
// Hung: metrics.jsonl did not grow for job.heartbeat seconds: SIGTERM, then SIGKILL after job.kill_grace.
// Elastic (job.ranks MIN-MAX): each attempt starts with the ranks that can run then (run/elastic.h); with
// fewer than MIN the supervisor waits (the backoff) and asks again.
// Restarted on the same run directory (even after kill -9) it reads the ledger and carries on: attempt
// numbers continue, and an attempt its dead predecessor left running is closed as "lost".
// With a live policy (job.policy uniform-progress, run/live_policy.h) each attempt runs on spot or on-demand
// as the policy decides, billed at that price; while it runs the policy decides again every job.policy_tick,
// and a change stops it (reason "switch": it saves) and starts the next on the other; spot taken back by the
// market stops it as a notice would ("preempted"); "none" waits for spot. Each change is a row of the
// ledger's switches table. The state machine is drawn in docs/jobs.md.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "run/clock.h"
#include "run/job_spec.h"
#include "run/launcher.h"
#include "run/ledger.h"
#include "run/live_policy.h"

namespace tern::run {

// `tern run`'s exit codes.
inline constexpr int kRunDone = 0;
inline constexpr int kRunStopped = 1;       // max attempts, budget, deadline, cancelled, cannot launch
inline constexpr int kRunBadConfig = 2;     // the trainer (or tern run) refused the config
inline constexpr int kRunInterrupted = 75;  // the supervisor was signalled: run it again to continue

struct SupervisorOptions {
  JobSpec spec;
  std::vector<std::string> trainer;  // the command before CONFIG, e.g. {"/usr/bin/tern", "train"}
  std::string ledger_path;           // the all-jobs ledger; "" = only the run directory's copy
  double poll_s = 0.1;               // how often the trainer and its metrics are looked at
  std::FILE* console = stderr;       // progress lines; null = silent
  bool echo_trainer = true;          // copy the trainer's output to the console too
  bool handle_signals = true;        // install the SIGTERM/SIGUSR1/SIGINT handlers while running
  double save_every_s = 2.0;         // how often a running attempt's row is written (for a successor)
  // The spot market the live policy (spec.policy) reads; null = LocalSpotMarket (run/live_policy.h).
  SpotMarket* market = nullptr;
};

struct JobOutcome {
  int exit_code = kRunDone;
  JobRow job;
  std::vector<AttemptRow> attempts;
  JobTotals totals;
};

// What follows an attempt that ended for `reason` (AttemptRow::reason).
enum class Next { kRelaunchNow, kRelaunchAfterBackoff, kDone, kFailed, kStopped, kPaused, kCancelled };
Next NextAfter(const std::string& reason);
// The wait before the next launch after `failures_in_a_row` (>= 1) crashes, signals or hangs in a row.
double BackoffSeconds(const JobSpec& spec, int failures_in_a_row);
// Failing attempts at the end of the history, since the last that finished, was preempted, or advanced
// the job beyond every attempt before it.
int FailuresInARow(const std::vector<AttemptRow>& attempts);
// Seconds per step from the job's time in new steps (0 = not measured yet).
double StepSeconds(double productive_s, int steps);
// Why no further attempt may start now ("" = it may): max attempts, budget, deadline.
std::string LimitReached(const JobSpec& spec, const JobRow& job, const JobTotals& totals, double now);

class Supervisor {
 public:
  Supervisor(SupervisorOptions options, Clock* clock, Launcher* launcher)
      : o_(std::move(options)), clock_(clock), launcher_(launcher) {}
  // Supervises the job to its end. Errors: the run directory is locked by another supervisor, the ledger
  // cannot be written, a launch failed.
  Result<JobOutcome> Run();
  // What the signal handlers do (async-signal-safe); tests call it to interrupt a running supervisor.
  static void Interrupt(int sig);

 private:
  Status OpenJob(class JobBook* book);
  Status RecoverLost(JobBook* book);
  Status StartPolicy(JobBook* book);  // the live policy and its market, when job.policy is set
  Result<AttemptRow> RunAttempt(JobBook* book, int attempt, int ranks, plan::Cluster on);
  // The live policy's decision for tick `tick` (made once per tick; a later call in the same tick returns
  // it), recording a switch in the ledger when it changes the cluster. `running`: what runs now.
  Result<plan::Cluster> DecideAt(JobBook* book, long tick, plan::Cluster running, int steps_done,
                                 double step_s);
  std::string TooLateAfter(double wait) const;  // why a wait would end past the deadline ("" = it would not)
  void WaitInterruptibly(JobBook* book, double seconds);
  void Print(const std::string& line);
  bool InsideSlurmBatch() const;     // the supervisor of a Slurm batch script (`tern run --slurm-batch`)
  std::string PausedReason() const;  // what a paused job's row says

  SupervisorOptions o_;
  Clock* clock_;
  Launcher* launcher_;
  double deadline_unix_ = 0;
  bool interrupted_ = false;  // a signal came: pause after the attempt that is stopping
  // the live policy (null without job.policy)
  std::unique_ptr<LivePolicy> policy_;
  std::unique_ptr<SpotMarket> own_market_;
  SpotMarket* market_ = nullptr;
  plan::Cluster cluster_ = plan::Cluster::kNone;  // the last decision: where the job is
  long decided_tick_ = -1;
};

}  // namespace tern::run
