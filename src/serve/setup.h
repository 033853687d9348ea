// From a path on disk to a running engine, the same for `tern serve` and `tern generate`.
//
// Weights come from a run directory (model.safetensors, written by `tern train` / `tern export`, plus
// tokenizer.model) or a checkpoint (docs/checkpoints.md: a step directory such as
// RUN/checkpoints/step_00001200, local or s3://, whose tensors.safetensors holds tern's tensors).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "model/gpt_config.h"
#include "serve/engine.h"

namespace tern {

struct ServeWeights {
  GptConfig config;
  std::vector<float> params;   // GptParamLayout order
  std::string tokenizer_path;  // the tokenizer.model that goes with them
  std::string name;            // a model name for the API: the run directory's (or checkpoint's) base name
};

// tokenizer: a tokenizer.model to use instead of the one found next to the weights (needed for a checkpoint
// outside its run directory, e.g. on S3).
Result<ServeWeights> LoadServeWeights(const std::string& path, const std::string& tokenizer = "");

// The KV pool sized in MB, the model and the engine. InvalidArgument when the pool cannot hold even one
// sequence of max_seq_len tokens.
struct EngineSetup {
  Quantize quantize = Quantize::kNone;
  DType kv_dtype = DType::kF32;
  double kv_cache_mb = 1024;
  int block_size = 16;
  EngineOptions engine;
};
Result<std::unique_ptr<Engine>> MakeEngine(Backend* backend, const GptConfig& cfg,
                                           const std::vector<float>& params, const Tokenizer* tokenizer,
                                           const EngineSetup& setup, ServeMetrics* metrics);

}  // namespace tern
