#include "run/supervisor.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>

#include "core/file_util.h"
#include "run/elastic.h"
#include "run/job_book.h"
#include "run/job_report.h"
#include "run/signals.h"
#include "run/slurm.h"

namespace tern::run {
void Supervisor::Interrupt(int sig) {
  RaiseSupervisorSignal(sig);
}

void Supervisor::Print(const std::string& line) {
  if (!o_.console) return;
  std::fprintf(o_.console, "tern run: %s\n", line.c_str());
  std::fflush(o_.console);
}

Status Supervisor::OpenJob(JobBook* book) {
  const JobSpec& s = o_.spec;
  JobRow& j = book->job();
  const double now = clock_->Now();
  if (!book->has_job()) {
    j.job_id = NewJobId(s.run_dir, now);
    j.created_unix = now;
    Print(fmt::format("new job {} in {}", j.job_id, s.run_dir));
  } else {
    const JobTotals t = book->totals();
    Print(fmt::format("continuing job {} ({}: {} attempts so far, {} spent)", j.job_id, j.state, t.attempts,
                      FormatDollars(t.cost_usd)));
  }
  DescribeJob(s, &j);
  if (!s.policy.empty()) j.billing = s.policy;  // each attempt's billing is the policy's choice
  if (const std::string id = SlurmJobIdFromEnv(); !id.empty()) j.slurm_job_id = id;
  TERN_ASSIGN_OR_RETURN(deadline_unix_, DeadlineUnix(s.deadline, j.created_unix));
  j.deadline_unix = deadline_unix_;
  j.updated_unix = now;
  j.state = "running";
  j.reason = "";
  j.host = HostName();
  j.supervisor_pid = getpid();
  TERN_RETURN_IF_ERROR(book->SaveJob());
  // A job cancelled before and started again by hand goes on; one that Slurm starts (a requeue that raced
  // `tern job cancel`) keeps the cancel, and stops at once.
  if (InsideSlurmBatch()) return Status::Ok();
  return book->ClearCancel();
}

bool Supervisor::InsideSlurmBatch() const {
  return o_.spec.where == "slurm" && !SlurmJobIdFromEnv().empty();
}

std::string Supervisor::PausedReason() const {
  if (InsideSlurmBatch()) {
    return fmt::format(
        "the supervisor was signalled (Slurm job {}): the trainer saved; a requeue resumes it, or run "
        "`tern run --on slurm` again",
        SlurmJobIdFromEnv());
  }
  return "the supervisor was signalled; run `tern run` again to continue";
}

std::string Supervisor::TooLateAfter(double wait) const {
  if (deadline_unix_ <= 0 || clock_->Now() + wait < deadline_unix_) return "";
  return fmt::format(
      "deadline: the next attempt could start only after {} (job.deadline = {}); give a later --deadline to "
      "go on",
      FormatUtc(deadline_unix_), o_.spec.deadline);
}

void Supervisor::WaitInterruptibly(JobBook* book, double seconds) {
  // A signal pauses the job, a cancel (checked every second) ends it: both end the wait.
  const double until = clock_->Monotonic() + seconds;  // a clock set backwards must not stretch the wait
  double checked = clock_->Monotonic();
  while (clock_->Monotonic() < until && PendingSupervisorSignal() == 0 && !interrupted_) {
    clock_->Sleep(std::min(o_.poll_s, until - clock_->Monotonic()));
    if (clock_->Monotonic() - checked >= 1.0) {
      checked = clock_->Monotonic();
      if (book->CancelRequested()) break;
    }
  }
}

double StepSeconds(double productive_s, int steps) {
  return steps > 0 ? productive_s / steps : 0;
}

Status Supervisor::StartPolicy(JobBook* book) {
  if (o_.spec.policy.empty()) return Status::Ok();
  LivePolicyOptions po;
  po.start_unix = book->job().created_unix;
  po.deadline_unix = deadline_unix_;
  po.total_steps = o_.spec.total_steps;
  po.restart_s = o_.spec.restart_overhead_s;
  po.tick_s = o_.spec.policy_tick_s;
  policy_ = std::make_unique<LivePolicy>(po);
  market_ = o_.market;
  if (!market_) {
    own_market_ = std::make_unique<LocalSpotMarket>(po.restart_s);
    market_ = own_market_.get();
  }
  // A job continued by a new supervisor is where its last switch put it.
  TERN_ASSIGN_OR_RETURN(std::vector<SwitchRow> switches, book->Switches());
  cluster_ = plan::Cluster::kNone;
  if (!switches.empty()) {
    const std::string& to = switches.back().to;
    if (to == "spot") cluster_ = plan::Cluster::kSpot;
    if (to == "on-demand") cluster_ = plan::Cluster::kOnDemand;
  }
  Print(fmt::format("policy {}: deadline {}, restart overhead {}, deciding every {}", o_.spec.policy,
                    FormatUtc(deadline_unix_), FormatSeconds(po.restart_s), FormatSeconds(po.tick_s)));
  return Status::Ok();
}

Result<plan::Cluster> Supervisor::DecideAt(JobBook* book, long tick, plan::Cluster running, int steps_done,
                                           double step_s) {
  const bool up = market_->SpotUp(clock_->Now());
  // One decision per tick, as in the simulator; again only when spot it chose is gone (taken back mid-tick).
  if (tick == decided_tick_ && !(cluster_ == plan::Cluster::kSpot && !up)) return cluster_;
  LiveView v;
  v.now_unix = policy_->TickStart(tick);
  v.steps_done = steps_done;
  v.step_s = step_s;
  v.current = running;
  v.spot_up = up;
  plan::Cluster next = policy_->Decide(v);
  if (next == plan::Cluster::kSpot && !up) next = plan::Cluster::kNone;
  decided_tick_ = tick;
  if (next == cluster_) return next;
  SwitchRow w;
  w.job_id = book->job().job_id;
  w.at_unix = v.now_unix;
  w.attempt = book->attempts().empty() ? 0 : book->attempts().back().attempt;
  w.from = plan::ClusterName(cluster_);
  w.to = plan::ClusterName(next);
  w.why = (cluster_ == plan::Cluster::kSpot && !up ? "preempted; " : "") + policy_->why();
  Print(fmt::format("policy: {} -> {} at {}: {}", w.from, w.to, FormatUtc(w.at_unix), w.why));
  cluster_ = next;
  TERN_RETURN_IF_ERROR(book->SaveSwitch(w));
  return next;
}

Result<JobOutcome> Supervisor::Run() {
  ClearSupervisorSignal();
  interrupted_ = false;
  SupervisorSignals signals(o_.handle_signals);
  TERN_ASSIGN_OR_RETURN(auto lock, RunDirLock::Take(o_.spec.run_dir));
  TERN_RETURN_IF_ERROR(MakeDirs(o_.spec.run_dir + "/logs"));
  TERN_ASSIGN_OR_RETURN(auto book, JobBook::Open(o_.spec.run_dir, o_.ledger_path));
  TERN_RETURN_IF_ERROR(OpenJob(book.get()));
  TERN_RETURN_IF_ERROR(RecoverLost(book.get()));
  TERN_RETURN_IF_ERROR(StartPolicy(book.get()));
  JobOutcome out;
  auto finish = [&](const std::string& state, const std::string& reason, int code) -> Result<JobOutcome> {
    JobRow& j = book->job();
    j.state = state;
    j.reason = reason;
    j.updated_unix = clock_->Now();
    j.supervisor_pid = 0;
    TERN_RETURN_IF_ERROR(book->SaveJob());
    out.exit_code = code;
    out.job = j;
    out.attempts = book->attempts();
    out.totals = book->totals();
    if (o_.console) std::fputs(JobTable(out.job, out.attempts).c_str(), o_.console);
    if (policy_) {
      auto switches = book->Switches();
      if (switches.ok() && o_.console) std::fputs(SwitchTable(*switches).c_str(), o_.console);
    }
    return out;
  };

  int rank_waits = 0;  // elastic: waits in a row for enough ranks
  while (true) {
    if (book->CancelRequested()) return finish("cancelled", "cancelled by `tern job cancel`", kRunStopped);
    if (interrupted_ || PendingSupervisorSignal() != 0)
      return finish("paused", PausedReason(), kRunInterrupted);
    const std::string limit = LimitReached(o_.spec, book->job(), book->totals(), clock_->Now());
    if (!limit.empty()) {
      Print("stopping: " + limit);
      return finish("stopped", limit, kRunStopped);
    }
    plan::Cluster on = plan::Cluster::kNone;  // without a policy: the instance's own billing
    if (policy_) {
      const double now = clock_->Now();
      const JobTotals t = book->totals();
      const int steps = std::max(0, t.last_step);
      TERN_ASSIGN_OR_RETURN(on, DecideAt(book.get(), policy_->Tick(now), plan::Cluster::kNone, steps,
                                         StepSeconds(t.productive_s, steps)));
      if (on == plan::Cluster::kNone) {  // wait for spot until the next decision
        const double wait = policy_->TickStart(policy_->Tick(now) + 1) - now;
        if (const std::string why = TooLateAfter(wait); !why.empty()) {
          Print("stopping: " + why);
          return finish("stopped", why, kRunStopped);
        }
        WaitInterruptibly(book.get(), wait);
        continue;
      }
    }
    int ranks = o_.spec.ranks;
    if (Elastic(o_.spec)) {
      const RanksNow now = ChooseRanks(o_.spec, ProbeRanks(o_.spec));
      if (!now.why.empty()) Print(now.why);
      if (now.ranks == 0) {
        const double wait = BackoffSeconds(o_.spec, ++rank_waits);
        if (const std::string why = TooLateAfter(wait); !why.empty()) {
          Print("stopping: " + why);
          return finish("stopped", why, kRunStopped);
        }
        Print(fmt::format("asking again in {:.1f} s", wait));
        WaitInterruptibly(book.get(), wait);
        continue;
      }
      rank_waits = 0;
      ranks = now.ranks;
    }
    const int n = book->attempts().empty() ? 1 : book->attempts().back().attempt + 1;
    TERN_ASSIGN_OR_RETURN(AttemptRow a, RunAttempt(book.get(), n, ranks, on));
    switch (NextAfter(a.reason)) {
      case Next::kDone: {
        TERN_RETURN_IF_ERROR(AddJobToSummary(o_.spec.run_dir, book->job(), book->attempts()));
        return finish("done", "finished", kRunDone);
      }
      case Next::kFailed:
        Print(fmt::format("stopping: {}: {}",
                          a.reason == "bad_config" ? "the trainer refused the config (exit 2)"
                                                   : "the trainer could not be started",
                          a.message));
        return finish("failed", a.message, a.reason == "bad_config" ? kRunBadConfig : kRunStopped);
      case Next::kPaused:
        if (book->CancelRequested())
          return finish("cancelled", "cancelled by `tern job cancel`", kRunStopped);
        return finish("paused", PausedReason(), kRunInterrupted);
      case Next::kCancelled:
        return finish("cancelled", "cancelled by `tern job cancel`", kRunStopped);
      case Next::kStopped:
        return finish("stopped", a.message, kRunStopped);
      case Next::kRelaunchNow:
        Print(fmt::format("attempt {} {}; relaunching now", n, a.reason));
        break;
      case Next::kRelaunchAfterBackoff: {
        const int failures = FailuresInARow(book->attempts());
        const double wait = BackoffSeconds(o_.spec, failures);
        Print(fmt::format("attempt {} {} ({}); relaunching in {:.1f} s ({} failure{} in a row)", n, a.reason,
                          a.message, wait, failures, failures == 1 ? "" : "s"));
        if (const std::string why = TooLateAfter(wait); !why.empty()) {
          Print("stopping: " + why);
          return finish("stopped", why, kRunStopped);
        }
        WaitInterruptibly(book.get(), wait);
        break;
      }
    }
  }
}

}  // namespace tern::run
