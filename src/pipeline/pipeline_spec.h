// PIPELINE.yaml: train -> evaluate -> compare -> register -> promote, the spec `tern pipeline` runs
// (docs/mlops.md has an example and a CI job that runs it).
//
//   name: demo                        # the model's name in the registry
//   train:                            # a `tern run` job; or `model: RUN_DIR` to judge a trained run
//     config: configs/demo.yaml
//     set: [train.steps=200]          # --set overrides
//     run_args: [--price-per-hour, "0.10"]   # more `tern run` flags
//   evaluate:
//     data: data/prepared/demo        # default: the candidate's data.dir
//     split: val
//     seq_len: 0                      # default: the candidate's train.seq_len
//     windows: 0                      # 0 = every window (default)
//     prompts: prompts.txt            # optional, one prompt per line
//     choices: hellaswag_val.jsonl    # optional, a multiple-choice set (`tern eval --choices`)
//   compare:
//     alias: production               # the version to beat
//     metric: loss                    # loss (lower wins); prompt_logprob, choice_acc, choice_acc_norm
//     (higher) margin: 0.01                    # the candidate must be better by 1% of the baseline's value
//   register: {registry: DIR|s3://..., key_file: F, note: TEXT}
//   promote: true                     # move compare.alias to the candidate when it wins (default true)
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace tern::pipeline {

enum class Metric { kLoss, kPromptLogprob, kChoiceAcc, kChoiceAccNorm };

struct PipelineSpec {
  std::string name;
  // train: a `tern run` job, or an existing run directory (model)
  std::string config, model;
  std::vector<std::string> set, run_args;
  // evaluate
  std::string data, split = "val", prompts, choices;
  int seq_len = 0;
  int64_t windows = 0;
  // compare
  std::string alias = "production";
  Metric metric = Metric::kLoss;
  double margin = 0;
  // register
  std::string registry, key_file, note;
  bool promote = true;
};

// Parses and checks a spec; `where` names it in messages. Paths in it are used as given (relative ones from
// the working directory, as every tern command takes them).
Result<PipelineSpec> ParsePipelineSpec(const std::string& yaml_text, const std::string& where);
Result<PipelineSpec> LoadPipelineSpec(const std::string& path);
const char* MetricName(Metric m);

}  // namespace tern::pipeline
