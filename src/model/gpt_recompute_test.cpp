// Recompute::kGelu (train.recompute=gelu): the model keeps one GELU output buffer instead of one per layer
// and recomputes the outputs in the backward; Recompute::kBlocks (train.recompute=blocks) keeps each layer's
// input and one layer's working set, and re-runs each layer's forward in the backward. Losses, gradients and
// updated weights must be bit for bit those of Recompute::kNone on both CPU backends in every precision, and
// the allocation must shrink by exactly (L-1) x B*T x 4C floats, as GptMemoryEstimate (the planner's memory
// model) says.
//
// The same for the flash attention kernel (train.attention=flash) on the fast CPU backend: it keeps two
// floats per score row instead of the probabilities and recomputes them, so the training is bit for bit
// naive's while the allocation shrinks by what AttentionStateBytes says.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "model/gpt.h"

namespace tern {
namespace {

std::unique_ptr<Backend> MakeCpu(const std::string& name, Compute compute) {
  std::unique_ptr<Backend> b = name == "cpu" ? MakeCpuFastBackend() : MakeCpuReferenceBackend();
  return compute == Compute::kF16 ? WithF16Emulation(std::move(b)) : std::move(b);
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// What one training run produced, step by step.
struct Trace {
  std::vector<float> losses;
  std::vector<double> norms;
  std::vector<std::vector<float>> grads;  // after each step's backward passes
  std::vector<float> params;              // after the last update
};

// Three AdamW steps of two micro-batches each; the second micro-batch is smaller than the allocation (B-1,
// T-2), so the activations are carved for a shape other than the one they were sized for.
Trace Train(Backend* backend, const GptConfig& cfg, int B, int T, Compute compute, Recompute recompute,
            int logits_chunk = kDefaultLogitsChunk) {
  Gpt model(backend, cfg, B, T, compute, recompute, logits_chunk);
  model.InitWeights(11);
  std::vector<int32_t> x(B * T), y(B * T);
  Trace t;
  for (int step = 1; step <= 3; step++) {
    for (int i = 0; i < B * T; i++) {
      x[i] = (i * 7 + 3 * step) % cfg.vocab_size;
      y[i] = i % 11 == 5 ? -1 : (i * 5 + step) % cfg.vocab_size;  // a few ignored targets
    }
    model.ZeroGrad();
    t.losses.push_back(model.Forward(x.data(), y.data(), B, T, 0.5f / (B * T)));
    model.Backward();
    t.losses.push_back(model.Forward(x.data(), y.data(), B - 1, T - 2, 0.5f / ((B - 1) * (T - 2))));
    model.Backward();
    t.grads.push_back(model.GetGradients());
    const double norm = model.GradNorm();
    t.norms.push_back(norm);
    model.AdamWStep(1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, norm > 1.0 ? static_cast<float>(1.0 / norm) : 1.0f,
                    step);
  }
  t.params = model.GetParameters();
  return t;
}

struct Case {
  std::string backend;
  Compute compute;
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.backend << " compute " << static_cast<int>(c.compute);
}

class GptRecompute : public ::testing::TestWithParam<Case> {};

TEST_P(GptRecompute, GeluAndBlockRecomputeGiveTheSameLossesGradientsAndWeightsBitForBit) {
  const Case& c = GetParam();
  auto backend = MakeCpu(c.backend, c.compute);
  const GptConfig cfg{3, 2, 16, 37, 8};
  const Trace none = Train(backend.get(), cfg, 3, 8, c.compute, Recompute::kNone);
  for (Recompute r : {Recompute::kGelu, Recompute::kBlocks}) {
    SCOPED_TRACE(RecomputeName(r));
    const Trace re = Train(backend.get(), cfg, 3, 8, c.compute, r);
    ASSERT_TRUE(SameBits(none.losses, re.losses));
    for (size_t i = 0; i < none.losses.size(); i++) EXPECT_TRUE(std::isfinite(none.losses[i])) << i;
    for (size_t s = 0; s < none.grads.size(); s++) {
      EXPECT_TRUE(SameBits(none.grads[s], re.grads[s])) << "gradients of step " << s + 1;
      EXPECT_EQ(none.norms[s], re.norms[s]) << "step " << s + 1;
    }
    EXPECT_TRUE(SameBits(none.params, re.params));
  }
  // The fcproj weights' gradient is the one that reads the recomputed outputs: it must not be zero.
  EXPECT_GT(none.norms.front(), 0);
}

// ForwardAccumulate (what the trainer runs): the step's loss summed on the device and read once is the sum,
// in double on the host, of Forward's per-micro-batch losses, bit for bit; the gradients are the same too;
// and ClearLossSum / TakeLossSum start the next sum from zero.
TEST_P(GptRecompute, DeviceLossSumIsTheHostSumOfForwardsLosses) {
  const Case& c = GetParam();
  auto backend = MakeCpu(c.backend, c.compute);
  const GptConfig cfg{3, 2, 16, 37, 8};
  const int B = 3, T = 8;
  Gpt host(backend.get(), cfg, B, T, c.compute, Recompute::kNone),
      device(backend.get(), cfg, B, T, c.compute, Recompute::kNone);
  host.InitWeights(11);
  device.InitWeights(11);
  std::vector<int32_t> x(B * T), y(B * T);
  for (int i = 0; i < B * T; i++) {
    x[i] = (i * 7 + 3) % cfg.vocab_size;
    y[i] = i % 11 == 5 ? -1 : (i * 5 + 1) % cfg.vocab_size;
  }
  device.ForwardAccumulate(x.data(), y.data(), B, T, 0.0f);  // a stale sum, cleared below
  device.ClearLossSum();
  double want = 0;
  for (int micro = 0; micro < 3; micro++) {
    const int b = B - micro % 2, t = T - 2 * (micro % 2);
    want += host.Forward(x.data(), y.data(), b, t, 0.25f / (b * t));
    host.Backward();
    device.ForwardAccumulate(x.data(), y.data(), b, t, 0.25f / (b * t));
    device.Backward();
  }
  EXPECT_EQ(device.TakeLossSum(), want);
  EXPECT_GT(want, 0);
  EXPECT_TRUE(SameBits(device.GetGradients(), host.GetGradients()));
  EXPECT_EQ(device.TakeLossSum(), 0.0) << "TakeLossSum clears the sum";
}

// ZeroGrad leaves the weight matrices' gradients for the next head backward and Backward to overwrite (beta
// 0, as PyTorch's set_to_none): over stale gradients, ZeroGrad then two micro-batches (the head in chunks of
// 5 rows, so wte's gradient is overwritten by the first chunk only and added to after) give the values of
// two micro-batches accumulated into true zeros (SetGradients of zeros: every product adds, beta 1).
TEST_P(GptRecompute, ZeroGradLetsTheFirstProductsOverwriteStaleGradients) {
  const Case& c = GetParam();
  auto backend = MakeCpu(c.backend, c.compute);
  const GptConfig cfg{3, 2, 16, 37, 8};
  const int B = 3, T = 8;
  Gpt lazy(backend.get(), cfg, B, T, c.compute, Recompute::kNone, 5),
      zeros(backend.get(), cfg, B, T, c.compute, Recompute::kNone, 5);
  lazy.InitWeights(11);
  zeros.InitWeights(11);
  std::vector<float> stale(lazy.num_params());
  for (size_t i = 0; i < stale.size(); i++) stale[i] = 0.5f + static_cast<float>(i % 13);
  lazy.SetGradients(stale);
  lazy.ZeroGrad();
  zeros.SetGradients(std::vector<float>(zeros.num_params(), 0.0f));
  std::vector<int32_t> x(B * T), y(B * T);
  for (int i = 0; i < B * T; i++) {
    x[i] = (i * 7 + 3) % cfg.vocab_size;
    y[i] = (i * 5 + 1) % cfg.vocab_size;
  }
  for (Gpt* m : {&lazy, &zeros}) {
    m->Forward(x.data(), y.data(), B, T, 0.5f / (B * T));
    m->Backward();
    m->Forward(x.data(), y.data(), B - 1, T - 2, 0.5f / ((B - 1) * (T - 2)));
    m->Backward();
  }
  const std::vector<float> got = lazy.GetGradients(), want = zeros.GetGradients();
  ASSERT_EQ(got.size(), want.size());
  size_t nonzero = 0;
  for (size_t i = 0; i < got.size(); i++) {
    ASSERT_EQ(got[i], want[i]) << "gradient element " << i;  // == : +0 and -0 alike
    nonzero += want[i] != 0.0f;
  }
  EXPECT_GT(nonzero, got.size() / 2);
}

// The fast backend only: cpu-ref keeps the plain kernel (capabilities_test checks it refuses flash).
class GptFlashAttention : public ::testing::TestWithParam<Case> {};

TEST_P(GptFlashAttention, GivesTheSameLossesGradientsAndWeightsBitForBit) {
  const Case& c = GetParam();
  auto naive_backend = MakeCpu(c.backend, c.compute), flash_backend = MakeCpu(c.backend, c.compute);
  ASSERT_TRUE(flash_backend->SetAttentionKernel("flash"));
  const GptConfig cfg{3, 2, 16, 37, 8};
  const Trace naive = Train(naive_backend.get(), cfg, 3, 8, c.compute, Recompute::kNone);
  // With block recompute too: the flash forward re-run in the backward rewrites its statistics.
  for (Recompute r : {Recompute::kNone, Recompute::kBlocks}) {
    SCOPED_TRACE(RecomputeName(r));
    const Trace flash = Train(flash_backend.get(), cfg, 3, 8, c.compute, r);
    ASSERT_TRUE(SameBits(naive.losses, flash.losses));
    for (size_t s = 0; s < naive.grads.size(); s++) {
      EXPECT_TRUE(SameBits(naive.grads[s], flash.grads[s])) << "gradients of step " << s + 1;
      EXPECT_EQ(naive.norms[s], flash.norms[s]) << "step " << s + 1;
    }
    EXPECT_TRUE(SameBits(naive.params, flash.params));
  }
  EXPECT_GT(naive.norms.front(), 0);
}

// The fused classifier (train.logits_chunk): the head in chunks of rows that do not divide the micro-batch
// (24 and 12 rows in chunks of 5) against one chunk of every row. The logits of a row and its loss do not
// depend on the chunk; the tied embedding's gradient sums its rows in another order, so the gradients and
// weights agree to float rounding. A chunk of at least B*T rows is the unchunked head bit for bit.
class GptFusedClassifier : public ::testing::TestWithParam<Case> {};

TEST_P(GptFusedClassifier, ChunkedHeadTrainsAsTheWholeHead) {
  const Case& c = GetParam();
  auto backend = MakeCpu(c.backend, c.compute);
  const GptConfig cfg{3, 2, 16, 37, 8};
  const Trace whole = Train(backend.get(), cfg, 3, 8, c.compute, Recompute::kNone, 0);
  const Trace chunked = Train(backend.get(), cfg, 3, 8, c.compute, Recompute::kNone, 5);
  const Trace one_chunk = Train(backend.get(), cfg, 3, 8, c.compute, Recompute::kNone, 24);
  ASSERT_EQ(whole.losses.size(), chunked.losses.size());
  // Step 1's losses come before any update: the chunks see the same weights, so only the logits' own
  // rounding could move them. Later steps follow weights updated from gradients equal to rounding.
  const double loss_tol = c.compute == Compute::kF32 ? 1e-6 : 1e-3;
  for (size_t i = 0; i < whole.losses.size(); i++)
    EXPECT_NEAR(chunked.losses[i], whole.losses[i], loss_tol * std::abs(whole.losses[i])) << "loss " << i;
  // bf16/fp16 operands: a gradient element one rounding apart changes a 16-bit weight copy by one ulp
  // (2^-8 relative), so the later steps' gradients are held to a bf16-sized bound.
  const float grad_tol = c.compute == Compute::kF32 ? 1e-5f : 2e-2f;
  for (size_t st = 0; st < whole.grads.size(); st++) {
    double max_abs = 0, max_diff = 0;
    for (size_t i = 0; i < whole.grads[st].size(); i++) {
      max_abs = std::max(max_abs, std::abs(static_cast<double>(whole.grads[st][i])));
      max_diff = std::max(max_diff, std::abs(static_cast<double>(whole.grads[st][i]) - chunked.grads[st][i]));
    }
    EXPECT_LE(max_diff, grad_tol * max_abs) << "gradients of step " << st + 1;
  }
  // fp32, the first step's gradients: the same weights, the embedding's gradient rows summed in another
  // order only.
  for (size_t i = 0; c.compute == Compute::kF32 && i < whole.grads[0].size(); i++)
    ASSERT_NEAR(chunked.grads[0][i], whole.grads[0][i], 1e-5f * (1 + std::abs(whole.grads[0][i]))) << i;
  ASSERT_TRUE(SameBits(whole.losses, one_chunk.losses));
  for (size_t st = 0; st < whole.grads.size(); st++)
    EXPECT_TRUE(SameBits(whole.grads[st], one_chunk.grads[st])) << "gradients of step " << st + 1;
  EXPECT_TRUE(SameBits(whole.params, one_chunk.params));
  EXPECT_GT(whole.norms.front(), 0);
}

INSTANTIATE_TEST_SUITE_P(CpuBackends, GptFusedClassifier,
                         ::testing::Values(Case{"cpu", Compute::kF32}, Case{"cpu", Compute::kBF16},
                                           Case{"cpu-ref", Compute::kF32}, Case{"cpu-ref", Compute::kBF16}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::string(i.param.backend == "cpu" ? "Fast" : "Reference") +
                                  (i.param.compute == Compute::kBF16 ? "Bf16" : "Fp32");
                         });

INSTANTIATE_TEST_SUITE_P(CpuBackends, GptRecompute,
                         ::testing::Values(Case{"cpu", Compute::kF32}, Case{"cpu", Compute::kBF16},
                                           Case{"cpu", Compute::kF16}, Case{"cpu-ref", Compute::kF32},
                                           Case{"cpu-ref", Compute::kBF16}, Case{"cpu-ref", Compute::kF16}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           const char* p = i.param.compute == Compute::kBF16  ? "Bf16"
                                           : i.param.compute == Compute::kF16 ? "Fp16"
                                                                              : "Fp32";
                           return std::string(i.param.backend == "cpu" ? "Fast" : "Reference") + p;
                         });

INSTANTIATE_TEST_SUITE_P(CpuFast, GptFlashAttention,
                         ::testing::Values(Case{"cpu", Compute::kF32}, Case{"cpu", Compute::kBF16},
                                           Case{"cpu", Compute::kF16}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::string(i.param.compute == Compute::kBF16  ? "Bf16"
                                              : i.param.compute == Compute::kF16 ? "Fp16"
                                                                                 : "Fp32");
                         });

// Gpt::memory() is what the constructor allocated; Gpt::Allocation and GptMemoryEstimate must say the same.
TEST(GptMemory, AllocationMatchesTheEstimateWithAndWithoutRecompute) {
  const GptConfig cfg{4, 2, 16, 37, 8};
  const int B = 3, T = 8;
  for (int chunk : {0, 5, kDefaultLogitsChunk})
    for (AttentionKind kind : {AttentionKind::kNaive, AttentionKind::kFlash})
      for (Compute compute : {Compute::kF32, Compute::kBF16, Compute::kF16}) {
        for (Recompute r : {Recompute::kNone, Recompute::kGelu, Recompute::kBlocks}) {
          SCOPED_TRACE(std::string(RecomputeName(r)) + " compute " +
                       std::to_string(static_cast<int>(compute)) + " attention " + AttentionKindName(kind) +
                       " logits chunk " + std::to_string(chunk));
          auto backend = MakeCpuFastBackend();
          ASSERT_TRUE(backend->SetAttentionKernel(AttentionKindName(kind)));
          Gpt model(backend.get(), cfg, B, T, compute, r, chunk);
          EXPECT_EQ(model.attention(), kind);
          const GptMemory got = model.memory(), sized = Gpt::Allocation(cfg, B, T, compute, r, kind, chunk);
          const GptMemory est = GptMemoryEstimate(cfg, B, T, compute == Compute::kBF16, r, kind, chunk);
          for (const GptMemory* m : {&sized, &est}) {
            EXPECT_EQ(got.params, m->params);
            EXPECT_EQ(got.params_bf16, m->params_bf16);
            EXPECT_EQ(got.grads, m->grads);
            EXPECT_EQ(got.adam_state, m->adam_state);
            EXPECT_EQ(got.activations, m->activations);
            EXPECT_EQ(got.scratch, m->scratch);
          }
        }
      }
  // The fused classifier holds one chunk of rows: B*T = 24 rows of V = 37 logits become 5.
  EXPECT_EQ(GptMemoryEstimate(cfg, B, T, false, Recompute::kNone, AttentionKind::kNaive, 0).activations -
                GptMemoryEstimate(cfg, B, T, false, Recompute::kNone, AttentionKind::kNaive, 5).activations,
            size_t{24 - 5} * 37 * sizeof(float));
  // The saving: (L-1) GELU outputs of B*T x 4C floats.
  const size_t saved = GptMemoryEstimate(cfg, B, T, false).activations -
                       GptMemoryEstimate(cfg, B, T, false, Recompute::kGelu).activations;
  EXPECT_EQ(saved, size_t{3} * B * T * 4 * 16 * sizeof(float));
  // Blocks: of L = 4 layers' working sets (fp32: ln1, qkv, atty, attproj, residual2, ln2, fch, GELU, fcproj =
  // 17C per row, two layer norms' statistics, the probabilities) one is kept; residual3 stays for all.
  const size_t per_layer = size_t{B} * T * (17 * 16 + 4) + size_t{B} * 2 * T * T;
  EXPECT_EQ(GptMemoryEstimate(cfg, B, T, false).activations -
                GptMemoryEstimate(cfg, B, T, false, Recompute::kBlocks).activations,
            3 * per_layer * sizeof(float));
  // flash: per layer B*NH*T*T probabilities become B*NH*T*2 statistics, and the datt scratch goes.
  const GptMemory naive = GptMemoryEstimate(cfg, B, T, false),
                  flash = GptMemoryEstimate(cfg, B, T, false, Recompute::kNone, AttentionKind::kFlash);
  EXPECT_EQ(naive.activations - flash.activations, size_t{4} * B * 2 * (T * T - 2 * T) * sizeof(float));
  EXPECT_EQ(naive.scratch - flash.scratch, size_t{1} * B * 2 * T * T * sizeof(float));
}

TEST(GptMemory, RecomputeNamesRoundTrip) {
  for (Recompute r : {Recompute::kNone, Recompute::kGelu, Recompute::kBlocks})
    EXPECT_EQ(ParseRecompute(RecomputeName(r)).value(), r);
  EXPECT_NE(ParseRecompute("full").status().message().find("none, gelu or blocks"), std::string::npos);
}

}  // namespace
}  // namespace tern
