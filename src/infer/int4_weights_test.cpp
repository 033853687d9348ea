// int4 weights (--weights int4): the quantiser, the packing contract of backend.h (the reference against the
// formula over the unpacked values), the fast CPU kernel against the reference bit for bit on odd shapes,
// row independence, and an inference model that serves them.
//
// Bounds: fast vs reference: equal (both sum exact int32 group products and add them with the same fmas in
// the same order). int4 vs fp32 weights on uniform [-1, 1) data: each weight moves by at most half a step
// (|d| / 2 <= 1/16 of its group's largest), and the activations by half an int8 step; checked as 0.15 of
// the largest output (sums of 64-768 terms of independent errors stay far inside).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <tuple>

#include "infer/inference_model.h"
#include "infer/quantize.h"
#include "testing/ops.h"

namespace tern {
namespace {

using testing::Arena;
using testing::ExpectClose;
using testing::Uniform;

std::vector<float> RunInt4(Backend& be, const std::vector<float>& x, const Int4Matrix& w,
                           const std::vector<float>& bias, int N) {
  Arena ar(be);
  float* out = ar.Zeros<float>(static_cast<size_t>(N) * w.OC);
  be.MatmulInt4(out, ar.In(x), ar.In(w.packed), ar.In(w.scale), bias.empty() ? nullptr : ar.In(bias), N, w.OC,
                w.K);
  return ar.Out(out, static_cast<size_t>(N) * w.OC);
}

TEST(QuantizeInt4, EachGroupsLargestWeightIsExactAndTheRestWithinHalfAStep) {
  std::mt19937 rng(7);
  const int OC = 21, K = 128;
  auto w = Uniform(rng, OC * K);
  for (int k = 64; k < 128; k++) w[5 * K + k] = 0.0f;  // an all-zero group
  w[9 * K + 3] = 3.0f;                                 // a positive extreme: -8 d with d < 0
  Int4Matrix q = QuantizeInt4(w.data(), OC, K);
  EXPECT_EQ(q.packed.size(), 32u * K / 2);  // OC padded to 32
  EXPECT_EQ(q.scale.size(), 32u * K / 64);
  auto back = DequantizeInt4(q);
  for (int o = 0; o < OC; o++)
    for (int j = 0; j < K / 64; j++) {
      const float d = q.scale[(o / 16 * (K / 64) + j) * 16 + o % 16];
      float extreme = 0;
      for (int k = 64 * j; k < 64 * (j + 1); k++) {
        EXPECT_GE(Int4At(q, o, k), -8);
        EXPECT_LE(Int4At(q, o, k), 7);
        // Half a step, except on the side opposite the extreme, where 7 d is the last level: a weight beyond
        // 7.5 steps there is clamped to 7 (within a step).
        const float clamped = std::max(0.0f, std::fabs(w[o * K + k]) - 7.0f * std::fabs(d));
        EXPECT_LE(std::fabs(back[o * K + k] - w[o * K + k]), std::max(0.5f * std::fabs(d), clamped) * 1.0001f)
            << o << "," << k;
        if (std::fabs(w[o * K + k]) > std::fabs(extreme)) extreme = w[o * K + k];
      }
      EXPECT_FLOAT_EQ(d, extreme / -8.0f) << o << "," << j;
    }
  EXPECT_EQ(q.scale[(5 / 16 * 2 + 1) * 16 + 5], 0.0f);
  EXPECT_EQ(Int4At(q, 9, 3), -8);
  EXPECT_FLOAT_EQ(back[9 * K + 3], 3.0f);
  for (int k = 0; k < K; k++) EXPECT_EQ(Int4At(q, 30, k), 0) << "padding channels hold 0";
}

// backend.h's definition, from the unpacked values (Int4At) and the scale index it states: an independent
// reading of the packing that the reference backend's byte arithmetic must agree with.
std::vector<float> Int4Formula(const std::vector<float>& x, const Int4Matrix& w,
                               const std::vector<float>& bias, int N) {
  const int K = w.K, G = K / 64;
  std::vector<float> out(static_cast<size_t>(N) * w.OC);
  std::vector<int> a(K);
  for (int n = 0; n < N; n++) {
    float m = 0;
    for (int k = 0; k < K; k++) m = std::max(m, std::fabs(x[n * K + k]));
    for (int k = 0; k < K; k++)
      a[k] = static_cast<int>(std::nearbyint(x[n * K + k] * (m > 0 ? 127.0f / m : 0.0f)));
    for (int o = 0; o < w.OC; o++) {
      float acc = 0;
      for (int j = 0; j < G; j++) {
        int s = 0;
        for (int k = 64 * j; k < 64 * j + 64; k++) s += a[k] * Int4At(w, o, k);
        acc = std::fma(static_cast<float>(s), w.scale[(o / 16 * G + j) * 16 + o % 16], acc);
      }
      out[n * w.OC + o] = bias.empty() ? acc * (m / 127.0f) : std::fma(acc, m / 127.0f, bias[o]);
    }
  }
  return out;
}

TEST(MatmulInt4, FastMatchesReferenceBitForBitAndApproximatesFp32) {
  std::mt19937 rng(8);
  // Rows 1-2 (4 groups a tile), 3-4 (2), 5-8 (1), several row tiles and panels (9, 17, 70: a short last
  // panel and tile); channels off the 16-channel group and the 64-channel block (37, 50, 130); K 64 to 768.
  for (auto [N, OC, K] : {std::tuple{1, 48, 64},
                          {2, 64, 128},
                          {3, 37, 64},
                          {4, 130, 192},
                          {5, 16, 64},
                          {8, 50, 256},
                          {9, 64, 64},
                          {17, 100, 128},
                          {70, 200, 768}}) {
    auto w = Uniform(rng, static_cast<size_t>(OC) * K);
    auto x = Uniform(rng, static_cast<size_t>(N) * K);
    auto bias = Uniform(rng, OC);
    Int4Matrix q = QuantizeInt4(w.data(), OC, K);
    auto ref = MakeCpuReferenceBackend();
    auto fast = MakeCpuFastBackend();
    const std::string what =
        "N=" + std::to_string(N) + " OC=" + std::to_string(OC) + " K=" + std::to_string(K);
    auto want = RunInt4(*ref, x, q, bias, N);
    EXPECT_EQ(want, Int4Formula(x, q, bias, N)) << "reference vs backend.h's formula " << what;
    EXPECT_EQ(RunInt4(*ref, x, q, {}, N), Int4Formula(x, q, {}, N)) << "without bias " << what;
    auto got = RunInt4(*fast, x, q, bias, N);
    EXPECT_EQ(got, want) << "fast vs reference " << what;
    EXPECT_EQ(RunInt4(*fast, x, q, {}, N), RunInt4(*ref, x, q, {}, N)) << "without bias " << what;
    // Against the fp32 product of the unquantised weights.
    Arena ar(*ref);
    float* out = ar.Zeros<float>(static_cast<size_t>(N) * OC);
    ref->Matmul(out, F32(ar.In(x)), F32(ar.In(w)), ar.In(bias), N, OC, K, false, true, 0.0f, Compute::kF32);
    const auto f32 = ar.Out(out, static_cast<size_t>(N) * OC);
    float largest = 0;
    for (float v : f32) largest = std::max(largest, std::fabs(v));
    ExpectClose(got, f32, 0.0, 0.15 * largest, "int4 vs fp32 " + what);
    // Row independence: each row alone gives bitwise the same outputs.
    for (int n = 0; n < N; n += std::max(1, N / 4)) {
      std::vector<float> row(x.begin() + n * K, x.begin() + (n + 1) * K);
      auto alone = RunInt4(*fast, row, q, bias, 1);
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), got.begin() + n * OC)) << what << " row " << n;
    }
  }
}

TEST(Int4Weights, ParsedNamedAndRefusedWhereTheyCannotRun) {
  EXPECT_EQ(ParseWeights("int4").value(), Quantize::kInt4);
  EXPECT_STREQ(WeightsName(Quantize::kInt4), "int4");
  EXPECT_EQ(ParseKvDtype("auto", Quantize::kInt4).value(), DType::kBF16);
  auto bad = ParseWeights("int3");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("int8 or int4"), std::string::npos) << bad.status().message();

  // n_embd not a multiple of 64: refused with the fix named.
  GptConfig cfg{1, 2, 48, 0, 32};
  cfg.vocab_size = 40;
  cfg.block_size = 32;
  std::vector<float> params(GptParamCount(cfg), 0.01f);
  auto be = MakeCpuFastBackend();
  InferenceModelOptions mo;
  mo.quantize = Quantize::kInt4;
  auto m = InferenceModel::Create(be.get(), cfg, params, mo);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("--weights int8"), std::string::npos) << m.status().message();
}

// A model served with int4 weights: its weights take 4.5 bits each (the packed nibbles and a scale per 64),
// and its logits follow the fp32 model's.
TEST(Int4Weights, AModelServesWithAQuarterOfInt8sBytesPlusScales) {
  std::mt19937 rng(9);
  GptConfig cfg{2, 2, 64, 0, 32};
  cfg.vocab_size = 96;
  cfg.block_size = 32;
  std::vector<float> params = Uniform(rng, GptParamCount(cfg));
  for (float& p : params) p *= 0.2f;
  auto be = MakeCpuFastBackend();
  if (!be->capabilities().int4_weights)
    GTEST_SKIP() << "this CPU has no AVX-512 VNNI: tern serve refuses int4";
  auto logits = [&](Quantize q, size_t* weight_bytes) {
    InferenceModelOptions mo;
    mo.quantize = q;
    mo.kv_dtype = DType::kF32;
    mo.block_size = 16;
    mo.num_blocks = 2;
    mo.max_rows = 8;
    mo.max_seqs = 1;
    auto m = InferenceModel::Create(be.get(), cfg, params, mo);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    ForwardBatch b;
    for (int t = 0; t < 8; t++) {
      b.tokens.push_back((7 * t + 3) % cfg.vocab_size);
      b.positions.push_back(t);
      b.slots.push_back(t);
    }
    b.logit_rows = {7};
    b.seqs = {0, 8, 8};
    b.block_tables = {0, 1};
    const float* l = (*m)->Forward(b);
    *weight_bytes = (*m)->weight_bytes();
    return std::vector<float>(l, l + cfg.vocab_size);
  };
  size_t f32_bytes = 0, int4_bytes = 0;
  const auto want = logits(Quantize::kNone, &f32_bytes);
  const auto got = logits(Quantize::kInt4, &int4_bytes);
  // Per layer 12 C^2 weights, plus the tied head's V C: 4 bytes each in fp32, 0.5 + 4/64 in int4 (the head's
  // 96 channels are a multiple of 16, so no padding).
  EXPECT_EQ(f32_bytes * 9, int4_bytes * 64) << "4.5 bits a weight against fp32's 32";
  // Random weights (no outliers for the group scales to absorb, every weight a full step of noise): the
  // logits' relative RMS error is a few percent; bounded at 10%.
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); i++) {
    err += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  std::printf("int4 logits vs fp32: relative RMS error %.4f\n", std::sqrt(err / norm));
  EXPECT_LE(std::sqrt(err / norm), 0.10);
  EXPECT_NE(got, want);
}

}  // namespace
}  // namespace tern
