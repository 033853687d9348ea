// `tern bench --serve`: tern serve's forward (infer/inference_model.h, the model the server runs) timed on
// this device with random weights: one prompt's prefill, then decode steps of each --batches count of
// sequences over a KV cache of --context tokens each. Its JSON is what `tern plan --serve --calibrate` fits
// the replica model to (plan/serve_calibration.h); the text output prints that fit. With --lora-rank the
// decode steps are timed a second time with LoRA adapters ("lora_decode"; the fit reads "decode" only).
#pragma once

#include <string>
#include <vector>

#include "model/gpt_config.h"

namespace tern::cli {

struct ServeBenchFlags {
  std::string weights = "bf16";   // tern serve --weights: fp32 | bf16 | int8
  std::string kv_dtype = "auto";  // tern serve --kv-dtype
  std::string device = "auto";    // cpu | cuda | auto
  std::vector<int> batches = {1, 4, 16, 64};
  int context = 512;  // tokens in each sequence's cache while decoding, and the prompt's length
  int steps = 8;      // timed decode steps per batch (the median is reported), after one untimed
  // Multi-LoRA (tern serve --lora): with a rank, every decode step is timed again with each sequence on one
  // of lora_adapters random adapters of that rank (every block matrix), round robin: the cost of serving
  // fine-tunes beside the base model, as a ratio to the same step without them.
  int lora_rank = 0;
  int lora_adapters = 4;
  bool json = false;
};

// Runs the bench for `model` and prints it (text, or one JSON object). Returns the exit status.
int RunServeBench(const ServeBenchFlags& flags, const GptConfig& model);

}  // namespace tern::cli
