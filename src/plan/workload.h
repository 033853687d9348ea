// What the training job asks of the hardware: FLOPs (the trainer's own formula, GptFlopsPerToken) and
// memory per GPU (GptMemoryEstimate, plus two options tern plan reasons about: ZeRO-1 optimizer-state
// sharding across data-parallel ranks, and activation recomputation), and the micro-batch and gradient
// accumulation that fit a GPU.
#pragma once

#include <string>

#include "model/gpt_config.h"
#include "plan/defaults.h"
#include "plan/gpu_specs.h"

namespace tern::plan {

enum class Toggle { kAuto, kOff, kOn };

struct WorkloadSpec {
  GptConfig cfg;
  std::string model_label;
  int seq = 0;            // 0: the model's block_size
  double tokens = 0;      // training tokens
  double global_batch_tokens = 0;  // 0: PlanDefaults::global_batch_tokens
  int micro_batch = 0;    // 0: the largest power of two that fits; else this one (a training config's)
  Toggle zero1 = Toggle::kAuto;
  Toggle recompute = Toggle::kAuto;
};

// Memory per GPU in bytes, split the way GptMemory splits it, after sharding/recomputation.
struct MemoryBreakdown {
  double weights = 0;      // fp32 master (+ bf16 working copy)
  double grads = 0;        // fp32
  double optimizer = 0;    // AdamW m and v (fp32)
  double activations = 0;  // saved for backward (+ backward scratch)
  double total() const { return weights + grads + optimizer + activations; }
};

struct MemoryFit {
  bool fits = false;
  int micro_batch = 0;   // sequences per GPU per micro-step
  int grad_accum = 0;    // micro-steps per optimizer step
  bool zero1 = false;
  bool recompute = false;
  MemoryBreakdown used;  // at the chosen micro-batch
  double available = 0;  // usable bytes per GPU
  double need_b1 = 0;    // bytes per GPU at micro-batch 1 (or the fixed one) with every option allowed (why it failed)
};

class Workload {
 public:
  static Result<Workload> Make(const WorkloadSpec& spec, const PlanDefaults& d);

  const WorkloadSpec& spec() const { return spec_; }
  int seq() const { return spec_.seq; }
  double params() const { return params_; }
  double flops_per_token() const { return flops_per_token_; }
  double total_flops() const { return flops_per_token_ * spec_.tokens; }
  double global_batch_tokens() const { return spec_.global_batch_tokens; }
  // fp32 gradient bytes all-reduced per optimizer step (GptMemory::grads).
  double grad_bytes() const { return static_cast<double>(base_[0].grads); }
  // Bytes a resumable checkpoint needs: fp32 weights + AdamW moments.
  double checkpoint_bytes() const { return static_cast<double>(base_[0].params + base_[0].adam_state); }
  // fp32 weights: what is downloaded at the end.
  double model_bytes() const { return static_cast<double>(base_[0].params); }

  MemoryBreakdown Memory(Precision p, int micro_batch, bool zero1, bool recompute, int dp_ranks) const;
  MemoryFit Fit(Precision p, double gpu_mem_gib, int dp_ranks, const PlanDefaults& d) const;

 private:
  WorkloadSpec spec_;
  double params_ = 0, flops_per_token_ = 0;
  // GptMemoryEstimate at micro-batch 1 for fp32 [0] and bf16 [1]; its activation terms are linear in
  // B*T, so other micro-batches scale them (checked by a test) instead of re-running it per option.
  GptMemory base_[2];
  double layer_act_b1_ = 0;   // saved activations of one block at micro-batch 1
  double layer_input_b1_ = 0; // one block's input (B*T*C fp32): what recomputation keeps per layer
};

}  // namespace tern::plan
