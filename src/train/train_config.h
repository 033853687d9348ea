// Everything `tern train` needs to know, loaded from YAML with `--set section.key=value` overrides.
// Every key lives in one registry (train_config.cpp) with its type, allowed values and help text, so an
// unknown key or a bad value is an error that names the key and what is allowed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/gpt_config.h"

namespace tern {

struct TrainConfig {
  GptConfig model;  // model.vocab_size = 0 means "take it from the tokenizer"

  // data
  std::string data_dir;  // the output directory of `tern prepare`

  // optimisation
  int batch_size = 8;           // micro-batch B (sequences)
  int seq_len = 128;            // T
  int64_t total_batch_tokens = 0;  // tokens per optimizer step; 0 = one micro-batch (B*T)
  int steps = 1000;
  double lr = 6e-4;
  double min_lr_ratio = 0.1;    // cosine floor = lr * min_lr_ratio
  int warmup_steps = 100;
  std::string schedule = "cosine";  // cosine | constant
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double grad_clip = 1.0;       // global norm; 0 disables
  uint64_t seed = 1337;
  std::string precision = "fp32";  // fp32 | bf16
  std::string device = "cpu";       // cpu | cpu-ref | cuda | auto

  // evaluation and samples
  int eval_every = 100;     // steps; 0 = only at the end
  int eval_batches = 20;
  int sample_every = 0;     // steps; 0 = only at the end
  int sample_tokens = 64;
  std::string sample_prompt;
  int num_samples = 3;

  // run
  std::string run_dir = "runs/run";
  double price_per_hour = 0;  // USD per hour of this machine; > 0 adds cost_usd and usd_per_mtok
  double peak_gflops = 0;     // peak FLOP/s of this machine for the precision; 0 = measure at start
  int log_every = 1;

  int grad_accum_steps() const;
  Status Validate() const;
};

// Loads a YAML file (nested sections) into cfg. Unknown keys and bad values are errors naming them.
Status LoadTrainConfigFile(const std::string& path, TrainConfig* cfg);
// Applies one "section.key=value" override.
Status ApplyOverride(const std::string& assignment, TrainConfig* cfg);
// The whole config as YAML (written into the run directory; loading it back gives the same config).
std::string TrainConfigToYaml(const TrainConfig& cfg);
// Every key with its current value and help, for `tern train --list-keys`.
std::string DescribeTrainConfigKeys(const TrainConfig& cfg);

}  // namespace tern
