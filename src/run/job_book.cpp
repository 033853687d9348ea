#include "run/job_book.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>

#include "core/file_util.h"
#include "run/clock.h"

namespace tern::run {

Result<std::unique_ptr<JobBook>> JobBook::Open(const std::string& run_dir, const std::string& global_path) {
  std::unique_ptr<JobBook> b(new JobBook());
  TERN_ASSIGN_OR_RETURN(b->local_, Ledger::Open(RunDirLedgerPath(run_dir)));
  if (!global_path.empty() && global_path != b->local_->path()) {
    TERN_ASSIGN_OR_RETURN(b->global_, Ledger::Open(global_path));
  }
  // The run directory's copy is the job's own record; the global ledger may know more (the copy was deleted
  // with the run directory, or a write to it failed): take every attempt either has, and write the union back
  // to both.
  for (Ledger* l : {b->local_.get(), b->global_.get()}) {
    if (!l) continue;
    TERN_ASSIGN_OR_RETURN(auto job, l->FindJob(run_dir));
    if (job && b->job_.job_id.empty()) b->job_ = *job;
  }
  if (b->job_.job_id.empty()) return b;
  std::map<int, AttemptRow> merged;
  for (Ledger* l : {b->local_.get(), b->global_.get()}) {
    if (!l) continue;
    TERN_ASSIGN_OR_RETURN(auto rows, l->Attempts(b->job_.job_id));
    for (AttemptRow& a : rows) {
      auto it = merged.find(a.attempt);
      if (it == merged.end() || a.seen_unix > it->second.seen_unix) merged[a.attempt] = std::move(a);
    }
  }
  TERN_RETURN_IF_ERROR(b->SaveJob());
  for (auto& [n, a] : merged) TERN_RETURN_IF_ERROR(b->SaveAttempt(a));
  return b;
}

int JobBook::LastStepBefore(int attempt) const {
  int best = -1;
  for (const AttemptRow& a : attempts_)
    if (a.attempt < attempt) best = std::max(best, a.last_step);
  return best;
}

Status JobBook::SaveJob() {
  Status first;
  for (Ledger* l : {local_.get(), global_.get()}) {
    if (!l) continue;
    Status st = l->PutJob(job_);
    if (first.ok()) first = st;
  }
  return first;
}

Status JobBook::SaveAttempt(const AttemptRow& a) {
  bool found = false;
  for (AttemptRow& r : attempts_) {
    if (r.attempt == a.attempt) {
      r = a;
      found = true;
    }
  }
  if (!found) attempts_.push_back(a);
  Status first;
  for (Ledger* l : {local_.get(), global_.get()}) {
    if (!l) continue;
    Status st = l->PutAttempt(a);
    if (first.ok()) first = st;
  }
  return first;
}

Status JobBook::SaveSwitch(const SwitchRow& w) {
  Status first;
  for (Ledger* l : {local_.get(), global_.get()}) {
    if (!l) continue;
    Status st = l->PutSwitch(w);
    if (first.ok()) first = st;
  }
  return first;
}

Result<std::vector<SwitchRow>> JobBook::Switches() {
  return local_->Switches(job_.job_id);
}

bool JobBook::CancelRequested() {
  auto job = local_->GetJob(job_.job_id);
  return job.ok() && job->has_value() && (*job)->cancel_requested;
}

Status JobBook::ClearCancel() {
  Status first;
  for (Ledger* l : {local_.get(), global_.get()}) {
    if (!l) continue;
    Status st = l->SetCancel(job_.job_id, false);
    if (first.ok()) first = st;
  }
  return first;
}

std::vector<std::string> JobBook::ledger_paths() const {
  std::vector<std::string> out = {local_->path()};
  if (global_) out.push_back(global_->path());
  return out;
}

Result<std::unique_ptr<RunDirLock>> RunDirLock::Take(const std::string& run_dir) {
  TERN_RETURN_IF_ERROR(MakeDirs(run_dir));
  const std::string path = run_dir + "/.tern-run.lock";
  std::unique_ptr<RunDirLock> lock(new RunDirLock());
  lock->fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock->fd_ < 0) return Status::IoError(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  if (flock(lock->fd_, LOCK_EX | LOCK_NB) != 0) {
    char holder[256] = {};
    (void)!pread(lock->fd_, holder, sizeof holder - 1, 0);
    return Status::Unavailable(
        fmt::format("another `tern run` (pid and host: {}) is supervising {}; watch it with `tern job status "
                    "{}`, or stop "
                    "it with `tern job cancel {}`",
                    holder[0] ? holder : "unknown", run_dir, run_dir, run_dir));
  }
  const std::string me = fmt::format("{} {}\n", getpid(), HostName());
  if (ftruncate(lock->fd_, 0) != 0 || pwrite(lock->fd_, me.data(), me.size(), 0) < 0)
    return Status::IoError(fmt::format("cannot write {}: {}", path, std::strerror(errno)));
  return lock;
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);
}

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

std::string NewJobId(const std::string& run_dir, double now_unix) {
  std::string stamp = FormatUtc(now_unix).substr(0, 19);  // 2025-01-02T03:04:05 -> 20250102T030405
  stamp.erase(std::remove_if(stamp.begin(), stamp.end(), [](char c) { return c == '-' || c == ':'; }),
              stamp.end());
  return fmt::format("{}-{}-{:04x}", std::filesystem::path(run_dir).filename().string(), stamp,
                     std::hash<std::string>{}(run_dir)&0xffff);
}

void DescribeJob(const JobSpec& s, JobRow* j) {
  j->run_dir = s.run_dir;
  j->config = s.config_path;
  j->overrides.clear();
  for (const auto& o : s.overrides) j->overrides += o + "\n";
  j->project = s.project;
  j->instance = s.instance;
  j->billing = s.billing;
  j->price_per_hour = s.price_per_hour;
  j->ranks = s.ranks;
  j->where = s.where;
  j->max_attempts = s.max_attempts;
  j->budget_usd = s.budget_usd;
}

}  // namespace tern::run
