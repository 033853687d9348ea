#include "sweep/trials.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "run/ledger.h"

namespace tern::sweep {
namespace {

// fork/exec with the output to `log`; the child dies with the sweep (PR_SET_PDEATHSIG), and `tern run`'s
// own death signal takes its trainer with it, so a restarted sweep finds no trial still running.
Result<pid_t> Spawn(const std::vector<std::string>& args, const std::string& log) {
  std::vector<char*> argv;
  for (const std::string& s : args) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return Status::Unavailable(fmt::format("fork failed: {}", std::strerror(errno)));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

Result<std::optional<RungEnd>> Ended(RungEnd end) {
  return std::optional<RungEnd>(std::move(end));
}

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::optional<run::JobRow> LedgerJob(const std::string& run_dir) {
  auto l = run::Ledger::Open(run::RunDirLedgerPath(run_dir));
  if (!l.ok()) return std::nullopt;
  auto job = (*l)->FindJob(run_dir);
  if (!job.ok() || !*job) return std::nullopt;
  return **job;
}

// RUN_DIR.lock, held by a submission: the `tern run --on slurm` child inherits the descriptor (no
// O_CLOEXEC), so the lock outlives a sweep killed mid-submission until that child has recorded the job.
class SubmitLock {
 public:
  static Result<SubmitLock> Take(const std::string& run_dir, double wait_s) {
    const std::string path = run_dir + ".lock";
    SubmitLock l;
    l.fd_ = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);
    if (l.fd_ < 0) return Status::IoError(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
    const auto t0 = std::chrono::steady_clock::now();
    while (::flock(l.fd_, LOCK_EX | LOCK_NB) != 0) {
      if (std::chrono::steady_clock::now() - t0 > std::chrono::duration<double>(wait_s)) {
        return Status::Unavailable(fmt::format(
            "{} is held: a `tern run --on slurm` of this trial (from a sweep that was killed?) has been "
            "submitting for {:.0f} s; wait for it, or end it and run the sweep again",
            path, wait_s));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return l;
  }
  SubmitLock(SubmitLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  SubmitLock(const SubmitLock&) = delete;
  ~SubmitLock() {
    if (fd_ >= 0) ::close(fd_);
  }

 private:
  SubmitLock() = default;
  int fd_ = -1;
};

constexpr double kSubmitWaitS = 120;

}  // namespace

std::vector<std::string> JobFlags(const std::vector<std::pair<std::string, std::string>>& job) {
  std::vector<std::string> out;
  for (const auto& [key, value] : job) {
    std::string flag = "--" + key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    out.push_back(flag + "=" +
                  value);  // one word: a value such as "--partition=gpu" is not a flag of its own
  }
  return out;
}

Status LocalTrials::Start(TrialRow* t, const std::vector<std::string>& args) {
  std::vector<std::string> a = args;
  a.push_back("--on=local");  // a job: section in the base config does not send a local sweep's trials away
  TERN_ASSIGN_OR_RETURN(pid_t pid, Spawn(a, t->run_dir + ".log"));
  pids_[t->id] = pid;
  return Status::Ok();
}

Result<std::optional<RungEnd>> LocalTrials::Poll(const TrialRow& t) {
  const auto it = pids_.find(t.id);
  if (it == pids_.end()) return Ended(RungEnd{false, "the sweep lost this trial's process"});
  int wstatus = 0;
  const pid_t r = waitpid(it->second, &wstatus, WNOHANG);
  if (r == 0) return std::optional<RungEnd>();
  pids_.erase(it);
  if (r > 0 && WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) return Ended(RungEnd{true, ""});
  return Ended(RungEnd{
      false, fmt::format("tern run exited {} at rung {}: see {}.log",
                         r > 0 && WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1, t.target_rung, t.run_dir)});
}

Result<std::string> RealSlurmClient::Submit(const std::vector<std::string>& args, const std::string& run_dir,
                                            const std::string& log) {
  TERN_ASSIGN_OR_RETURN(SubmitLock lock, SubmitLock::Take(run_dir, kSubmitWaitS));
  TERN_ASSIGN_OR_RETURN(run::ProgramResult r, run::RunProgram(args, "the tern binary"));
  std::ofstream(log, std::ios::app) << r.out << r.err;
  if (r.code != 0) {
    return Status::Unavailable(fmt::format("`tern run --on slurm` for {} exited {}: {}(all of it in {})",
                                           run_dir, r.code, r.err, log));
  }
  const std::optional<run::JobRow> job = LedgerJob(run_dir);
  const std::string id = job ? job->slurm_job_id : "";
  if (id.empty())
    return Status::Internal(fmt::format(
        "`tern run --on slurm` for {} exited 0 but its ledger names no Slurm job; see {}", run_dir, log));
  return id;
}

Result<run::SlurmJobInfo> RealSlurmClient::Query(const std::string& slurm_job_id) {
  return run::QuerySlurmJob(slurm_job_id);
}

Result<std::string> RealSlurmClient::LedgerSlurmJob(const std::string& run_dir) {
  TERN_ASSIGN_OR_RETURN(SubmitLock lock, SubmitLock::Take(run_dir, kSubmitWaitS));
  const std::optional<run::JobRow> j = LedgerJob(run_dir);
  return j ? j->slurm_job_id : "";
}

std::string RealSlurmClient::LedgerJobState(const std::string& run_dir) {
  const std::optional<run::JobRow> j = LedgerJob(run_dir);
  return j ? j->state : "";
}

Status SlurmTrials::Start(TrialRow* t, const std::vector<std::string>& args) {
  std::vector<std::string> a = args;
  a.push_back("--on=slurm");
  TERN_ASSIGN_OR_RETURN(t->slurm_job_id, client_->Submit(a, t->run_dir, t->run_dir + ".log"));
  last_poll_[t->id] = SteadySeconds();
  return Status::Ok();
}

Result<std::optional<RungEnd>> SlurmTrials::Poll(const TrialRow& t) {
  const double now = SteadySeconds();
  if (auto it = last_poll_.find(t.id); it != last_poll_.end() && now - it->second < poll_s_)
    return std::optional<RungEnd>();
  last_poll_[t.id] = now;
  TERN_ASSIGN_OR_RETURN(run::SlurmJobInfo info, client_->Query(t.slurm_job_id));
  if (info.active()) return std::optional<RungEnd>();
  last_poll_.erase(t.id);
  const std::string log = fmt::format("{}/logs/slurm-{}.out", t.run_dir, t.slurm_job_id);
  // The batch script exits as its supervisor does: COMPLETED is a job done (exit 0).
  if (info.state == "COMPLETED") return Ended(RungEnd{true, ""});
  if (info.state.empty()) {  // forgotten (MinJobAge): the job's own ledger says how it ended
    const std::string state = client_->LedgerJobState(t.run_dir);
    if (state == "done") return Ended(RungEnd{true, ""});
    return Ended(RungEnd{
        false, fmt::format("Slurm job {} (rung {}) is gone from Slurm and its ledger says '{}': see {}",
                           t.slurm_job_id, t.target_rung, state, log)});
  }
  return Ended(RungEnd{false, fmt::format("Slurm job {} ended {} at rung {}: see {}", t.slurm_job_id,
                                          info.state, t.target_rung, log)});
}

Result<bool> SlurmTrials::Reattach(TrialRow* t) {
  if (!t->slurm_job_id.empty()) return true;  // Poll says whether it still runs, or how it ended
  // Killed between the submission and recording its id: the run directory's ledger has it. A job Slurm no
  // longer runs is the previous rung's (or this one's, finished): submitting again resumes from its
  // checkpoint.
  TERN_ASSIGN_OR_RETURN(const std::string id, client_->LedgerSlurmJob(t->run_dir));
  if (id.empty()) return false;
  TERN_ASSIGN_OR_RETURN(run::SlurmJobInfo info, client_->Query(id));
  if (!info.active()) return false;
  t->slurm_job_id = id;
  return true;
}

}  // namespace tern::sweep
