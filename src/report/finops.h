// The FinOps page of `tern report --ledger` (docs/report.md, "FinOps"): what every job in the ledger
// (run/ledger.h) cost over a window of time. Spend per UTC day stacked by project tag and per project,
// GPU-hours, utilisation, failure and preemption rates, work lost to preemptions and the top jobs by $.
// ComputeFinOps is a pure function of the ledger's rows; LoadFinOps reads the ledger (and, for the GPU
// utilisation, each job's metrics.jsonl when it is there). Rendering is FinOpsHtml (finops_html.cpp).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "run/job_report.h"

namespace tern::report {

// One job's figures within the window.
struct JobSpend {
  std::string job_id, project, state, instance, run_dir;
  double usd = 0, gpu_hours = 0, wall_hours = 0, productive_hours = 0;
  int attempts = 0, preemptions = 0, failures = 0;
  double lost_steps = 0, lost_s = 0, lost_usd = 0;
  double tokens = 0;
  std::optional<double> gpu_util_pct;  // mean of its step rows' gpu_util (metrics.jsonl), when present
};

struct ProjectSpend {
  std::string project;  // "(none)" for jobs without a tag
  double usd = 0, gpu_hours = 0, lost_usd = 0;
  int jobs = 0, attempts = 0, preemptions = 0, failures = 0;
};

// One `tern serve --usage-file` (serve/usage.h): what a server's reserved time cost and who used it. The
// whole file counts, whatever the window (a server's file covers its own lifetime).
struct ServingProject {
  std::string project;
  double requests = 0, prompt_tokens = 0, generation_tokens = 0, rate_limited = 0;
  std::optional<double> usd;  // its share of the cost: its share of the generated tokens
};
// One served model's share (the base model, or a LoRA adapter of `tern serve --lora`): what its fine-tune's
// owner is billed.
struct ServingModel {
  std::string model;
  double requests = 0, prompt_tokens = 0, generation_tokens = 0;
  std::optional<double> usd;  // its share of the generated tokens' cost
};
struct ServingUsage {
  std::string file, model;
  double started_unix = 0, updated_unix = 0, busy_s = 0, idle_s = 0;
  double requests = 0, prompt_tokens = 0, generation_tokens = 0;
  std::optional<double> price_per_hour, usd, usd_per_mtok;
  std::vector<ServingProject> by_project;
  std::vector<ServingModel> by_model;  // empty in usage files written before tern serve counted it
};
// Reads and checks a usage file; errors name the file and what is wrong with it.
[[nodiscard]] Result<ServingUsage> LoadServingUsage(const std::string& path);

struct FinOps {
  double since_unix = 0, now_unix = 0;
  std::string ledger;  // the file read
  double usd = 0, gpu_hours = 0, wall_hours = 0, productive_hours = 0, tokens = 0;
  int jobs = 0, attempts = 0, preemptions = 0, failures = 0, jobs_preempted = 0, jobs_failed = 0;
  double lost_steps = 0, lost_s = 0, lost_usd = 0, lost_gpu_hours = 0;
  std::optional<double> gpu_util_pct;  // GPU-hour weighted mean over the jobs that have it
  std::vector<std::string> days;       // every UTC day of the window (yyyy-mm-dd), oldest first
  std::vector<std::string> projects;   // by $ spent, highest first
  std::map<std::string, std::map<std::string, double>> usd_by_day;  // day -> project -> $
  std::vector<ProjectSpend> by_project;                             // by $, highest first
  std::vector<JobSpend> jobs_by_usd;                                // every job in the window, by $
  std::vector<ServingUsage> serving;  // `--serving FILE`s: the "serving" section
};

// An attempt ending with one of these reasons is a failure; "preempted" is a preemption.
bool IsFailureReason(const std::string& reason);

// The figures over [since_unix, now_unix]. Money, hours and lost work of an attempt count pro rata to the
// part of its run time inside the window (and are split over UTC days the same way: `tern job ls --json`
// does so); a preemption or failure counts when the attempt's end is inside it. GPU-hours: wall time x
// ranks. `gpu_util_by_job`: job_id -> mean GPU utilisation (%), where known.
FinOps ComputeFinOps(const std::vector<run::JobWithAttempts>& jobs, double since_unix, double now_unix,
                     const std::map<std::string, double>& gpu_util_by_job = {});

// "30d", "12h", "90m", "3600" (seconds), or "all" (0) -> seconds back from now.
[[nodiscard]] Result<double> ParseSince(const std::string& text);

// The ledger at `path` over the window; each job's RUN_DIR/metrics.jsonl, when readable, gives its GPU
// utilisation. A missing ledger is an error that says how jobs get into it.
[[nodiscard]] Result<FinOps> LoadFinOps(const std::string& path, double since_unix, double now_unix);

// The "serving" section of FinOpsJson: every server, and the projects summed over them.
nlohmann::json ServingJson(const std::vector<ServingUsage>& serving);

// The figures for machines (`tern report --ledger --json`, and the page's data). `top` jobs are listed.
nlohmann::json FinOpsJson(const FinOps& f, size_t top = 10);

// The page: self-contained like the run report (Chart.js inlined, the data as JSON, no network).
std::string FinOpsHtml(const FinOps& f, const std::string& chartjs);

}  // namespace tern::report
