#include "plan/workload.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace tern::plan {

const char* ActRecomputeName(ActRecompute r) {
  switch (r) {
    case ActRecompute::kGelu:
      return "gelu";
    case ActRecompute::kBlocks:
      return "blocks";
    case ActRecompute::kNone:
      break;
  }
  return "none";
}

Recompute ModelRecompute(ActRecompute r) {
  switch (r) {
    case ActRecompute::kGelu:
      return Recompute::kGelu;
    case ActRecompute::kBlocks:
      return Recompute::kBlocks;
    case ActRecompute::kNone:
      break;
  }
  return Recompute::kNone;
}

ActRecompute PlanRecompute(Recompute r) {
  switch (r) {
    case Recompute::kGelu:
      return ActRecompute::kGelu;
    case Recompute::kBlocks:
      return ActRecompute::kBlocks;
    case Recompute::kNone:
      break;
  }
  return ActRecompute::kNone;
}

double RecomputeTimeFactor(ActRecompute r, const PlanDefaults& d) {
  switch (r) {
    case ActRecompute::kGelu:
      return d.gelu_recompute_time_factor;
    case ActRecompute::kBlocks:
      return d.block_recompute_time_factor;
    case ActRecompute::kNone:
      break;
  }
  return 1.0;
}

Result<Workload> Workload::Make(const WorkloadSpec& spec_in, const PlanDefaults& d) {
  Workload w;
  w.spec_ = spec_in;
  TERN_RETURN_IF_ERROR(w.spec_.cfg.Validate());
  if (w.spec_.seq == 0) w.spec_.seq = w.spec_.cfg.block_size;
  if (w.spec_.seq < 1 || w.spec_.seq > w.spec_.cfg.block_size) {
    return Status::InvalidArgument(fmt::format("--seq {} must be in 1..{} (the model's block_size)",
                                               w.spec_.seq, w.spec_.cfg.block_size));
  }
  if (!(w.spec_.tokens > 0)) return Status::InvalidArgument("--tokens must be positive (e.g. --tokens 10B)");
  if (w.spec_.global_batch_tokens <= 0) w.spec_.global_batch_tokens = d.global_batch_tokens;
  const int T = w.spec_.seq;
  TERN_RETURN_IF_ERROR(w.spec_.lora.Validate(w.spec_.cfg));
  w.params_ = static_cast<double>(GptParamCount(w.spec_.cfg));
  w.trainable_ =
      w.spec_.lora.enabled() ? static_cast<double>(LoraParamCount(w.spec_.cfg, w.spec_.lora)) : w.params_;
  w.flops_per_token_ = LoraFlopsPerToken(w.spec_.cfg, w.spec_.lora, T);  // GptFlopsPerToken without LoRA
  for (int bf16 : {0, 1}) {
    for (ActRecompute r : {ActRecompute::kNone, ActRecompute::kGelu, ActRecompute::kBlocks}) {
      GptMemory m = GptMemoryEstimate(w.spec_.cfg, 1, T, bf16 == 1, ModelRecompute(r), w.spec_.attention,
                                      w.spec_.logits_chunk);
      // LoRA: the adapters' weights, gradients and moments; its scratch does not grow with the micro-batch,
      // so it is kept apart from the per-sequence scratch.
      m = WithLora(m, w.spec_.cfg, w.spec_.lora, bf16 == 1, static_cast<size_t>(T));
      w.lora_scratch_[bf16] =
          static_cast<double>(LoraScratchFloats(w.spec_.cfg, w.spec_.lora, bf16 == 1, /*rows=*/0) * 4);
      m.scratch -= static_cast<size_t>(w.lora_scratch_[bf16]);
      w.base_[bf16][static_cast<int>(r)] = m;
    }
  }
  return w;
}

MemoryBreakdown Workload::Memory(Precision p, int micro_batch, bool zero1, ActRecompute recompute,
                                 int dp_ranks) const {
  return Memory(p, micro_batch, zero1 ? ZeroStage::kOptimizer : ZeroStage::kNone, recompute, dp_ranks);
}

MemoryBreakdown Workload::Memory(Precision p, int micro_batch, ZeroStage zero, ActRecompute recompute,
                                 int dp_ranks) const {
  const GptMemory& m = base_[p == Precision::kBf16 ? 1 : 0][static_cast<int>(recompute)];
  const double B = micro_batch;
  // Rank 0's shard of the P parameters (the largest), as GptMemoryEstimate(..., world, zero) counts it.
  const bool sharded = zero != ZeroStage::kNone && dp_ranks > 1;
  const double shard =
      sharded ? static_cast<double>(ShardElements(static_cast<size_t>(params_), dp_ranks, 0)) : params_;
  // Gradients and moments are the trainable parameters' (all, or LoRA's adapters).
  const double train_shard =
      sharded
          ? static_cast<double>(std::max<size_t>(ShardElements(static_cast<size_t>(trainable_), dp_ranks, 0),
                                                 spec_.lora.enabled() ? 1 : 0))
          : trainable_;
  const double master = static_cast<double>(m.params), working = static_cast<double>(m.params_bf16);
  MemoryBreakdown out;
  const bool bf16_copy = working > 0;
  out.weights =
      zero >= ZeroStage::kWeights && sharded ? 4 * shard + (bf16_copy ? 2 * shard : 0) : master + working;
  out.grads = zero >= ZeroStage::kGradients && sharded ? 4 * train_shard : static_cast<double>(m.grads);
  out.optimizer = sharded ? 8 * train_shard : static_cast<double>(m.adam_state);
  double act = static_cast<double>(m.activations);  // the model's own layout for each recompute mode
  // The logits are one chunk of rows, not B's: take micro-batch 1's out and add this micro-batch's; the
  // loss sum is one double at any B.
  const int T = spec_.seq, chunk = spec_.logits_chunk;
  const bool bf16 = p == Precision::kBf16;
  act -= static_cast<double>(GptLogitsBytes(spec_.cfg, 1, T, chunk, bf16) + kGptLossSumBytes);
  out.activations =
      B * (act + static_cast<double>(m.scratch)) +
      static_cast<double>(GptLogitsBytes(spec_.cfg, micro_batch, T, chunk, bf16) + kGptLossSumBytes) +
      lora_scratch_[bf16 ? 1 : 0];
  return out;
}

MemoryFit Workload::Fit(Precision p, double gpu_mem_gib, int dp_ranks, const PlanDefaults& d) const {
  MemoryFit fit;
  fit.available = (gpu_mem_gib * d.mem_usable_fraction - d.mem_reserve_gib) * 1024.0 * 1024 * 1024;
  const int T = spec_.seq;
  // Micro-batch never larger than the global batch split over the ranks.
  const int per_rank =
      std::max(1, static_cast<int>(spec_.global_batch_tokens / (static_cast<double>(T) * dp_ranks)));
  const int b_max = std::min(d.max_micro_batch, per_rank);
  // Cheapest option first: sharding costs no extra compute (reduce-scatter + all-gather move the same
  // bytes as the all-reduce), GELU recompute a few percent, block recompute a third more compute.
  struct Option {
    bool zero1;
    ActRecompute recompute;
  };
  const Option options[] = {{false, ActRecompute::kNone},   {true, ActRecompute::kNone},
                            {false, ActRecompute::kGelu},   {true, ActRecompute::kGelu},
                            {false, ActRecompute::kBlocks}, {true, ActRecompute::kBlocks}};
  auto allowed = [](Toggle t, bool v) { return t == Toggle::kAuto || (t == Toggle::kOn) == v; };
  fit.need_b1 = 1e300;
  for (const Option& o : options) {
    if (!allowed(spec_.zero1, o.zero1) || (spec_.recompute && *spec_.recompute != o.recompute)) continue;
    if (o.zero1 && dp_ranks == 1 && spec_.zero1 != Toggle::kOn) continue;  // nothing to shard over
    // A training config fixes the micro-batch (the trainer does not adapt it); otherwise start at 1.
    const int b_min = std::max(1, spec_.micro_batch);
    const double b1 = Memory(p, b_min, o.zero1, o.recompute, dp_ranks).total();
    fit.need_b1 = std::min(fit.need_b1, b1);
    if (b1 > fit.available) continue;
    int B = b_min;
    while (spec_.micro_batch == 0 && B * 2 <= b_max &&
           Memory(p, B * 2, o.zero1, o.recompute, dp_ranks).total() <= fit.available) {
      B *= 2;
    }
    fit.fits = true;
    fit.micro_batch = B;
    fit.zero1 = o.zero1;
    fit.recompute = o.recompute;
    fit.used = Memory(p, B, o.zero1, o.recompute, dp_ranks);
    const double per_micro = static_cast<double>(B) * T * dp_ranks;
    fit.grad_accum = std::max(1, static_cast<int>(std::ceil(spec_.global_batch_tokens / per_micro - 1e-9)));
    return fit;
  }
  // What it would take: ZeRO-2 or ZeRO-3 over the ranks, at the same micro-batch, any recompute.
  if (dp_ranks > 1) {
    const int b_min = std::max(1, spec_.micro_batch);
    for (ZeroStage z : {ZeroStage::kGradients, ZeroStage::kWeights}) {
      for (ActRecompute r : {ActRecompute::kNone, ActRecompute::kGelu, ActRecompute::kBlocks}) {
        if (Memory(p, b_min, z, r, dp_ranks).total() <= fit.available) {
          fit.would_fit_with = z;
          fit.would_fit_recompute = r;
          return fit;
        }
      }
    }
  }
  return fit;
}

// What tern train lacks for a plan on GPU `g` with this fit (docs/planning.md, "What tern runs"); empty
// when it can run it. Data parallelism over any number of GPUs and nodes and ZeRO-1 it has.
std::vector<std::string> NotInTern(const GpuSpec& g, const MemoryFit& fit) {
  std::vector<std::string> lacks;
  switch (g.generation) {
    case GpuGeneration::kVolta:
      lacks.push_back(
          fmt::format("{} is compute capability 7.0; tern's CUDA backend needs 8.0+ (docs/gpu.md)", g.name));
      break;
    case GpuGeneration::kTuring:
      lacks.push_back(
          fmt::format("{} (sm_75) is not in tern's CUDA build; it needs 8.0+ (docs/gpu.md: "
                      "-DCMAKE_CUDA_ARCHITECTURES=75 with CUDA 12 may work, untested)",
                      g.name));
      break;
    case GpuGeneration::kUnknown:
      lacks.push_back(fmt::format(
          "{}: unknown GPU generation; tern's CUDA backend needs compute capability 8.0+", g.name));
      break;
    default:
      break;
  }
  return lacks;
}

}  // namespace tern::plan
