// One attempt under the supervisor: launch, watch (exit, heartbeat, signals, cancel, budget, deadline),
// classify how it ended, bill it. And the decisions that follow an attempt.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "run/attempt_metrics.h"
#include "run/hazard.h"
#include "run/job_book.h"
#include "run/job_report.h"
#include "run/signals.h"
#include "run/slurm.h"
#include "run/supervisor.h"

namespace tern::run {
namespace {

uint64_t SizeOf(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

// The trainer's last words: its "tern train:" lines near the end of its log, else its last lines.
std::string LastWords(const std::string& log_path) {
  std::ifstream in(log_path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.size() > 8192) text = text.substr(text.size() - 8192);
  std::vector<std::string> lines, tern;
  std::string line;
  for (char c : text + "\n") {
    if (c != '\n' && c != '\r') {
      line += c;
      continue;
    }
    if (!line.empty()) lines.push_back(line);
    if (line.rfind("tern train:", 0) == 0) tern.push_back(line);
    line.clear();
  }
  const std::vector<std::string>& pick = tern.empty() ? lines : tern;
  std::string out;
  for (size_t i = pick.size() > 3 ? pick.size() - 3 : 0; i < pick.size(); i++)
    out += (out.empty() ? "" : " | ") + pick[i];
  return out.empty() ? "(the trainer printed nothing; see " + log_path + ")" : out;
}

double FileMtime(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec * 1e-9;
}

// Copies what the trainer writes to its log onto the console, as it comes.
class LogEcho {
 public:
  LogEcho(std::string path, std::FILE* out) : path_(std::move(path)), out_(out) {}
  void Pump() {
    if (!out_) return;
    std::FILE* f = std::fopen(path_.c_str(), "rb");
    if (!f) return;
    std::fseek(f, static_cast<long>(offset_), SEEK_SET);
    char buf[8192];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) {
      std::fwrite(buf, 1, n, out_);
      offset_ += n;
    }
    std::fclose(f);
    std::fflush(out_);
  }

 private:
  std::string path_;
  std::FILE* out_;
  uint64_t offset_ = 0;
};

// The attempt's figures from its metrics, its times and its price. `live`: watched as it ran, so the
// start-up is known.
void Account(const AttemptProgress& p, double end, bool live, AttemptRow* a) {
  a->first_step = p.first_step;
  a->last_step = p.last_step;
  a->resumed_from = p.resumed_from;
  a->tokens = p.tokens;
  a->productive_s = p.productive_s;
  a->lost_steps = p.lost_steps;
  a->lost_s = p.lost_s;
  a->checkpoint_s = p.checkpoint_s;
  a->end_unix = end;
  a->wall_s = std::max(0.0, end - a->start_unix);
  a->cost_usd = a->price_per_hour * a->wall_s / 3600;
  a->lost_usd = a->price_per_hour * a->lost_s / 3600;
  if (live && p.run_start > 0)
    a->startup_s = std::clamp(p.run_start - a->start_unix, 0.0, a->wall_s);
  else if (live)
    a->startup_s = a->wall_s;  // it never got to a step
}

bool Failing(const std::string& reason) {
  return reason == "crashed" || reason == "signal" || reason == "hung";
}

}  // namespace

Next NextAfter(const std::string& reason) {
  if (reason == "done") return Next::kDone;
  if (reason == "preempted" || reason == "lost" || reason == "switch") return Next::kRelaunchNow;
  if (reason == "bad_config" || reason == "launch_failed") return Next::kFailed;
  if (reason == "interrupted") return Next::kPaused;
  if (reason == "cancelled") return Next::kCancelled;
  if (reason == "budget" || reason == "deadline") return Next::kStopped;
  return Next::kRelaunchAfterBackoff;  // crashed, signal, hung
}

double BackoffSeconds(const JobSpec& spec, int failures_in_a_row) {
  const int doublings = std::clamp(failures_in_a_row - 1, 0, 30);
  return std::min(spec.backoff_max_s, spec.backoff_s * std::ldexp(1.0, doublings));
}

int FailuresInARow(const std::vector<AttemptRow>& attempts) {
  int failures = 0;
  int best_before = -1;
  std::vector<int> best(attempts.size());
  for (size_t i = 0; i < attempts.size(); i++) {
    best[i] = best_before;
    best_before = std::max(best_before, attempts[i].last_step);
  }
  for (size_t i = attempts.size(); i-- > 0;) {
    const AttemptRow& a = attempts[i];
    if (a.reason == "lost") continue;  // the supervisor's death, not the trainer's failure
    if (!Failing(a.reason) || a.last_step > best[i]) break;
    failures++;
  }
  return std::max(failures, 1);
}

std::string LimitReached(const JobSpec& spec, const JobRow& job, const JobTotals& totals, double now) {
  if (totals.attempts >= spec.max_attempts) {
    return fmt::format(
        "max attempts: {} attempts made (job.max_attempts = {}); raise --max-attempts to go on",
        totals.attempts, spec.max_attempts);
  }
  if (spec.budget_usd > 0 && totals.cost_usd >= spec.budget_usd) {
    return fmt::format("budget: {} spent of {} (job.budget); raise --budget to go on",
                       FormatDollars(totals.cost_usd), FormatDollars(spec.budget_usd));
  }
  if (job.deadline_unix > 0 && now >= job.deadline_unix) {
    return fmt::format("deadline: passed at {} (job.deadline = {}); give a later --deadline to go on",
                       FormatUtc(job.deadline_unix), spec.deadline);
  }
  return "";
}

// Attempts a dead supervisor left "running": its trainer is stopped if it still runs (SIGTERM: it saves),
// and the attempt is closed as lost, with what its metrics say and billed until it was last seen.
Status Supervisor::RecoverLost(JobBook* book) {
  const std::string metrics = o_.spec.run_dir + "/metrics.jsonl";
  for (AttemptRow a : book->attempts()) {
    if (a.state != "running") continue;
    if (a.host == HostName() && ProcessAlive(a.trainer_pid, a.trainer_start)) {
      Print(fmt::format(
          "attempt {}'s trainer (pid {}) outlived its supervisor: stopping it (SIGTERM, it saves)", a.attempt,
          a.trainer_pid));
      kill(a.trainer_pid, SIGTERM);
      const double t0 = clock_->Monotonic();
      while (ProcessAlive(a.trainer_pid, a.trainer_start) && clock_->Monotonic() - t0 < o_.spec.kill_grace_s)
        clock_->Sleep(o_.poll_s);
      if (ProcessAlive(a.trainer_pid, a.trainer_start)) kill(-a.trainer_pid, SIGKILL);
    }
    MetricsTail tail(metrics, a.metrics_offset, book->LastStepBefore(a.attempt));
    tail.Poll(0);
    const double end = std::max({a.seen_unix, a.start_unix, std::min(clock_->Now(), FileMtime(a.log)),
                                 tail.offset() > a.metrics_offset ? FileMtime(metrics) : 0.0});
    Account(tail.progress(), std::min(end, clock_->Now()), /*live=*/false, &a);
    a.state = "lost";
    a.reason = "lost";
    a.message = "its supervisor died while it ran; closed by the next supervisor, billed until last seen";
    Print(fmt::format("attempt {} closed as lost (its supervisor died): {}", a.attempt, AttemptLine(a)));
    TERN_RETURN_IF_ERROR(book->SaveAttempt(a));
  }
  return Status::Ok();
}

Result<AttemptRow> Supervisor::RunAttempt(JobBook* book, int n, int ranks, plan::Cluster on) {
  JobSpec s = o_.spec;
  s.ranks = ranks;                   // an elastic job's attempt may have fewer than job.ranks
  if (on != plan::Cluster::kNone) {  // the live policy chose this attempt's billing
    s.billing = std::string(plan::ClusterName(on));
    s.price_per_hour = on == plan::Cluster::kSpot ? s.spot_price_per_hour : s.ondemand_price_per_hour;
    if (const size_t colon = s.instance.rfind(':');
        colon != std::string::npos && std::count(s.instance.begin(), s.instance.end(), ':') == 3)
      s.instance = s.instance.substr(0, colon + 1) + s.billing;
  }
  const std::string metrics = s.run_dir + "/metrics.jsonl";
  const JobTotals before = book->totals();
  AttemptRow a;
  a.job_id = book->job().job_id;
  a.attempt = n;
  a.host = HostName();
  a.ranks = s.ranks;
  a.instance = s.instance;
  a.billing = s.billing;
  a.price_per_hour = s.price_per_hour;
  a.metrics_offset = SizeOf(metrics);
  a.log = fmt::format("{}/logs/attempt_{:03}.log", s.run_dir, n);
  a.start_unix = a.seen_unix = clock_->Now();
  a.slurm_job_id = SlurmJobIdFromEnv();
  if (!a.slurm_job_id.empty()) a.slurm_restart_count = SlurmRestartCountFromEnv();
  const Hazard hazard = JobHazardWithShippedCatalog(s, book->attempts());
  const AttemptVars vars{n, a.job_id, before.cost_usd, a.start_unix, hazard.mtbf_s, hazard.source};
  LaunchSpec launch{AttemptArgv(s, o_.trainer, vars), AttemptEnv(vars), a.log};
  Print(fmt::format("attempt {} of at most {} ({} rank{}, {}{}): {}", n, s.max_attempts, s.ranks,
                    s.ranks == 1 ? "" : "s", s.where,
                    s.price_per_hour > 0 ? fmt::format(", ${}/h", s.price_per_hour) : "", a.log));
  auto proc = launcher_->Launch(launch);
  if (!proc.ok()) {
    a.state = "ended";
    a.reason = "launch_failed";
    a.message = proc.status().message();
    a.end_unix = a.start_unix;
    TERN_RETURN_IF_ERROR(book->SaveAttempt(a));
    return a;
  }
  a.trainer_pid = (*proc)->pid();
  a.trainer_start = (*proc)->start_time();
  if (Status st = book->SaveAttempt(a); !st.ok()) Print("warning: " + st.message());

  MetricsTail tail(metrics, a.metrics_offset, before.last_step);
  LogEcho echo(a.log, o_.echo_trainer ? o_.console : nullptr);
  // SIGTERM makes mpirun end the job at once and srun SIGKILL its tasks; SIGUSR1 both forward, and the
  // trainer saves on either.
  const bool launcher = s.ranks > 1;  // mpirun, or srun under Slurm
  const int stop_signal = launcher ? SIGUSR1 : SIGTERM;
  // The attempt's time: its UTC start plus the monotonic seconds since, so that a jump of the system clock
  // neither makes a working trainer look hung nor bills (or spends the budget on) time that did not pass.
  const double mono_start = clock_->Monotonic();
  auto elapsed_now = [&] { return a.start_unix + (clock_->Monotonic() - mono_start); };
  double last_growth = a.start_unix, last_save = a.start_unix, last_cancel_check = a.start_unix;
  double stop_sent = 0;
  bool just_stopped = false;  // look at the trainer again at once: it may have exited already
  std::string stop_reason;
  bool killed = false;
  std::optional<ExitStatus> exit;
  auto stop = [&](const std::string& reason, int sig, const std::string& why) {
    stop_reason = reason;
    stop_sent = elapsed_now();
    just_stopped = true;
    Print(fmt::format("{}: sending SIG{} to the trainer (pid {}) so that it saves and exits", why,
                      sigabbrev_np(sig), a.trainer_pid));
    (*proc)->Signal(sig);
  };
  // `tern job cancel` sets a flag in the run directory's ledger: read it once a second.
  auto cancel_due = [&](double now) {
    if (now - last_cancel_check < 1.0) return false;
    last_cancel_check = now;
    return book->CancelRequested();
  };
  while (true) {
    exit = (*proc)->Poll();
    const double now = elapsed_now();
    if (tail.Poll(now)) last_growth = now;
    echo.Pump();
    if (exit) break;
    const int sig = TakeSupervisorSignal();
    if (sig != 0) interrupted_ = true;
    if (!stop_reason.empty()) {
      if (!killed && now - stop_sent > s.kill_grace_s) {
        Print(fmt::format("the trainer did not exit within {:.0f} s (job.kill_grace): SIGKILL",
                          s.kill_grace_s));
        (*proc)->Kill();
        killed = true;
      }
    } else if (sig != 0) {
      stop(book->CancelRequested() ? "cancelled" : "interrupted",
           launcher || sig == SIGINT ? stop_signal : sig, fmt::format("got SIG{}", sigabbrev_np(sig)));
    } else if (cancel_due(now)) {
      stop("cancelled", stop_signal, "cancelled by `tern job cancel`");
    } else if (s.budget_usd > 0 &&
               before.cost_usd + s.price_per_hour * (now - a.start_unix) / 3600 >= s.budget_usd) {
      stop("budget", stop_signal, fmt::format("the budget of {} is spent", FormatDollars(s.budget_usd)));
    } else if (deadline_unix_ > 0 && clock_->Now() >= deadline_unix_) {  // a deadline is a wall time
      stop("deadline", stop_signal, fmt::format("the deadline {} has passed", FormatUtc(deadline_unix_)));
    } else if (s.heartbeat_s > 0 && now - last_growth > s.heartbeat_s) {
      stop("hung", SIGTERM,
           fmt::format("metrics.jsonl has not grown for {:.0f} s (job.heartbeat)", now - last_growth));
    } else if (policy_ && on == plan::Cluster::kSpot && !market_->SpotUp(clock_->Now())) {
      stop("preempted", stop_signal, "the spot market took the instance back");
    } else if (policy_ && policy_->Tick(clock_->Now()) > decided_tick_) {
      const AttemptProgress& p = tail.progress();
      const int steps = std::max({0, before.last_step, p.last_step});
      Result<plan::Cluster> next = DecideAt(book, policy_->Tick(clock_->Now()), on, steps,
                                            StepSeconds(before.productive_s + p.productive_s, steps));
      if (!next.ok()) {
        Print("warning: " + next.status().message());
      } else if (*next != on) {
        stop("switch", stop_signal,
             fmt::format("the policy moves the job to {} ({})", plan::ClusterName(*next), policy_->why()));
      }
    }
    if (now - last_save >= o_.save_every_s) {  // so that a successor can bill this attempt if we die
      a.seen_unix = now;
      Account(tail.progress(), now, true, &a);
      a.end_unix = 0;
      if (Status st = book->SaveAttempt(a); !st.ok()) Print("warning: " + st.message());
      last_save = now;
    }
    if (just_stopped) {
      just_stopped = false;
      continue;
    }
    clock_->Sleep(o_.poll_s);
  }
  const double end = elapsed_now();
  tail.Poll(end);
  echo.Pump();
  Account(tail.progress(), end, true, &a);
  a.seen_unix = end;
  a.state = "ended";
  a.exit_code = exit->code;
  a.signal = exit->signal;
  const AttemptProgress& p = tail.progress();
  if (exit->code == 0) {
    a.reason = "done";
  } else if (stop_reason == "hung") {
    a.reason = "hung";
    a.message = fmt::format("no metrics for {:.0f} s; {}", s.heartbeat_s, exit->Describe());
  } else if (!stop_reason.empty()) {
    a.reason = stop_reason;
    a.message = fmt::format("stopped by tern run ({}); {}", stop_reason, exit->Describe());
  } else if (exit->code == 75 || (p.preempted && exit->code > 0 && s.ranks > 1)) {
    // mpirun reports 1 when a SIGTERM that reached it directly stopped ranks that saved and exited 75.
    a.reason = "preempted";
    a.message = p.preempted ? "saved an emergency checkpoint" : "exit 75";
    if (exit->code != 75) a.message += fmt::format(" (mpirun: {})", exit->Describe());
  } else if (exit->code == 2) {
    a.reason = "bad_config";
    a.message = LastWords(a.log);
  } else if (exit->code == 127 && p.last_step < 0) {
    a.reason = "launch_failed";
    a.message = LastWords(a.log);
  } else {
    a.reason = exit->signal != 0 ? "signal" : "crashed";
    // A signal it did not handle (the OOM killer, SIGKILL, SIGSEGV) says nothing in the log: the signal is
    // it.
    a.message = exit->signal != 0 ? exit->Describe() : exit->Describe() + ": " + LastWords(a.log);
  }
  TERN_RETURN_IF_ERROR(book->SaveAttempt(a));
  Print(fmt::format("attempt {} ended: {}", n, AttemptLine(a)));
  if (market_ && on == plan::Cluster::kSpot && a.reason == "preempted") market_->Preempted(clock_->Now());
  return a;
}

}  // namespace tern::run
