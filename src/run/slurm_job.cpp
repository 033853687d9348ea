#include "run/slurm_job.h"

#include <sys/stat.h>

#include "core/file_util.h"
#include "run/job_book.h"
#include "run/job_report.h"

namespace tern::run {

Result<Submitted> SubmitSlurmJob(const JobSpec& spec, const BatchCommand& command,
                                 const std::string& ledger_path, Clock* clock) {
  TERN_RETURN_IF_ERROR(MakeDirs(spec.run_dir + "/logs"));  // sbatch does not make the --output folder
  TERN_RETURN_IF_ERROR(MakeDirs(spec.run_dir + "/slurm"));
  Submitted out;
  out.script = SbatchScriptPath(spec);
  {
    // Not held across sbatch: the job may start at once, and its supervisor takes the lock.
    TERN_ASSIGN_OR_RETURN(auto lock, RunDirLock::Take(spec.run_dir));
    TERN_ASSIGN_OR_RETURN(auto book, JobBook::Open(spec.run_dir, ledger_path));
    JobRow& j = book->job();
    if (book->has_job() && !j.slurm_job_id.empty()) {
      TERN_ASSIGN_OR_RETURN(SlurmJobInfo prev, QuerySlurmJob(j.slurm_job_id));
      if (prev.active()) {
        return Status::InvalidArgument(
            fmt::format("job {} is in Slurm already as job {} ({}): `tern job status {}` follows it, `tern "
                        "job cancel {}` "
                        "stops it",
                        j.job_id, prev.id, prev.state, spec.run_dir, spec.run_dir));
      }
    }
    const double now = clock->Now();
    if (!book->has_job()) {
      j.job_id = NewJobId(spec.run_dir, now);
      j.created_unix = now;
    }
    DescribeJob(spec, &j);
    TERN_ASSIGN_OR_RETURN(j.deadline_unix, DeadlineUnix(spec.deadline, j.created_unix));
    j.updated_unix = now;
    j.state = "queued";
    j.reason = "being submitted to Slurm";
    j.host = HostName();
    j.supervisor_pid = 0;
    TERN_RETURN_IF_ERROR(book->SaveJob());
    TERN_RETURN_IF_ERROR(book->ClearCancel());
    out.job_id = j.job_id;
    TERN_RETURN_IF_ERROR(WriteFileAtomic(out.script, SbatchScript(spec, command)));
    ::chmod(out.script.c_str(), 0755);
  }
  Result<std::string> id = SubmitBatch(out.script);
  if (!id.ok()) {  // nothing runs: the row says so instead of "queued" for ever
    TERN_ASSIGN_OR_RETURN(auto book, JobBook::Open(spec.run_dir, ledger_path));
    book->job().state = "stopped";
    book->job().reason = "not submitted: " + id.status().message();
    book->job().updated_unix = clock->Now();
    (void)book->SaveJob();
    return id.status();
  }
  out.slurm_job_id = *id;
  out.slurm_log = fmt::format("{}/logs/slurm-{}.out", spec.run_dir, out.slurm_job_id);
  // Not through JobBook::Open, which writes back the row it read: the job's supervisor may be writing.
  for (const std::string& path : {RunDirLedgerPath(spec.run_dir), ledger_path}) {
    if (path.empty()) continue;
    TERN_ASSIGN_OR_RETURN(auto ledger, Ledger::Open(path));
    TERN_RETURN_IF_ERROR(ledger->SetSlurmJob(out.job_id, out.slurm_job_id,
                                             fmt::format("submitted to Slurm as job {}", out.slurm_job_id)));
  }
  return out;
}

int ExitCodeOfJob(const std::string& state, const std::string& last_reason) {
  if (state == "done") return kRunDone;
  if (state == "paused") return kRunInterrupted;
  if (state == "failed" && last_reason == "bad_config") return kRunBadConfig;
  return kRunStopped;
}

Result<JobOutcome> WaitForSlurmJob(const JobSpec& spec, const Submitted& submitted,
                                   const std::string& ledger_path, Clock* clock, std::FILE* console) {
  std::string last;
  while (true) {
    TERN_ASSIGN_OR_RETURN(SlurmJobInfo info, QuerySlurmJob(submitted.slurm_job_id));
    const std::string now =
        info.state.empty() ? "gone from Slurm's records"
        : info.state == "PENDING"
            ? fmt::format("PENDING ({})", info.reason)
            : fmt::format("{}{}", info.state,
                          info.nodes.empty() || info.nodes == "(null)" ? "" : " on " + info.nodes);
    const std::string line = fmt::format("{}, restarts {}", now, info.restarts);
    if (line != last && console) {
      std::fprintf(console, "tern run: Slurm job %s: %s\n", submitted.slurm_job_id.c_str(), line.c_str());
      std::fflush(console);
    }
    last = line;
    if (!info.active()) break;
    clock->Sleep(1.0);
  }
  TERN_ASSIGN_OR_RETURN(auto book, JobBook::Open(spec.run_dir, ledger_path));
  JobOutcome out;
  out.job = book->job();
  out.attempts = book->attempts();
  out.totals = book->totals();
  out.exit_code =
      ExitCodeOfJob(out.job.state, out.attempts.empty() ? std::string() : out.attempts.back().reason);
  if (console) std::fputs(JobTable(out.job, out.attempts).c_str(), console);
  return out;
}

}  // namespace tern::run
