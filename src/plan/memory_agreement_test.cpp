// The planner's memory model against what the model really allocates: for each config, precision and
// recompute mode tern train offers, Workload::Memory (one GPU, no ZeRO-1) must give the bytes of
// Gpt::Allocation (the sizing code the Gpt constructor runs; model/gpt_recompute_test.cpp checks that a
// constructed Gpt allocates exactly that). Agreement within 10% would do; both sides describe the
// same buffers, so the test holds them to the byte, and prints the relative error when they drift.
//
// Data parallel (world W, ZeRO-1): the planner's per-GPU memory must be GptMemoryEstimate(..., W, ZeRO-1,
// rank 0) and both the hand formula (the moments of a dist::ShardOf shard, everything else whole); and a Gpt
// given its rank's optimizer shard (as the trainer does with dist.zero=1) allocates exactly
// GptMemoryEstimate(cfg, B, T, bf16, recompute, W, ZeRO-1, rank) on every rank.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <fmt/format.h>

#include "backend/backend.h"
#include "dist/communicator.h"
#include "model/gpt.h"
#include "plan/workload.h"

namespace tern::plan {
namespace {

struct Shape {
  const char* what;
  GptConfig cfg;
  int B, T;
};

void ExpectSameBytes(const char* part, double planned, double allocated) {
  const double rel = allocated > 0 ? std::abs(planned - allocated) / allocated : std::abs(planned);
  EXPECT_EQ(planned, allocated) << part << ": planner " << planned << " B, model " << allocated << " B ("
                                << 100 * rel << "% apart)";
  EXPECT_LE(rel, 0.10) << part;
}

TEST(MemoryAgreement, PlannerEstimateIsTheModelsAllocation) {
  const Shape shapes[] = {
      {"gpt2-124m B=16 T=1024", {12, 12, 768, 50257, 1024}, 16, 1024},
      {"gpt2-124m B=4 T=64 (tern bench's README line)", {12, 12, 768, 50257, 1024}, 4, 64},
      {"demo L4 H4 C256 V4096 B=16 T=128", {4, 4, 256, 4096, 128}, 16, 128},
      {"odd L3 H2 C20 V31 B=3 T=7", {3, 2, 20, 31, 9}, 3, 7},
  };
  // The trainer's precisions, as the planner sees them: fp16 has no 16-bit weight copy (the operands are
  // rounded per matmul), so its memory is fp32's.
  const struct {
    Compute compute;
    Precision planned;
  } precisions[] = {{Compute::kF32, Precision::kFp32},
                    {Compute::kBF16, Precision::kBf16},
                    {Compute::kF16, Precision::kFp32}};
  // train.logits_chunk: the whole micro-batch's logits, the default chunk, and a chunk that divides no N.
  for (int chunk : {0, kDefaultLogitsChunk, 100})
    for (const Shape& s : shapes)
      for (AttentionKind kind : {AttentionKind::kNaive, AttentionKind::kFlash, AttentionKind::kCudnn}) {
        for (const auto& p : precisions) {
          for (ActRecompute ar : {ActRecompute::kNone, ActRecompute::kGelu, ActRecompute::kBlocks}) {
            const Recompute r = ModelRecompute(ar);
            SCOPED_TRACE(fmt::format("{}, compute {}, recompute {}, attention {}, logits chunk {}", s.what,
                                     static_cast<int>(p.compute), RecomputeName(r), AttentionKindName(kind),
                                     chunk));
            WorkloadSpec spec;
            spec.cfg = s.cfg;
            spec.attention = kind;
            spec.logits_chunk = chunk;
            spec.seq = s.T;
            spec.tokens = 1e9;
            spec.micro_batch = s.B;
            Result<Workload> w = Workload::Make(spec, PlanDefaults());
            ASSERT_TRUE(w.ok()) << w.status().message();
            const MemoryBreakdown planned = w->Memory(p.planned, s.B, false, ar, 1);
            const GptMemory a = Gpt::Allocation(s.cfg, s.B, s.T, p.compute, r, kind, chunk);
            ExpectSameBytes("weights", planned.weights, static_cast<double>(a.params + a.params_bf16));
            ExpectSameBytes("grads", planned.grads, static_cast<double>(a.grads));
            ExpectSameBytes("optimizer", planned.optimizer, static_cast<double>(a.adam_state));
            ExpectSameBytes("activations + scratch", planned.activations,
                            static_cast<double>(a.activations + a.scratch));
            ExpectSameBytes("total", planned.total(), static_cast<double>(a.total()));
          }
        }
      }
}

// The saving the docs quote (docs/gpu.md, Memory): GPT-2 124M, B=16, T=1024, the fused classifier's default
// chunk instead of the whole micro-batch's logits: (16384 - 1024) rows of V = 50257 bf16 logits (bf16
// compute; their gradient is written in place).
TEST(MemoryAgreement, FusedClassifierHoldsOneChunkOfLogits) {
  const GptConfig cfg{12, 12, 768, 50257, 1024};
  const GptMemory whole =
      Gpt::Allocation(cfg, 16, 1024, Compute::kBF16, Recompute::kNone, AttentionKind::kFlash, 0);
  const GptMemory fused =
      Gpt::Allocation(cfg, 16, 1024, Compute::kBF16, Recompute::kNone, AttentionKind::kFlash);
  EXPECT_EQ(whole.activations - fused.activations, size_t{16384 - 1024} * 50257 * 2);
  EXPECT_EQ(whole.activations - fused.activations, size_t{1543895040});  // 1.44 GiB
  EXPECT_EQ(whole.scratch, fused.scratch);
  // The planner scales the other activations with the micro-batch and adds one chunk: at B=1 (1024 rows)
  // the chunk is the whole micro-batch, at B=16 one sixteenth of it.
  WorkloadSpec spec;
  spec.cfg = cfg;
  spec.attention = AttentionKind::kFlash;
  spec.tokens = 1e9;
  Result<Workload> w = Workload::Make(spec, PlanDefaults());
  ASSERT_TRUE(w.ok()) << w.status().message();
  EXPECT_EQ(w->Memory(Precision::kBf16, 16, false, ActRecompute::kNone, 1).activations,
            static_cast<double>(fused.activations + fused.scratch));
}

// The saving the docs quote (docs/gpu.md, Memory): GPT-2 124M, B=16, T=1024: (L-1) x B*T x 4C floats.
TEST(MemoryAgreement, GeluRecomputeSavesLMinusOneGeluOutputs) {
  const GptConfig cfg{12, 12, 768, 50257, 1024};
  const GptMemory none = Gpt::Allocation(cfg, 16, 1024, Compute::kF32, Recompute::kNone);
  const GptMemory gelu = Gpt::Allocation(cfg, 16, 1024, Compute::kF32, Recompute::kGelu);
  EXPECT_EQ(none.activations - gelu.activations, size_t{11} * 16 * 1024 * 4 * 768 * 4);  // 2,214,592,512 B
  EXPECT_EQ(none.activations - gelu.activations, size_t{2214592512});
  // bf16 compute keeps the GELU outputs in bf16: half of it.
  const GptMemory none16 = Gpt::Allocation(cfg, 16, 1024, Compute::kBF16, Recompute::kNone);
  const GptMemory gelu16 = Gpt::Allocation(cfg, 16, 1024, Compute::kBF16, Recompute::kGelu);
  EXPECT_EQ(none16.activations - gelu16.activations, size_t{11} * 16 * 1024 * 4 * 768 * 2);
}

// q, k, v, the attention, GELU and layer norm outputs and the logits in bf16 under bf16 compute (docs/gpu.md,
// Memory): GPT-2 124M, B=16, T=1024, every layer's [B*T, 3C] qkv, [B*T, C] attention output, [B*T, 4C] GELU
// output and [B*T, C] ln1 and ln2, lnf [B*T, C] and one chunk's [1024, V] logits in 2 bytes instead of 4.
TEST(MemoryAgreement, Bf16ComputeKeepsTheMatmulOnlyActivationsInBf16) {
  const GptConfig cfg{12, 12, 768, 50257, 1024};
  const GptMemory f32 = Gpt::Allocation(cfg, 16, 1024, Compute::kF32, Recompute::kNone);
  const GptMemory bf16 = Gpt::Allocation(cfg, 16, 1024, Compute::kBF16, Recompute::kNone);
  const size_t gelu_half = size_t{12} * 16 * 1024 * 4 * 768 * 2;  // 1.13 GiB
  const size_t logits_half = size_t{1024} * 50257 * 2;            // one chunk of logits (and their gradient)
  const size_t ln_half = (size_t{2} * 12 + 1) * 16 * 1024 * 768 * 2;  // 0.59 GiB
  const size_t qkv_atty_half = size_t{12} * 16 * 1024 * 4 * 768 * 2;  // 1.13 GiB
  EXPECT_EQ(f32.activations - bf16.activations, gelu_half + logits_half + ln_half + qkv_atty_half);
  EXPECT_EQ(f32.activations - bf16.activations, size_t{3147991040});  // 2.93 GiB
}

// The saving the docs quote (docs/gpu.md, Attention kernels): GPT-2 124M, B=16, T=1024, flash instead of
// naive: per layer the B*NH*T*T probabilities become B*NH*T*2 statistics, and the datt scratch goes.
TEST(MemoryAgreement, FlashAttentionKeepsStatisticsNotProbabilities) {
  const GptConfig cfg{12, 12, 768, 50257, 1024};
  const GptMemory naive = Gpt::Allocation(cfg, 16, 1024, Compute::kBF16, Recompute::kNone);
  const GptMemory flash =
      Gpt::Allocation(cfg, 16, 1024, Compute::kBF16, Recompute::kNone, AttentionKind::kFlash);
  EXPECT_EQ(naive.activations - flash.activations, size_t{12} * 16 * 12 * (1024 * 1024 - 2 * 1024) * 4);
  EXPECT_EQ(naive.activations - flash.activations, size_t{9644802048});  // 8.98 GiB
  EXPECT_EQ(naive.scratch - flash.scratch, size_t{805306368});           // 768 MiB
}

// GPT-2 124M over 7 ranks, by hand: P = 124,439,808 = 7 x 17,777,115 + 3, so ranks 0-2 hold 17,777,116
// parameters' moments (142,216,928 B) and ranks 3-6 17,777,115 (142,216,920 B); over 8 ranks P divides:
// 15,554,976 each (124,439,808 B = P bytes, 8P/8). Weights and gradients stay whole: 4P each (+2P bf16).
TEST(MemoryAgreement, Zero1ShardsTheMomentsByHand) {
  const GptConfig cfg{12, 12, 768, 50257, 1024};
  ASSERT_EQ(GptParamCount(cfg), size_t{124439808});
  const GptMemory one = GptMemoryEstimate(cfg, 16, 1024, true);
  for (int r = 0; r < 7; ++r) {
    const GptMemory m = GptMemoryEstimate(cfg, 16, 1024, true, Recompute::kNone, 7, ZeroStage::kOptimizer, r);
    EXPECT_EQ(m.adam_state, r < 3 ? size_t{142216928} : size_t{142216920}) << "rank " << r;
    EXPECT_EQ(m.params, one.params);
    EXPECT_EQ(m.params_bf16, one.params_bf16);
    EXPECT_EQ(m.grads, one.grads);
    EXPECT_EQ(m.activations, one.activations);
    EXPECT_EQ(m.scratch, one.scratch);
  }
  EXPECT_EQ(GptMemoryEstimate(cfg, 16, 1024, false, Recompute::kNone, 8, ZeroStage::kOptimizer, 5).adam_state,
            size_t{124439808});
  // World 1, or no ZeRO: the one-GPU estimate.
  EXPECT_EQ(GptMemoryEstimate(cfg, 16, 1024, true, Recompute::kNone, 1, ZeroStage::kOptimizer).total(),
            one.total());
  EXPECT_EQ(GptMemoryEstimate(cfg, 16, 1024, true, Recompute::kNone, 8, ZeroStage::kNone).total(),
            one.total());
}

TEST(MemoryAgreement, PlannerZero1IsRankZerosShardForEveryWorld) {
  const Shape shapes[] = {
      {"gpt2-124m B=4 T=64", {12, 12, 768, 50257, 1024}, 4, 64},
      {"odd L3 H2 C20 V31 B=3 T=7", {3, 2, 20, 31, 9}, 3, 7},
  };
  for (const Shape& s : shapes) {
    const size_t P = GptParamCount(s.cfg);
    WorkloadSpec spec;
    spec.cfg = s.cfg;
    spec.seq = s.T;
    spec.tokens = 1e9;
    spec.micro_batch = s.B;
    Result<Workload> w = Workload::Make(spec, PlanDefaults());
    ASSERT_TRUE(w.ok()) << w.status().message();
    for (const Precision p : {Precision::kFp32, Precision::kBf16}) {
      for (const ActRecompute ar : {ActRecompute::kNone, ActRecompute::kGelu}) {
        const Recompute r = ar == ActRecompute::kGelu ? Recompute::kGelu : Recompute::kNone;
        const bool bf16 = p == Precision::kBf16;
        for (int world : {1, 2, 3, 7, 8, 64}) {
          SCOPED_TRACE(fmt::format("{}, {}, recompute {}, world {}", s.what, PrecisionName(p),
                                   RecomputeName(r), world));
          const MemoryBreakdown planned = w->Memory(p, s.B, true, ar, world);
          const GptMemory est = GptMemoryEstimate(s.cfg, s.B, s.T, bf16, r, world, ZeroStage::kOptimizer, 0);
          const GptMemory whole = GptMemoryEstimate(s.cfg, s.B, s.T, bf16, r);
          // The hand formula: 8 bytes x rank 0's shard, the first P % W ranks holding one more.
          const size_t shard0 = P / world + (P % world != 0 ? 1 : 0);
          EXPECT_EQ(est.adam_state, 8 * shard0);
          EXPECT_EQ(est.adam_state, 8 * dist::ShardOf(P, world, 0).count);
          ExpectSameBytes("optimizer", planned.optimizer, static_cast<double>(est.adam_state));
          ExpectSameBytes("weights", planned.weights, static_cast<double>(whole.params + whole.params_bf16));
          ExpectSameBytes("grads", planned.grads, static_cast<double>(whole.grads));
          ExpectSameBytes("activations + scratch", planned.activations,
                          static_cast<double>(whole.activations + whole.scratch));
          ExpectSameBytes("total", planned.total(), static_cast<double>(est.total()));
          // Every rank's moments are its ShardOf; together they are all 8P bytes.
          size_t sum = 0;
          for (int rank = 0; rank < world; ++rank) {
            const size_t a =
                GptMemoryEstimate(s.cfg, s.B, s.T, bf16, r, world, ZeroStage::kOptimizer, rank).adam_state;
            EXPECT_EQ(a, 8 * dist::ShardOf(P, world, rank).count) << "rank " << rank;
            sum += a;
          }
          EXPECT_EQ(sum, 8 * P);
        }
      }
    }
  }
}

TEST(MemoryAgreement, AShardedModelAllocatesTheEstimateOnEveryRank) {
  auto backend = MakeCpuReferenceBackend();
  const Shape shapes[] = {{"odd L3 H2 C20 V31 B=3 T=7", {3, 2, 20, 31, 9}, 3, 7},
                          {"demo L4 H4 C256 V4096 B=2 T=16", {4, 4, 256, 4096, 128}, 2, 16}};
  for (const Shape& s : shapes) {
    for (const Compute c : {Compute::kF32, Compute::kBF16}) {
      for (int world : {2, 3, 7}) {
        for (int rank = 0; rank < world; ++rank) {
          SCOPED_TRACE(
              fmt::format("{}, bf16 {}, world {}, rank {}", s.what, c == Compute::kBF16, world, rank));
          Gpt model(backend.get(), s.cfg, s.B, s.T, c);
          const dist::Shard sh = dist::ShardOf(model.num_params(), world, rank);
          model.SetOptimizerShard({sh.offset, sh.count});
          const GptMemory est = GptMemoryEstimate(s.cfg, s.B, s.T, c == Compute::kBF16, Recompute::kNone,
                                                  world, ZeroStage::kOptimizer, rank);
          EXPECT_EQ(model.memory().adam_state, est.adam_state);
          EXPECT_EQ(model.memory().total(), est.total());
        }
      }
    }
  }
}

// LoRA (train.lora): the planner's per-GPU memory is the model's allocation with adapters, on one GPU and per
// rank under ZeRO-1 (the adapters' moments sharded); gradients and moments are the adapters' only, and the
// all-reduced bytes are their gradients'.
TEST(MemoryAgreement, LoraPlanIsTheModelsAllocation) {
  auto backend = MakeCpuReferenceBackend();
  const Shape shapes[] = {{"odd L3 H2 C20 V31 B=3 T=7", {3, 2, 20, 31, 9}, 3, 7},
                          {"gpt2-124m B=4 T=64", {12, 12, 768, 50257, 1024}, 4, 64}};
  for (const Shape& s : shapes)
    for (uint8_t targets : {uint8_t{kLoraAllTargets}, uint8_t{kLoraQkv | kLoraFc}})
      for (const Compute c : {Compute::kF32, Compute::kBF16})
        for (ActRecompute ar : {ActRecompute::kNone, ActRecompute::kBlocks}) {
          const LoraSpec lora{4, 8.0f, targets};
          const Precision p = c == Compute::kBF16 ? Precision::kBf16 : Precision::kFp32;
          const Recompute r = ModelRecompute(ar);
          SCOPED_TRACE(fmt::format("{}, {}, {}, recompute {}", s.what, lora.ToString(), PrecisionName(p),
                                   RecomputeName(r)));
          WorkloadSpec spec;
          spec.cfg = s.cfg;
          spec.seq = s.T;
          spec.tokens = 1e9;
          spec.micro_batch = s.B;
          spec.lora = lora;
          Result<Workload> w = Workload::Make(spec, PlanDefaults());
          ASSERT_TRUE(w.ok()) << w.status().message();
          EXPECT_EQ(w->trainable_params(), static_cast<double>(LoraParamCount(s.cfg, lora)));
          EXPECT_EQ(w->grad_bytes(), 4 * w->trainable_params());
          const GptMemory a =
              Gpt::Allocation(s.cfg, s.B, s.T, c, r, AttentionKind::kNaive, kDefaultLogitsChunk, lora);
          const MemoryBreakdown planned = w->Memory(p, s.B, false, ar, 1);
          ExpectSameBytes("weights", planned.weights, static_cast<double>(a.params + a.params_bf16));
          ExpectSameBytes("grads", planned.grads, static_cast<double>(a.grads));
          ExpectSameBytes("optimizer", planned.optimizer, static_cast<double>(a.adam_state));
          ExpectSameBytes("activations + scratch", planned.activations,
                          static_cast<double>(a.activations + a.scratch));
          // At B = 1 too: LoRA's scratch is one layer's, not per sequence.
          const GptMemory a1 =
              Gpt::Allocation(s.cfg, 1, s.T, c, r, AttentionKind::kNaive, kDefaultLogitsChunk, lora);
          ExpectSameBytes("activations + scratch at B=1", w->Memory(p, 1, false, ar, 1).activations,
                          static_cast<double>(a1.activations + a1.scratch));
          if (s.cfg.n_layer > 3) continue;  // a model per world below: the small shape only
          for (int world : {2, 3, 7}) {
            const dist::Shard sh = dist::ShardOf(LoraParamCount(s.cfg, lora), world, 0);
            Gpt m(backend.get(), s.cfg, s.B, s.T, c, r, kDefaultLogitsChunk, lora);
            m.SetOptimizerShard({m.trainable().offset + sh.offset, sh.count});
            const MemoryBreakdown z = w->Memory(p, s.B, true, ar, world);
            ExpectSameBytes("ZeRO-1 optimizer", z.optimizer, static_cast<double>(m.memory().adam_state));
            ExpectSameBytes("ZeRO-1 total", z.total(), static_cast<double>(m.memory().total()));
            EXPECT_EQ(
                m.memory().total(),
                WithLora(GptMemoryEstimate(s.cfg, s.B, s.T, c == Compute::kBF16, r), s.cfg, lora,
                         c == Compute::kBF16, static_cast<size_t>(s.B) * s.T, world, ZeroStage::kOptimizer, 0)
                    .total());
          }
        }
}

}  // namespace
}  // namespace tern::plan
