// The sweep's loop: trials as `tern run` jobs (the tern binary as a subprocess, or a Slurm job submitted by
// `tern run --on slurm`, so each trial's cost is in its run directory's ledger at the instance's price), N
// at a time, rung by rung as ASHA decides, within the budgets; every change recorded in DIR/sweep.sqlite, so
// a restarted sweep resumes, following again the Slurm jobs still queued or running (docs/sweep.md).
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "metrics/run_record.h"
#include "sweep/spec.h"
#include "sweep/store.h"
#include "sweep/trials.h"

namespace tern::sweep {

struct SweepOptions {
  SweepSpec spec;
  std::string spec_text;   // recorded; a restart with another spec is refused
  std::string tern;        // the tern binary that runs the trials
  FILE* console = stderr;  // one line per event; nullptr = quiet
  // Where the rungs run; nullptr = by spec.on: LocalTrials, or SlurmTrials over the real Slurm (tests give
  // their own).
  TrialRunner* runner = nullptr;
};

struct SweepResult {
  std::vector<TrialRow> trials;
  std::vector<int> rung_steps;
  double spent_usd = 0;
  int best = -1;  // the id of the trial with the lowest loss at the highest rung any trial reached
  Objective objective = Objective::kValLoss;  // what the losses are (spec.objective)
  std::string stopped;  // why the sweep launched no more (budget), "" when it ran every trial it could
};

// Every trial's checkpoints are its own: a checkpoint tier the trial's config names outside its run
// directory (ckpt.dir, ckpt.durable, ckpt.best_dir; the base config's, e.g. a shared durable tier) gets a
// trial_NNN folder below it, as `--set` assignments. Without it, a trial with `ckpt.resume: auto` would
// resume from another trial's newest checkpoint in the shared tier.
std::vector<std::string> TrialOwnTiers(const SweepSpec& spec, const TrialRow& t);

// The objective's value (lower is better) in the evaluation row the trainer wrote at `step` of run_dir's
// metrics.jsonl (the rung's last step always evaluates). NotFound names what is missing and the fix.
[[nodiscard]] Result<double> ObjectiveAt(const std::string& run_dir, int step, Objective objective);
// The same for one evaluation row; nullopt when the row lacks it (no eval.choices).
std::optional<double> ObjectiveOf(const EvalRecord& e, Objective objective);

// Runs (or resumes) the sweep to its end.
[[nodiscard]] Result<SweepResult> RunSweep(const SweepOptions& o);

// The result from the recorded state alone (for output after the sweep, or of one that is running).
SweepResult Summarize(const SweepSpec& spec, std::vector<TrialRow> trials);

// Checks every trial's overrides against the config registry (unknown keys, bad values) before anything runs;
// the warnings say what will work but not as one may think (a cosine schedule stretched at each rung).
[[nodiscard]] Result<std::vector<std::string>> CheckTrialConfigs(const SweepSpec& spec);

}  // namespace tern::sweep
