// What the training job asks of the hardware: FLOPs (the trainer's own formula, GptFlopsPerToken) and
// memory per GPU (GptMemoryEstimate, plus the options tern plan reasons about: ZeRO-1 sharding of the AdamW
// moments across data-parallel ranks as tern train does it, and activation recomputation of the GELU outputs
// or of whole blocks),
// and the micro-batch and gradient accumulation that fit a GPU.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model/gpt_config.h"
#include "model/lora.h"
#include "plan/defaults.h"
#include "plan/gpu_specs.h"

namespace tern::plan {

enum class Toggle { kAuto, kOff, kOn };

// Activation recomputation: `tern train`'s train.recompute. The memory is the model's own allocation
// (GptMemoryEstimate with the model's Recompute); the cost of kGelu is L-1 GELU forwards per micro-batch, of
// kBlocks (each block's input kept, the block re-run in the backward) about one more forward.
enum class ActRecompute { kNone, kGelu, kBlocks };
const char* ActRecomputeName(ActRecompute r);  // "none", "gelu", "blocks"
Recompute ModelRecompute(ActRecompute r);      // the model's mode (train.recompute) for each
ActRecompute PlanRecompute(Recompute r);       // and back
// The compute multiplier of a recomputation mode (PlanDefaults' gelu/block_recompute_time_factor).
double RecomputeTimeFactor(ActRecompute r, const PlanDefaults& d);

struct WorkloadSpec {
  GptConfig cfg;
  std::string model_label;
  int seq = 0;                     // 0: the model's block_size
  double tokens = 0;               // training tokens
  double global_batch_tokens = 0;  // 0: PlanDefaults::global_batch_tokens
  int micro_batch = 0;  // 0: the largest power of two that fits; else this one (a training config's)
  Toggle zero1 = Toggle::kAuto;
  // Empty = auto: none, then gelu, then blocks, each only when the cheaper ones do not fit. A training
  // config fixes it to its train.recompute (the trainer does not adapt it).
  std::optional<ActRecompute> recompute;
  // Attention's kernel family (train.attention): what it saves per layer (AttentionStateBytes).
  AttentionKind attention = AttentionKind::kNaive;
  // The fused classifier's rows of logits (train.logits_chunk; GptLogitsBytes).
  int logits_chunk = kDefaultLogitsChunk;
  // LoRA fine-tuning (train.lora, model/lora.h): gradients, AdamW moments and the all-reduced bytes are the
  // adapters'; the FLOPs per token are LoraFlopsPerToken (no frozen weight's gradient).
  LoraSpec lora;
};

// Memory per GPU in bytes, split the way GptMemory splits it, after sharding/recomputation.
struct MemoryBreakdown {
  double weights = 0;      // fp32 master (+ bf16 working copy)
  double grads = 0;        // fp32
  double optimizer = 0;    // AdamW m and v (fp32)
  double activations = 0;  // saved for backward (incl. token ids) + backward scratch
  double total() const { return weights + grads + optimizer + activations; }
};

struct MemoryFit {
  bool fits = false;
  // When it does not fit: the ZeRO stage (2 or 3) that would fit it at the same micro-batch, with any
  // recompute allowed; kNone if none does. tern train shards only the moments (ZeRO-1), so such a job is
  // excluded, and the reason says what it would take.
  ZeroStage would_fit_with = ZeroStage::kNone;
  ActRecompute would_fit_recompute = ActRecompute::kNone;  // ... with this recompute
  int micro_batch = 0;                                     // sequences per GPU per micro-step
  int grad_accum = 0;                                      // micro-steps per optimizer step
  bool zero1 = false;
  ActRecompute recompute = ActRecompute::kNone;
  MemoryBreakdown used;  // at the chosen micro-batch
  double available = 0;  // usable bytes per GPU
  double need_b1 =
      0;  // bytes per GPU at micro-batch 1 (or the fixed one) with every option allowed (why it failed)
};

class Workload {
 public:
  static Result<Workload> Make(const WorkloadSpec& spec, const PlanDefaults& d);

  const WorkloadSpec& spec() const { return spec_; }
  int seq() const { return spec_.seq; }
  double params() const { return params_; }
  // Parameters with gradients and optimizer state: params(), or with LoRA the adapters'.
  double trainable_params() const { return trainable_; }
  double flops_per_token() const { return flops_per_token_; }
  double total_flops() const { return flops_per_token_ * spec_.tokens; }
  double global_batch_tokens() const { return spec_.global_batch_tokens; }
  // fp32 gradient bytes all-reduced per optimizer step (GptMemory::grads).
  double grad_bytes() const { return static_cast<double>(base_[0][0].grads); }
  // Bytes a resumable checkpoint needs: fp32 weights + AdamW moments.
  double checkpoint_bytes() const { return static_cast<double>(base_[0][0].params + base_[0][0].adam_state); }
  // fp32 weights: what is downloaded at the end.
  double model_bytes() const { return static_cast<double>(base_[0][0].params); }

  // Per GPU, for the rank that holds the most (rank 0: uneven shards give the first P % n ranks one more
  // element). zero1 is tern train's ZeRO-1: the AdamW moments of a shard (8 bytes x ShardElements(P, n, 0));
  // the fp32 weights, the bf16 copy and the gradients stay whole (GptMemoryEstimate's world/zero overload).
  MemoryBreakdown Memory(Precision p, int micro_batch, bool zero1, ActRecompute recompute,
                         int dp_ranks) const;
  MemoryBreakdown Memory(Precision p, int micro_batch, ZeroStage zero, ActRecompute recompute,
                         int dp_ranks) const;
  MemoryFit Fit(Precision p, double gpu_mem_gib, int dp_ranks, const PlanDefaults& d) const;

 private:
  WorkloadSpec spec_;
  double params_ = 0, trainable_ = 0, flops_per_token_ = 0;
  double lora_scratch_[2] = {0, 0};  // LoRA's scratch [fp32, bf16] but its per-row part (micro-batch 1's)
  // GptMemoryEstimate at micro-batch 1 for fp32 [0] and bf16 [1], without [0] and with [1] GELU recompute;
  // its activation terms but the logits are linear in B*T, so other micro-batches scale them (checked by a
  // test) and add GptLogitsBytes, instead of re-running it per option.
  GptMemory base_[2][3];  // micro-batch 1 [fp32/fp16, bf16][ActRecompute]
};

// What tern train lacks for a plan on GPU `g` with this fit (docs/planning.md, "What tern runs"); empty
// when it can run it. Data parallelism over any number of GPUs and nodes and ZeRO-1 it has.
std::vector<std::string> NotInTern(const GpuSpec& g, const MemoryFit& fit);

}  // namespace tern::plan
