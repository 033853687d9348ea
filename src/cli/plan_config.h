// A `tern train` config as a planning job, shared by `tern plan --config` and `tern simulate --config`: the
// model, sequence, micro-batch and tokens per step are the config's; the tokens are train.steps of them
// unless `tokens` says otherwise; evaluation, samples and checkpoints become the run's non-step time
// (plan/run_model.h). It lives in cli/ because it reads a TrainConfig (train/), which plan/ does not know.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "plan/calibration.h"
#include "plan/planner.h"

namespace tern::cli {

// Fills req->workload and req->run from `config` with `overrides` ("key=value", as `tern train --set`).
// `tokens` (e.g. "500M", empty = the config's steps) replaces the config's train.steps. The vocabulary, when
// the config leaves it 0, is the prepared tokenizer's, else the bench's, else 4096.
[[nodiscard]] Status ApplyTrainConfig(const std::string& config, const std::vector<std::string>& overrides,
                                      const std::string& tokens,
                                      const std::optional<plan::BenchProfile>& bench, plan::PlanRequest* req);

// The work of that run on one instance of `offer` (on-demand, the planner's whole-run model: steps x step
// time, start-up, evaluations, samples, checkpoints, the final save), as `tern plan --config` costs it.
struct ConfigWork {
  double work_s = 0;
  double state_bytes = 0;   // one checkpoint of the run (weights + AdamW moments)
  bool calibrated = false;  // the bench speaks for the offer's GPU: its MFU and run times were used
  std::string mfu_source, overheads_source;
  std::string runs_why;           // empty when tern train can run it there (the plan's `runs` column)
  plan::RestartOverhead restart;  // the bench's measured restart when it speaks for the GPU, else the default
};
[[nodiscard]] Result<ConfigWork> WorkOnInstance(const plan::Catalog& cat, const plan::InstanceOffer& offer,
                                                const plan::PlanRequest& req, const plan::PlanDefaults& d);

}  // namespace tern::cli
