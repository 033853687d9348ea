// SWEEP.yaml: the base training config, the search space, the sampler, ASHA's settings, the instance and
// the budgets (docs/sweep.md). Parsing only: the values are checked against the config registry when a
// trial's overrides are applied (sweep/runner.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace tern::sweep {

// One dimension of the search space: a config key (any key of `tern train --list-keys`) and its law.
struct Param {
  enum class Kind { kChoice, kUniform, kLogUniform, kInt };
  std::string key;  // e.g. train.lr
  Kind kind = Kind::kChoice;
  std::vector<std::string> choices;  // kChoice: the values as written
  double lo = 0, hi = 0;             // kUniform, kLogUniform, kInt (inclusive)
};

// What ASHA ranks trials by, lower is better, at the rung's last evaluation: the validation loss; the error
// on the training config's eval.choices multiple-choice set (1 - choice_acc, or 1 - choice_acc_norm); or,
// with data.mix, the mean or the worst of the validation losses of data.dir and every mixed-in dataset (a
// sweep of the shares that does not trade one dataset away for another).
enum class Objective { kValLoss, kChoiceError, kChoiceErrorNorm, kValLossMean, kValLossMax };
// As SWEEP.yaml writes it: val_loss, choice_error, choice_error_norm, val_loss_mean, val_loss_max.
const char* ObjectiveName(Objective o);
const char* ObjectiveLabel(Objective o);  // for people: "val loss", "choice error (1 - acc)", ...

struct AshaSettings {
  int eta = 4;  // the reduction factor: the top 1/eta of a rung go on (Determined's divisor)
  int min_steps = 0, max_steps = 0;
};

struct SweepSpec {
  std::string base_config;  // the training config, absolute (relative paths are from SWEEP.yaml's folder)
  std::string dir;          // the sweep directory, absolute; default: sweeps/<SWEEP.yaml's stem>
  std::vector<Param> space;
  bool grid = false;  // sampler: random | grid
  uint64_t seed = 1;
  int trials = 0;  // the most trials; grid: 0 = the whole grid
  AshaSettings asha;
  std::string instance;       // provider:region:type:billing, priced from the catalog by `tern run`
  double price_per_hour = 0;  // or a price by hand
  double budget_usd = 0;      // 0 = none
  int parallel = 1;
  std::vector<std::string> overrides;  // `set:` section.key=value for every trial
  // `job:` the keys of a training config's job: section (`tern run`'s flags: time_limit, sbatch_args,
  // max_attempts, ...) for every trial's `tern run`, in the order written; job.on sets `on`.
  std::vector<std::pair<std::string, std::string>> job;
  std::string on = "local";  // where trials run: local (child processes) | slurm (a Slurm job per rung)
  Objective objective = Objective::kValLoss;
};

// Parses SWEEP.yaml's text; `path` names it in messages and anchors relative paths. Every error names the
// key and what is allowed.
[[nodiscard]] Result<SweepSpec> ParseSweepSpec(std::string_view text, const std::string& path);
[[nodiscard]] Result<SweepSpec> LoadSweepSpec(const std::string& path);

// The rungs: min_steps * eta^k below max_steps, then max_steps.
std::vector<int> RungSteps(const AshaSettings& a);

// The number of trials the sweep runs: `trials`, or for a grid the grid's size when trials is 0 (or larger).
int TrialCount(const SweepSpec& spec);

// Trial `index`'s parameters as `key=value` overrides, in the order of the space: a pure function of the
// seed and the index (random), or the index-th point of the grid, so that a restarted sweep samples the same.
std::vector<std::pair<std::string, std::string>> SampleTrial(const SweepSpec& spec, int index);

}  // namespace tern::sweep
