// What the ledger says, for people and programs: one line per attempt, the job's table (the end of
// `tern run`, `tern job status`), JSON for `tern job status --json` and `tern job ls --json` (with the spend
// per project and per UTC day), and the job block added to summary.json when a job finishes.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "run/ledger.h"

namespace tern::run {

std::string FormatDollars(double usd);         // "$0.0042", "$12.35"
std::string FormatSeconds(double s);           // "4.2 s", "3m12s", "2h05m"
std::string AttemptLine(const AttemptRow& a);  // "preempted (exit 75), steps 1-40, 12.1 s, $0.0003"
std::string JobTable(const JobRow& job, const std::vector<AttemptRow>& attempts);
// The live spot policy's switches (time, from, to, why, the attempt then); "" when there are none.
std::string SwitchTable(const std::vector<SwitchRow>& switches);
nlohmann::json SwitchesJson(const std::vector<SwitchRow>& switches);

nlohmann::json AttemptJson(const AttemptRow& a);
nlohmann::json JobJson(const JobRow& job, const std::vector<AttemptRow>& attempts);
// Every job with its totals, newest first, and the spend by project and by UTC day (an attempt across
// midnight is split by the time on each side).
struct JobWithAttempts {
  JobRow job;
  std::vector<AttemptRow> attempts;
};
nlohmann::json JobsJson(const std::vector<JobWithAttempts>& jobs);
std::string JobsTable(const std::vector<JobWithAttempts>& jobs);

// Adds "job" (the totals over every attempt, from the ledger) to RUN_DIR/summary.json, so that the
// summary covers the whole job; the trainer's own fields (its cost_usd is already the job's) stay.
[[nodiscard]] Status AddJobToSummary(const std::string& run_dir, const JobRow& job,
                                     const std::vector<AttemptRow>& attempts);

}  // namespace tern::run
