// bf16 weights (--weights bf16): the fast CPU matmul of fp32 activations by bf16 weights against the
// reference on odd shapes, row independence, the bf16 token embedding, and the option parsing.
//
// Bounds: fast vs reference (the same bf16 weights, fp32 vs double sums): |d| <= 2e-6 * max|out| + 1e-5 *
// |out| (fp32 rounding of sums of up to 800 terms). bf16 vs the unrounded fp32 weights: each weight moves by
// at most 2^-9 of itself, so |d| <= 2^-9 * sum_k |x_k w_k|; checked as 4e-3 of the largest output.
#include <gtest/gtest.h>

#include <random>
#include <tuple>

#include "backend/bf16.h"
#include "backend/cpu/amx.h"
#include "backend/cpu/fast_ops.h"
#include "infer/inference_model.h"
#include "model/init.h"
#include "testing/ops.h"

namespace tern {
namespace {

using testing::Arena;
using testing::ExpectClose;
using testing::Uniform;

std::vector<uint16_t> ToBF16(const std::vector<float>& w) {
  std::vector<uint16_t> h(w.size());
  for (size_t i = 0; i < w.size(); i++) h[i] = F32ToBF16(w[i]);
  return h;
}

std::vector<float> RunBF16(Backend& be, const std::vector<float>& x, const std::vector<uint16_t>& w,
                           const std::vector<float>& bias, int N, int OC, int K,
                           bool row_independent = true) {
  Arena ar(be);
  float* out = ar.Zeros<float>(static_cast<size_t>(N) * OC);
  be.MatmulBF16(out, ar.In(x), ar.In(w), bias.empty() ? nullptr : ar.In(bias), N, OC, K, row_independent);
  return ar.Out(out, static_cast<size_t>(N) * OC);
}

TEST(MatmulBF16Weights, FastMatchesReferenceOnOddShapesAndIsRowIndependent) {
  std::mt19937 rng(11);
  // Rows 1-3 (one tile), 16 and 17 (decode batches, a short last tile); channels not a multiple of the
  // 4-channel group; K below, at and off the vector width (4, 8 or 16 lanes). The shapes with K % 32 == 0
  // and N >= 16 take AMX where the CPU has it: 16-channel tiles (one or two a group, the last < 16 channels
  // through the vector kernel), 1-16 rows a tile and several tiles (33, 40) with a padded last one.
  for (auto [N, OC, K] : {std::tuple{1, 1, 1},
                          {1, 37, 7},
                          {2, 5, 8},
                          {3, 19, 17},
                          {16, 64, 64},
                          {17, 33, 129},
                          {5, 130, 771},
                          {1, 2051, 48},
                          {1, 16, 32},
                          {2, 50, 64},
                          {16, 48, 96},
                          {17, 70, 96},
                          {33, 35, 64},
                          {40, 130, 768}}) {
    auto w32 = Uniform(rng, static_cast<size_t>(OC) * K);
    auto w = ToBF16(w32);
    auto x = Uniform(rng, static_cast<size_t>(N) * K);
    auto bias = Uniform(rng, OC);
    auto ref = MakeCpuReferenceBackend();
    auto fast = MakeCpuFastBackend();
    const std::string what =
        "N=" + std::to_string(N) + " OC=" + std::to_string(OC) + " K=" + std::to_string(K);
    auto want = RunBF16(*ref, x, w, bias, N, OC, K);
    auto got = RunBF16(*fast, x, w, bias, N, OC, K);
    ExpectClose(got, want, 1e-5, 2e-6, "fast bf16 weights vs reference " + what);
    EXPECT_EQ(RunBF16(*fast, x, w, bias, N, OC, K), got) << "deterministic " << what;
    // Against the fp32 weights the bf16 ones were rounded from.
    Arena ar(*ref);
    float* out = ar.Zeros<float>(static_cast<size_t>(N) * OC);
    ref->Matmul(out, F32(ar.In(x)), F32(ar.In(w32)), ar.In(bias), N, OC, K, false, true, 0.0f, Compute::kF32);
    ExpectClose(got, ar.Out(out, static_cast<size_t>(N) * OC), 0.0, 4e-3, "bf16 vs fp32 weights " + what);
    // Row independence: each row alone gives bitwise the same outputs as in the batch.
    for (int n = 0; n < N; n++) {
      std::vector<float> row(x.begin() + static_cast<size_t>(n) * K,
                             x.begin() + static_cast<size_t>(n + 1) * K);
      auto alone = RunBF16(*fast, row, w, bias, 1, OC, K);
      for (int o = 0; o < OC; o++)
        ASSERT_EQ(alone[o], got[static_cast<size_t>(n) * OC + o]) << what << " row " << n << " channel " << o;
    }
  }
}

// A caller that never batches (an engine of one stream: row_independent false) may get another kernel by row
// count: on a CPU with AMX granted, vdpbf16ps below two rows (other bits than AMX's, both within the bound
// of the reference) and AMX from two rows (the same bits as a batching caller's).
TEST(MatmulBF16Weights, AOneStreamCallerTakesTheVectorKernelAtOneRow) {
  std::mt19937 rng(14);
  const int OC = 2048, K = 768;
  auto w = ToBF16(Uniform(rng, static_cast<size_t>(OC) * K));
  auto ref = MakeCpuReferenceBackend();
  auto fast = MakeCpuFastBackend();
  for (int N : {1, 2, 16}) {
    auto x = Uniform(rng, static_cast<size_t>(N) * K);
    const auto want = RunBF16(*ref, x, w, {}, N, OC, K);
    const auto batching = RunBF16(*fast, x, w, {}, N, OC, K, true);
    const auto one_stream = RunBF16(*fast, x, w, {}, N, OC, K, false);
    ExpectClose(one_stream, want, 1e-5, 2e-6, "one-stream caller N=" + std::to_string(N));
    ExpectClose(batching, want, 1e-5, 2e-6, "batching caller N=" + std::to_string(N));
    EXPECT_EQ(RunBF16(*fast, x, w, {}, N, OC, K, false), one_stream) << "deterministic N=" << N;
    if (N >= 2) {
      EXPECT_EQ(one_stream, batching) << "AMX from two rows for both N=" << N;
    }
  }
#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__)
  const bool amx = amx::Granted();
#else
  const bool amx = false;
#endif
  if (!amx) GTEST_SKIP() << "no AMX granted (or built without it): one kernel serves every row count";
  auto x = Uniform(rng, K);
  const auto batching = RunBF16(*fast, x, w, {}, 1, OC, K, true);
  const auto one_stream = RunBF16(*fast, x, w, {}, 1, OC, K, false);
  size_t differ = 0;
  for (int o = 0; o < OC; o++) differ += batching[o] != one_stream[o];
  EXPECT_GT(differ, size_t{0}) << "one row: vdpbf16ps for a one-stream caller, AMX for a batching one";
}

// The same through a model: an engine of one stream (max_seqs 1) and a batching one (max_seqs 4) with bf16
// weights give one sequence's logits (a 9-token prompt, then one decode row) within fp32 rounding of each
// other, each deterministic. Channels and K are multiples of 32, so an AMX CPU takes AMX for the batching
// engine's decode row and vdpbf16ps for the one-stream engine's.
TEST(MatmulBF16Weights, AOneStreamEngineDecodesAsTheBatchingOne) {
  const GptConfig cfg{2, 2, 64, 96, 64};
  const std::vector<float> params = GptInitialWeights(cfg, 5);
  auto be = MakeCpuFastBackend();
  std::vector<std::vector<float>> logits;
  for (int max_seqs : {1, 4, 1}) {
    InferenceModelOptions mo;
    mo.quantize = Quantize::kBF16;
    mo.kv_dtype = DType::kBF16;
    mo.block_size = 16;
    mo.num_blocks = 4;
    mo.max_rows = 16;
    mo.max_seqs = max_seqs;
    auto m = InferenceModel::Create(be.get(), cfg, params, mo);
    ASSERT_TRUE(m.ok()) << m.status().message();
    ForwardBatch b;
    for (int p = 0; p < 9; p++) {
      b.tokens.push_back(3 + p * 7 % 90);
      b.positions.push_back(p);
      b.slots.push_back(p);
    }
    b.seqs = {0, 9, 9};
    b.block_tables.assign((*m)->max_blocks_per_seq(), 0);
    b.block_tables[0] = 0;
    b.logit_rows = {8};
    (*m)->Forward(b);
    ForwardBatch d;
    d.tokens = {17};
    d.positions = {9};
    d.slots = {9};
    d.seqs = {0, 1, 10};
    d.block_tables = b.block_tables;
    d.logit_rows = {0};
    const float* out = (*m)->Forward(d);
    logits.emplace_back(out, out + cfg.vocab_size);
  }
  ExpectClose(logits[0], logits[1], 1e-4, 1e-5, "one-stream vs batching engine");
  EXPECT_EQ(logits[0], logits[2]) << "the one-stream engine is deterministic";
}

TEST(MatmulBF16Weights, ThreadedShapesMatchTheReference) {
  // Large enough to run on every OpenMP thread (>= 2 MB of weights): GPT-2's fc shape, 2 rows.
  std::mt19937 rng(12);
  const int N = 2, OC = 3072, K = 768;
  auto w = ToBF16(Uniform(rng, static_cast<size_t>(OC) * K));
  auto x = Uniform(rng, static_cast<size_t>(N) * K);
  auto ref = MakeCpuReferenceBackend();
  auto fast = MakeCpuFastBackend();
  ExpectClose(RunBF16(*fast, x, w, {}, N, OC, K), RunBF16(*ref, x, w, {}, N, OC, K), 1e-5, 2e-6, "threaded");
}

TEST(EmbedTokensBF16, FastMatchesReferenceExactly) {
  std::mt19937 rng(13);
  const int V = 50, T = 20, N = 13, C = 40;
  auto wte32 = Uniform(rng, V * C), wpe = Uniform(rng, T * C);
  auto wte = ToBF16(wte32);
  auto tokens = testing::Tokens(rng, N, V), positions = testing::Tokens(rng, N, T);
  std::vector<std::vector<float>> outs;
  for (auto& be : {MakeCpuReferenceBackend(), MakeCpuFastBackend()}) {
    Arena ar(*be);
    float* out = ar.Zeros<float>(N * C);
    be->EmbedTokensBF16(out, ar.In(tokens), ar.In(positions), ar.In(wte), ar.In(wpe), N, C);
    outs.push_back(ar.Out(out, N * C));
  }
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(outs[0][5 * C + 3], BF16ToF32(wte[tokens[5] * C + 3]) + wpe[positions[5] * C + 3]);
}

TEST(Weights, ParsingAndTheQuantizeAlias) {
  EXPECT_EQ(ParseWeights("fp32").value(), Quantize::kNone);
  EXPECT_EQ(ParseWeights("bf16").value(), Quantize::kBF16);
  EXPECT_EQ(ParseWeights("int8").value(), Quantize::kInt8);
  EXPECT_FALSE(ParseWeights("none").ok());
  auto bad = ParseWeights("fp8");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("fp32, bf16, int8 or int4"), std::string::npos)
      << bad.status().message();
  EXPECT_EQ(ParseQuantize("none").value(), Quantize::kNone);
  EXPECT_EQ(ParseQuantize("int8").value(), Quantize::kInt8);
  EXPECT_STREQ(WeightsName(Quantize::kBF16), "bf16");
  EXPECT_STREQ(WeightsName(Quantize::kNone), "fp32");
  // --kv-dtype auto: bf16 with bf16 weights as with int8 ones.
  EXPECT_EQ(ParseKvDtype("auto", Quantize::kBF16).value(), DType::kBF16);
  EXPECT_EQ(ParseKvDtype("auto", Quantize::kNone).value(), DType::kF32);
}

}  // namespace
}  // namespace tern
