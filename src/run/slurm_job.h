// `tern run --on slurm` from the submitting side: the batch script written and submitted, the job's row
// "queued" in both ledgers, and (with --wait) following the Slurm job to its end. The supervisor inside
// the allocation is the ordinary one (run/supervisor.h) with job.on = slurm: see run/slurm.h.
#pragma once

#include <cstdio>
#include <string>

#include "core/status.h"
#include "run/clock.h"
#include "run/job_spec.h"
#include "run/slurm.h"
#include "run/supervisor.h"

namespace tern::run {

struct Submitted {
  std::string job_id;        // tern's
  std::string slurm_job_id;  // Slurm's
  std::string script;        // the batch script
  std::string slurm_log;     // RUN_DIR/logs/slurm-<id>.out
};

// Writes RUN_DIR/slurm/job.sbatch and submits it. Refuses while a supervisor holds the run directory or
// the job's previous Slurm job is still queued or running (one Slurm job per run directory). A cancel
// asked for before is cleared: submitting again is a person's decision to go on.
[[nodiscard]] Result<Submitted> SubmitSlurmJob(const JobSpec& spec, const BatchCommand& command,
                                               const std::string& ledger_path, Clock* clock);

// Follows the Slurm job until Slurm is done with it (requeues included), a line per change of its state,
// then reads the job from the ledger. exit_code: what `tern run` would have exited with locally.
[[nodiscard]] Result<JobOutcome> WaitForSlurmJob(const JobSpec& spec, const Submitted& submitted,
                                                 const std::string& ledger_path, Clock* clock,
                                                 std::FILE* console);

// The exit code of a job that ended in `state` (JobRow::state) after `last_reason` (its last attempt's).
int ExitCodeOfJob(const std::string& state, const std::string& last_reason);

}  // namespace tern::run
