// The numbers `tern report` draws and prints: one run read through the typed reader (metrics/run_record.h),
// its attempts stitched into one curve, long series downsampled with a min/max envelope, the cost table, and
// the comparison of several runs (config differences, $ and time to reach a validation loss, A/B ratios).
// Rendering is report/html.h; this file knows nothing of HTML.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "metrics/run_record.h"
#include "run/ledger.h"

namespace tern::report {

// One point of the stitched curve: a step row with its x values on every axis. `t_s` and `usd` are made
// cumulative across attempts (an attempt whose clock or cost restarts is offset by the ones before it).
struct Point {
  int step = 0;
  double tokens = 0, t_s = 0;
  std::optional<double> usd;
  StepRecord row;
  double ckpt_stall_ms = 0;  // checkpoint stalls logged after this step
  int attempt = 0;
};

struct EvalPoint {
  int step = 0;
  double val_loss = 0, eval_ms = 0, tokens = 0, t_s = 0;
  std::optional<double> usd;
  std::optional<double> choice_acc, choice_acc_norm;         // eval.choices
  std::vector<std::pair<std::string, double>> val_loss_mix;  // data.mix: each mixed-in dataset's
};

// A mark on the time axis: a checkpoint, a preemption, a resume.
struct Mark {
  std::string kind;  // "checkpoint", "preempted", "resume"
  int step = 0;
  double tokens = 0, t_s = 0;
  std::optional<double> usd;
};

// Work redone after a resume: the earlier attempt's steps after the checkpoint it resumed from.
struct LostSpan {
  int from_step = 0, to_step = 0;  // (from_step, to_step] were redone
  double t0_s = 0, t1_s = 0, tokens0 = 0, tokens1 = 0;
  std::optional<double> usd0, usd1;
};

// Checkpoints kept in object storage (a tier whose location is s3://) at the end of the run, from the
// checkpoint rows: each save's bytes, less the steps retention removed afterwards.
struct StoredCheckpoints {
  int kept = 0;
  uint64_t bytes = 0;
};

struct RunData {
  std::string dir, name;
  std::string instance;  // provider:region:type:billing of RUN_DIR/ledger.sqlite's job ("" = none)
  StoredCheckpoints object_store;
  StartRecord start;
  std::optional<EndRecord> end;  // summary.json, else the end row
  std::vector<Point> points;     // stitched: one row per step, increasing, the later attempt's
  std::vector<EvalPoint> evals;  // stitched the same way
  std::vector<Mark> marks;
  std::vector<LostSpan> lost;
  int attempts = 1, lost_steps = 0;           // lost_steps: rows superseded by a later attempt
  double lost_s = 0;                          // their step time
  std::map<std::string, std::string> config;  // "start.precision", "train.lr" (config.yaml), flattened
};

// Stitches the rows of one metrics.jsonl (several attempts: a start row each, a "resume" row, then steps
// that repeat). Exposed for the tests; LoadRun reads the files and calls it.
[[nodiscard]] Result<RunData> StitchRows(const std::vector<RunRow>& rows);
// RUN_DIR/metrics.jsonl (required), summary.json and config.yaml (when there).
[[nodiscard]] Result<RunData> LoadRun(const std::string& dir);
// The same with the rows of RUN_DIR/metrics.jsonl already read (tern report reads them once for the page
// and the diagnosis).
[[nodiscard]] Result<RunData> LoadRunFromRows(const std::string& dir, const std::vector<RunRow>& rows);

// The job of RUN_DIR/ledger.sqlite that ran this directory (the newest; the newest of any when the directory
// was moved); nullopt when `tern run` did not start it.
[[nodiscard]] Result<std::optional<run::JobRow>> RunDirJob(const std::string& run_dir);

// Per-run numbers of the cost table.
struct RunSummary {
  int steps = 0;
  double tokens = 0, wall_s = 0;
  std::optional<double> final_train_loss, final_val_loss, best_val_loss, usd, usd_per_mtok, tokens_per_s, mfu;
  std::optional<double> energy_kwh, joules_per_token;  // when the rows have GPU energy
  // Storage and egress as `tern plan` models them (plan/cost.h, the provider's rates of plan/defaults.h):
  // storage = checkpoint GB kept in object storage x months of the run x $/GB-month; egress = the trained
  // model (fp32 weights) out of the cloud x $/GB. The provider is the instance's, else "aws" for s3://
  // checkpoints; none known: nullopt (the report says "no provider").
  std::string provider;
  double stored_gb = 0, model_gb = 0;
  std::optional<double> storage_usd, egress_usd;
};
RunSummary Summarize(const RunData& run);

// The first evaluation at or below `target`, with its x values; nullopt when the run never reaches it.
std::optional<EvalPoint> FirstReach(const RunData& run, double target);
// The target of "$ to reach": one run: its final val loss rounded up to 0.01; several: the best val loss
// all of them reach (the largest of their best), rounded up to 0.01. nullopt without evaluations.
std::optional<double> ReachTarget(const std::vector<RunData>& runs);

// Keys whose values differ between the runs (a key missing in a run reads ""), with each run's value.
std::map<std::string, std::vector<std::string>> ConfigDiff(const std::vector<RunData>& runs);

// B against A at the target: B's dollars ÷ A's, B's wall time ÷ A's (nullopt where either is unknown).
struct Ratios {
  std::optional<double> usd, time, tokens_per_s;
  std::string sentence;  // "B reaches val 3.50 in 0.62× the dollars of A (0.70× the time)"
};
Ratios CompareTwo(const RunData& a, const RunData& b, double target);

// Min/max envelope: at most 2 × buckets indices into [0, n) of `values`; each bucket keeps the index of
// its smallest and of its largest value (in order). n <= 2 × buckets keeps every index.
std::vector<size_t> EnvelopeIndices(const std::vector<double>& values, size_t buckets);
inline constexpr size_t kBuckets = 1000;  // so at most 2000 points per series

// Everything the page and --json show: per run the summary and the downsampled series, the comparison.
nlohmann::json ReportJson(const std::vector<RunData>& runs, bool with_series);

}  // namespace tern::report
