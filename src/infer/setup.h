// From loaded weights (infer/weights.h) to a running engine, the same for `tern serve` and `tern generate`.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "infer/adapter.h"
#include "infer/engine.h"
#include "model/gpt_config.h"

namespace tern {

// The KV pool sized in MB, the model and the engine. InvalidArgument when the pool cannot hold even one
// sequence of max_seq_len tokens.
struct EngineSetup {
  Quantize quantize = Quantize::kNone;
  DType kv_dtype = DType::kF32;
  double kv_cache_mb = 1024;
  int block_size = 16;
  EngineOptions engine;
  // LoRA adapters served beside the weights (`tern serve --lora`), numbered 1, 2, ... in this order; the
  // caller has checked that they were trained on these weights (CheckAdapterBase).
  std::vector<LoraAdapter> adapters;
};
Result<std::unique_ptr<Engine>> MakeEngine(Backend* backend, const GptConfig& cfg,
                                           const std::vector<float>& params, const Tokenizer* tokenizer,
                                           const EngineSetup& setup, ServeMetrics* metrics);

}  // namespace tern
