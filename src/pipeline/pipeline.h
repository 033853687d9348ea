// `tern pipeline PIPELINE.yaml`: train a candidate (a `tern run` job), evaluate it and the version under
// compare.alias on the same windows, register the candidate, and move the alias to it when it is better by
// the margin. The decision, with both evaluations, is printed and written as JSON; the exit code tells a CI
// system what happened (kPromoted, kNotBetter, or a failure, which never moves an alias).
#pragma once

#include <cstdio>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "pipeline/pipeline_spec.h"

namespace tern::pipeline {

inline constexpr int kPromoted = 0;   // the candidate won (or is the first version) and holds the alias
inline constexpr int kFailed = 1;     // training, evaluation or the registry failed: no alias moved
inline constexpr int kNotBetter = 3;  // registered, not promoted: it did not beat the alias by the margin

struct PipelineOptions {
  std::string tern_binary;  // runs `tern run` (the calling tern: /proc/self/exe)
  std::string report_path;  // the decision as JSON ("" = not written)
  bool quiet = false;       // the trainer's output is not shown
  FILE* log = stderr;       // progress lines
};

// One model judged on the pipeline's windows (and prompts, and multiple-choice set).
struct Judgement {
  double loss = 0, perplexity = 0;
  int64_t windows = 0, tokens = 0;
  std::optional<double> prompt_logprob;               // sum over the prompt set
  std::optional<double> choice_acc, choice_acc_norm;  // on the multiple-choice set
  int64_t choice_items = 0;
  nlohmann::json ToJson() const;
};

struct PipelineOutcome {
  int exit_code = kFailed;
  std::string decision;  // one line: what happened and why
  std::string run_dir;
  int version = 0;                      // the candidate's registered version (0: not registered)
  std::optional<int> baseline_version;  // the alias's version before, when there was one
  std::optional<Judgement> candidate, baseline;
  nlohmann::json ToJson(const PipelineSpec& spec) const;
};

PipelineOutcome RunPipeline(const PipelineSpec& spec, const PipelineOptions& options);

// The candidate is better when its metric beats the baseline's by `margin` of the baseline's magnitude:
// loss < base * (1 - margin); the others (higher is better) > base + margin * |base|.
bool IsBetter(Metric metric, double margin, const Judgement& candidate, const Judgement& baseline);

}  // namespace tern::pipeline
