// Each formula of the planner against a case computed by hand (the arithmetic is in the comments).
#include <gtest/gtest.h>

#include <cmath>

#include "plan/catalog.h"
#include "plan/cost.h"
#include "plan/model_spec.h"
#include "plan/throughput.h"
#include "plan/units.h"
#include "plan/workload.h"

namespace tern::plan {
namespace {

constexpr double kP124 = 124439808;  // wte 38,597,376 + wpe 786,432 + 12 x 7,087,872 + lnf 1,536

Workload Gpt2Small(double tokens = 10e9) {
  WorkloadSpec spec;
  spec.cfg = GptPreset("gpt2-124m").value();
  spec.tokens = tokens;
  return Workload::Make(spec, PlanDefaults()).value();
}

TEST(Units, ParsesCountsDurationsAndMoney) {
  EXPECT_DOUBLE_EQ(ParseCount("10B", "--tokens").value(), 1e10);
  EXPECT_DOUBLE_EQ(ParseCount("500M", "--tokens").value(), 5e8);
  EXPECT_DOUBLE_EQ(ParseCount("124k", "--tokens").value(), 124e3);
  EXPECT_DOUBLE_EQ(ParseCount("1.3e9", "--params").value(), 1.3e9);
  EXPECT_NE(ParseCount("10X", "--tokens").status().message().find("unknown suffix"), std::string::npos);
  EXPECT_FALSE(ParseCount("-5M", "--tokens").ok());
  EXPECT_DOUBLE_EQ(ParseDurationHours("48h", "--deadline").value(), 48);
  EXPECT_DOUBLE_EQ(ParseDurationHours("90m", "--deadline").value(), 1.5);
  EXPECT_DOUBLE_EQ(ParseDurationHours("2d", "--deadline").value(), 48);
  EXPECT_NE(ParseDurationHours("48", "--deadline").status().message().find("needs a unit"),
            std::string::npos);
  EXPECT_DOUBLE_EQ(ParseMoney("$500", "--budget").value(), 500);
  EXPECT_EQ(FormatUsd(1234.4), "$1,234");
  EXPECT_EQ(FormatHours(0.75), "45 min");
}

TEST(ModelSpec, PresetsAndParamBudget) {
  GptConfig small = GptPreset("gpt2-124m").value();
  EXPECT_EQ(small.ToString(), "L12 H12 C768 V50257 T1024");
  EXPECT_EQ(static_cast<double>(GptParamCount(small)), kP124);
  EXPECT_EQ(GptPreset("gpt2-1.5b").value().n_embd, 1600);
  EXPECT_FALSE(GptPreset("gpt3").ok());
  // --params 124M reproduces GPT-2 small; --params 1.3B lands within 5% with 64-wide heads.
  EXPECT_EQ(GptConfigForParams(124e6).value().ToString(), small.ToString());
  GptConfig big = GptConfigForParams(1.3e9).value();
  EXPECT_NEAR(static_cast<double>(GptParamCount(big)), 1.3e9, 0.05 * 1.3e9);
  EXPECT_EQ(big.n_embd % 64, 0);
  EXPECT_EQ(big.n_embd / big.n_head, 64);
}

TEST(Workload, FlopsPerTokenIsTheTrainersFormula) {
  // 6 x (12 x 12 x 768^2 + 768 x 50257) + 12 x 12 x 1024 x 768 = 741,192,192 + 113,246,208
  Workload w = Gpt2Small();
  EXPECT_DOUBLE_EQ(w.flops_per_token(), 854438400.0);
  EXPECT_DOUBLE_EQ(w.total_flops(), 854438400.0 * 10e9);
  EXPECT_DOUBLE_EQ(w.params(), kP124);
}

TEST(Workload, MemoryOfGpt2SmallWithAdamWFp32) {
  Workload w = Gpt2Small();
  MemoryBreakdown m = w.Memory(Precision::kFp32, 1, false, ActRecompute::kNone, 1);
  // fp32 weights 4P + grads 4P + AdamW m,v 8P = 16P = 1,991,036,928 bytes (1.85 GiB)
  EXPECT_DOUBLE_EQ(m.weights, 4 * kP124);
  EXPECT_DOUBLE_EQ(m.grads, 4 * kP124);
  EXPECT_DOUBLE_EQ(m.optimizer, 8 * kP124);
  EXPECT_DOUBLE_EQ(m.weights + m.grads + m.optimizer, 1991036928.0);
  // Activations at B=1, T=1024 (N=1024): per layer N(18C+4) + N*NH*T = 26,742,784 floats;
  // 4 x (N*C + 12 x per_layer + N(C+2) + N*V + N) + 2 x 4N (token ids) + 8 (the loss sum, a double)
  // = 1,495,818,248 B; scratch 4 x (10NC + N*NH*T) = 81,788,928 B (dresidual, dln, datty, dqkv 3C, dfch 4C,
  // datt). At B=1 the fused classifier's 1024-row chunk is the whole micro-batch, so the logits are N*V as
  // without it.
  EXPECT_DOUBLE_EQ(m.activations, 1495818248.0 + 81788928.0);
  EXPECT_DOUBLE_EQ(m.total(), 3568644104.0);
  // Activations scale linearly with the micro-batch: the planner relies on it.
  const GptMemory direct = GptMemoryEstimate(GptPreset("gpt2-124m").value(), 8, 1024, false);
  EXPECT_DOUBLE_EQ(w.Memory(Precision::kFp32, 8, false, ActRecompute::kNone, 1).activations,
                   static_cast<double>(direct.activations + direct.scratch));
}

TEST(Workload, MemoryOfGpt2SmallWithAdamWBf16AndZero1) {
  Workload w = Gpt2Small();
  MemoryBreakdown m = w.Memory(Precision::kBf16, 1, false, ActRecompute::kNone, 1);
  // bf16 adds a 2P working copy: 18P = 2,239,916,544 bytes of weights, grads and moments.
  EXPECT_DOUBLE_EQ(m.weights + m.grads + m.optimizer, 2239916544.0);
  // tern train's ZeRO-1 over 8 ranks shards only the moments; the fp32 master, the bf16 copy and the
  // gradients stay whole: 2P + 4P + 4P + 8P/8 = 11P.
  MemoryBreakdown z = w.Memory(Precision::kBf16, 1, true, ActRecompute::kNone, 8);
  EXPECT_DOUBLE_EQ(z.weights + z.grads + z.optimizer, 11 * kP124);
  EXPECT_DOUBLE_EQ(z.weights, 6 * kP124);
  // ZeRO-2 (not in tern) would shard the gradients too (2P + 4P + 4P/8 + 8P/8 = 7.5P), ZeRO-3 everything
  // (18P/8).
  EXPECT_DOUBLE_EQ(
      w.Memory(Precision::kBf16, 1, ZeroStage::kGradients, ActRecompute::kNone, 8).total() - z.activations,
      7.5 * kP124);
  EXPECT_DOUBLE_EQ(
      w.Memory(Precision::kBf16, 1, ZeroStage::kWeights, ActRecompute::kNone, 8).total() - z.activations,
      18 * kP124 / 8);
  // In fp32 the weights are the working copy: only the moments shard (4P + 4P + 8P/8 = 9P).
  MemoryBreakdown zf = w.Memory(Precision::kFp32, 1, true, ActRecompute::kNone, 8);
  EXPECT_DOUBLE_EQ(zf.weights + zf.grads + zf.optimizer, 9 * kP124);
  // Block recomputation (train.recompute=blocks) keeps each block's input instead of the whole block: 11 of
  // the 12 working sets go, but their residual3 (each block's output, the next one's input, 4 x N x C).
  MemoryBreakdown rc = w.Memory(Precision::kBf16, 1, false, ActRecompute::kBlocks, 1);
  // (per layer: 26742784 floats in fp32, less the halves of what bf16 compute keeps in bf16: the GELU
  // output's 1024 x 3072, ln1's and ln2's 1024 x 768, qkv's 1024 x 2304 and the attention output's 1024 x
  // 768)
  const double per_layer = 4.0 * 26742784 - 2.0 * 1024 * 3072 - 2 * 2.0 * 1024 * 768 - 2.0 * 1024 * 2304 -
                           2.0 * 1024 * 768,
               input = 4.0 * 1024 * 768;
  EXPECT_DOUBLE_EQ(m.activations - rc.activations, 11 * (per_layer - input));
  // GELU recomputation (train.recompute=gelu) keeps one GELU output (2 x N x 4C in bf16) instead of 12:
  // 69,206,016 B.
  MemoryBreakdown g = w.Memory(Precision::kBf16, 1, false, ActRecompute::kGelu, 1);
  EXPECT_DOUBLE_EQ(m.activations - g.activations, 11 * 2.0 * 1024 * 4 * 768);
  EXPECT_DOUBLE_EQ(m.activations - g.activations, 69206016.0);
}

TEST(Workload, FitPicksLargestMicroBatchAndAccumulation) {
  Workload w = Gpt2Small();
  // 80 GiB: usable 80 x 0.95 - 1 = 75 GiB. bf16 (q, k, v, the attention, layer norm and GELU outputs and the
  // logits in bf16): 2.09 GiB of states + 1.10 GiB per sequence -> B=64 (72.6 GiB); B=128 would need 143
  // GiB. Accumulation = 524288 / (64 x 1024) = 8.
  MemoryFit f = w.Fit(Precision::kBf16, 80, 1, PlanDefaults());
  ASSERT_TRUE(f.fits);
  EXPECT_EQ(f.micro_batch, 64);
  EXPECT_EQ(f.grad_accum, 8);
  EXPECT_FALSE(f.zero1);
  EXPECT_EQ(f.recompute, ActRecompute::kNone);
  // GPT-2 1.5B in bf16 needs 18 x 1.56B = 28.0 GB of states + 11.1 GB at B=1 (36.5 GiB): a 32 GiB GPU
  // (29.4 usable) fits it alone only with block recompute (26.8 GiB), which tern train lacks; ZeRO-1 over 8
  // GPUs brings the states to 11P = 17.1 GB (26.3 GiB in all) without recompute.
  WorkloadSpec spec;
  spec.cfg = GptPreset("gpt2-1.5b").value();
  spec.tokens = 1e9;
  Workload xl = Workload::Make(spec, PlanDefaults()).value();
  const MemoryFit alone = xl.Fit(Precision::kBf16, 32, 1, PlanDefaults());
  ASSERT_TRUE(alone.fits);
  EXPECT_EQ(alone.recompute, ActRecompute::kBlocks);
  MemoryFit z = xl.Fit(Precision::kBf16, 32, 8, PlanDefaults());
  ASSERT_TRUE(z.fits);
  EXPECT_TRUE(z.zero1);
  EXPECT_EQ(z.recompute, ActRecompute::kNone);
  // 16 GiB (14.2 usable): ZeRO-1's 17.1 GB of states alone do not fit; ZeRO-2 (7.5P = 10.9 GiB) with block
  // recompute would: the exclusion says so.
  const MemoryFit small = xl.Fit(Precision::kBf16, 16, 8, PlanDefaults());
  EXPECT_FALSE(small.fits);
  EXPECT_EQ(small.would_fit_with, ZeroStage::kGradients);
  EXPECT_EQ(xl.Fit(Precision::kBf16, 16, 1, PlanDefaults()).would_fit_with, ZeroStage::kNone);  // one GPU
}

TEST(Workload, FitTriesGeluRecomputeBeforeBlockRecompute) {
  // GPT-2 124M bf16 at B=1: 2.09 GiB of states + 1.48 GiB per sequence; GELU recompute saves 0.13 GiB of it,
  // block recompute 1.2 GiB. A GPU with 3.55 GiB usable fits B=1 only with GELU recompute.
  Workload w = Gpt2Small();
  PlanDefaults d;
  d.mem_usable_fraction = 1;
  d.mem_reserve_gib = 0;
  auto gib = [](double b) { return b / (1024.0 * 1024 * 1024); };
  const double none = w.Memory(Precision::kBf16, 1, false, ActRecompute::kNone, 1).total();
  const double gelu = w.Memory(Precision::kBf16, 1, false, ActRecompute::kGelu, 1).total();
  const double blocks = w.Memory(Precision::kBf16, 1, false, ActRecompute::kBlocks, 1).total();
  ASSERT_LT(blocks, gelu);
  ASSERT_LT(gelu, none);
  MemoryFit f = w.Fit(Precision::kBf16, gib(gelu) + 0.001, 1, d);
  ASSERT_TRUE(f.fits);
  EXPECT_EQ(f.recompute, ActRecompute::kGelu);
  EXPECT_EQ(f.micro_batch, 1);
  EXPECT_EQ(w.Fit(Precision::kBf16, gib(gelu) - 0.001, 1, d).recompute, ActRecompute::kBlocks);
  EXPECT_EQ(w.Fit(Precision::kBf16, gib(none) + 0.001, 1, d).recompute, ActRecompute::kNone);
  EXPECT_EQ(RecomputeTimeFactor(ActRecompute::kGelu, d), d.gelu_recompute_time_factor);
  EXPECT_EQ(RecomputeTimeFactor(ActRecompute::kNone, d), 1.0);
}

TEST(Throughput, RingAllReduceFor8GpusOnNvlink) {
  // H100 NVLink 4: 900 GB/s bidirectional = 450 GB/s each way. Gradients 4 x P = 497,759,232 B.
  // 2 x 7/8 x 497.76 MB / 450 GB/s = 1.9357 ms.
  EXPECT_NEAR(RingAllReduceSeconds(4 * kP124, 8, 450), 1.9357e-3, 1e-6);
  EXPECT_EQ(RingAllReduceSeconds(4 * kP124, 1, 450), 0.0);
  GpuSpec h100;
  h100.name = "H100";
  h100.interconnect = "NVLink 4";
  h100.interconnect_gbps = 900;
  InstanceOffer p5;
  p5.gpu_count = 8;
  p5.network_gbps = 3200;
  PlanDefaults d;
  LinkModel one = AllReduceLink(p5, h100, 1, d);
  EXPECT_DOUBLE_EQ(one.gb_per_s, 450 * d.allreduce_link_efficiency);
  EXPECT_FALSE(one.inter_node);
  // Two instances: 3200 Gb/s = 400 GB/s < 450 GB/s NVLink, so the network sets the pace.
  LinkModel two = AllReduceLink(p5, h100, 2, d);
  EXPECT_DOUBLE_EQ(two.gb_per_s, 400 * d.allreduce_link_efficiency);
  EXPECT_TRUE(two.inter_node);
}

// tern train's ZeRO-1 all-reduces the gradients, updates its shard and all-gathers the fp32 weights: the
// all-gather, (n-1)/n x 4P / link, is added to the step whole (nothing is left to hide it behind).
TEST(Throughput, Zero1AddsTheWeightAllGather) {
  Workload w = Gpt2Small(1e9);
  PlanDefaults d;
  MemoryFit f = w.Fit(Precision::kBf16, 80, 8, d);
  LinkModel link;
  link.gb_per_s = 360;
  StepModel plain = ModelStep(w, f, 1000, 0.5, 8, link, d);
  EXPECT_EQ(plain.allgather_s, 0.0);
  f.zero1 = true;
  StepModel z = ModelStep(w, f, 1000, 0.5, 8, link, d);
  // 7/8 x 497,759,232 B / 360 GB/s = 1.2099 ms.
  EXPECT_NEAR(z.allgather_s, 7.0 / 8 * 4 * kP124 / 360e9, 1e-12);
  EXPECT_NEAR(z.step_s, plain.step_s + z.allgather_s, 1e-12);
}

TEST(Throughput, StepTimeOnOneGpu) {
  Workload w = Gpt2Small(1e9);
  PlanDefaults d;
  MemoryFit f = w.Fit(Precision::kBf16, 80, 1, d);
  StepModel s = ModelStep(w, f, 1000, 0.5, 1, LinkModel{}, d);
  // 524,288 tokens x 854,438,400 FLOP / 500 TFLOP/s = 0.89596 s; no all-reduce on one GPU.
  EXPECT_NEAR(s.step_s, 524288.0 * 854438400.0 / 500e12, 1e-9);
  EXPECT_NEAR(s.tokens_per_s, 500e12 / 854438400.0, 1e-6);
  EXPECT_NEAR(s.wall_s, 1e9 * 854438400.0 / 500e12, 1e-6);
}

TEST(Cost, YoungDalyFor60sCheckpointAnd6hMtbf) {
  // sqrt(2 x 60 s x 21600 s) = 1609.97 s = 26.8 min
  const double tau = YoungDalyIntervalSeconds(60, 6 * 3600);
  EXPECT_NEAR(tau, 1609.97, 0.01);
  EXPECT_NEAR(tau / 60, 27, 0.5);
}

TEST(Cost, SpotExpectedTime) {
  PlanDefaults d;  // 1 GB/s checkpoints, 10 min restart
  // 60 GB checkpoint -> delta 60 s; MTBF 6 h -> tau 1610 s; each preemption loses 600 + (1610+60)/2 = 1435 s.
  // E[T] = 36000 x (1 + 60/1610) / (1 - 1435/21600) = 39,999 s; N = E[T]/21600 = 1.85.
  SpotModel s = ModelSpot(36000, 60e9, 1, 1.0 / 6, d);
  ASSERT_TRUE(s.feasible);
  EXPECT_NEAR(s.interval_s, 1609.97, 0.01);
  EXPECT_NEAR(s.lost_per_preemption_s, 600 + (1609.97 + 60) / 2, 0.01);
  const double expected = 36000 * (1 + 60 / 1609.97) / (1 - s.lost_per_preemption_s / 21600);
  EXPECT_NEAR(s.expected_wall_s, expected, 0.5);
  EXPECT_NEAR(s.expected_preemptions, expected / 21600, 1e-3);
  // Two instances double the job's hazard.
  EXPECT_NEAR(ModelSpot(36000, 60e9, 2, 1.0 / 6, d).job_mtbf_h, 3, 1e-12);
  // Preempted every 10 minutes with a 10-minute restart: no progress.
  EXPECT_FALSE(ModelSpot(36000, 60e9, 1, 6, d).feasible);
}

TEST(Cost, ReservedBreakEvenAndStorageEgress) {
  PlanDefaults d;
  ReservedModel r = ModelReserved(10, 1, 100, 0.35, 0.8, d);
  EXPECT_DOUBLE_EQ(r.break_even_utilization, 0.65);
  EXPECT_DOUBLE_EQ(r.effective_hourly, 10 * 0.65 / 0.8);
  EXPECT_DOUBLE_EQ(r.commitment_usd, 10 * 0.65 * 8760);
  ReservedModel job = ModelReserved(10, 2, 87.6, 0.35, 0, d);
  EXPECT_TRUE(job.job_only);
  EXPECT_DOUBLE_EQ(job.utilization, 0.01);
  // aws: 1.5 GB checkpoints x 3 x (730 h = 1 month) x $0.023 = $0.1035; 20 GB in x $0.09 = $1.80;
  // 0.5 GB model out x $0.09 = $0.045.
  StorageEgress s = ModelStorageEgress("aws", 730, 1.5e9, 20, 0.09, 0.5e9, d);
  EXPECT_NEAR(s.storage_usd, 0.1035, 1e-9);
  EXPECT_NEAR(s.dataset_usd, 1.8, 1e-9);
  EXPECT_NEAR(s.model_usd, 0.045, 1e-9);
}

}  // namespace
}  // namespace tern::plan
