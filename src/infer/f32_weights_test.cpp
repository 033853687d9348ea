// fp32 weights (--weights fp32): the fast CPU matmul of fp32 activations by fp32 weights
// (Backend::MatmulF32Weights, cpu/f32_matmul.cpp) against the reference on odd shapes, determinism, row
// independence, and a threaded GPT-2 shape.
//
// Bound: fast vs reference (fp32 FMA into 4-16 lane sums vs the reference's double sums):
// |d| <= 2e-6 * max|out| + 1e-5 * |out|, the fp32 rounding of sums of up to 800 terms of |x w| <= 1 (GPT-2's
// fcproj sums 3072 under the same bound: max|out| grows with the sum's length as its rounding does).
#include <gtest/gtest.h>

#include <random>
#include <tuple>

#include "backend/cpu/fast_ops.h"
#include "infer/inference_model.h"
#include "testing/ops.h"

namespace tern {
namespace {

using testing::Arena;
using testing::ExpectClose;
using testing::Uniform;

std::vector<float> RunF32(Backend& be, const std::vector<float>& x, const std::vector<float>& w,
                          const std::vector<float>& bias, int N, int OC, int K) {
  Arena ar(be);
  float* out = ar.Zeros<float>(static_cast<size_t>(N) * OC);
  be.MatmulF32Weights(out, ar.In(x), ar.In(w), bias.empty() ? nullptr : ar.In(bias), N, OC, K);
  return ar.Out(out, static_cast<size_t>(N) * OC);
}

// The fast kernel against the reference's fp32 Matmul, twice (bitwise the same), and each row alone
// against its row of the batch (bitwise).
void ExpectFastMatchesReferenceAndRowIndependent(int N, int OC, int K, bool with_bias, uint32_t seed) {
  std::mt19937 rng(seed);
  auto w = Uniform(rng, static_cast<size_t>(OC) * K);
  auto x = Uniform(rng, static_cast<size_t>(N) * K);
  std::vector<float> bias;
  if (with_bias) bias = Uniform(rng, OC);
  auto ref = MakeCpuReferenceBackend();
  auto fast = MakeCpuFastBackend();
  const std::string what = "N=" + std::to_string(N) + " OC=" + std::to_string(OC) +
                           " K=" + std::to_string(K) + (with_bias ? " bias" : "");
  auto want = RunF32(*ref, x, w, bias, N, OC, K);
  auto got = RunF32(*fast, x, w, bias, N, OC, K);
  ExpectClose(got, want, 1e-5, 2e-6, "fast fp32 weights vs reference " + what);
  EXPECT_EQ(RunF32(*fast, x, w, bias, N, OC, K), got) << "deterministic " << what;
  // The default (what CUDA and the reference run) is the fp32 Matmul itself.
  Arena ar(*ref);
  float* out = ar.Zeros<float>(static_cast<size_t>(N) * OC);
  ref->Matmul(out, F32(ar.In(x)), F32(ar.In(w)), bias.empty() ? nullptr : ar.In(bias), N, OC, K, false, true,
              0.0f, Compute::kF32);
  EXPECT_EQ(ar.Out(out, static_cast<size_t>(N) * OC), want) << "reference default " << what;
  // Row independence: each row alone gives bitwise the same outputs as in the batch.
  for (int n = 0; n < N; n++) {
    std::vector<float> row(x.begin() + static_cast<size_t>(n) * K,
                           x.begin() + static_cast<size_t>(n + 1) * K);
    auto alone = RunF32(*fast, row, w, bias, 1, OC, K);
    for (int o = 0; o < OC; o++)
      ASSERT_EQ(alone[o], got[static_cast<size_t>(n) * OC + o]) << what << " row " << n << " channel " << o;
  }
}

TEST(MatmulF32Weights, FastMatchesReferenceOnOddShapesAndIsRowIndependent) {
  // Rows 1-3 (one tile of any kernel), 5 (one AVX-512 tile, two of 3), 16 and 17 (decode batches, a short
  // last tile); channels not a multiple of the 4-channel group; K below, at and off the vector width (4, 8
  // or 16 lanes): 1, 7, 17, 129, 771.
  uint32_t seed = 21;
  for (auto [N, OC, K] : {std::tuple{1, 1, 1},
                          {1, 37, 7},
                          {2, 5, 16},
                          {3, 19, 17},
                          {5, 130, 771},
                          {16, 66, 64},
                          {16, 7, 1},
                          {17, 33, 129},
                          {17, 6, 771},
                          {1, 2051, 48}})
    for (bool bias : {true, false}) ExpectFastMatchesReferenceAndRowIndependent(N, OC, K, bias, seed++);
}

TEST(MatmulF32Weights, ThreadedShapesMatchTheReference) {
  // Large enough to run on every OpenMP thread (>= 2 MB of weights): GPT-2's fc shape, 2 rows, and its
  // fcproj shape (K = 3072) at 3 rows.
  ExpectFastMatchesReferenceAndRowIndependent(2, 3072, 768, true, 31);
  ExpectFastMatchesReferenceAndRowIndependent(3, 768, 3072, false, 32);
  // Small weights, threaded only for the batch (>= 4M multiply-adds): each row alone runs on one thread.
  ExpectFastMatchesReferenceAndRowIndependent(64, 300, 256, true, 33);
}

TEST(MatmulF32Weights, PrefillBlocksAreRowIndependent) {
  // More rows than one block of activations (about 512 KB: 168 rows at K = 768): rows in the second block
  // and in its short last tile give the bits they give alone.
  std::mt19937 rng(34);
  const int N = 200, OC = 70, K = 768;
  auto w = Uniform(rng, static_cast<size_t>(OC) * K);
  auto x = Uniform(rng, static_cast<size_t>(N) * K);
  auto bias = Uniform(rng, OC);
  auto fast = MakeCpuFastBackend();
  auto ref = MakeCpuReferenceBackend();
  auto got = RunF32(*fast, x, w, bias, N, OC, K);
  ExpectClose(got, RunF32(*ref, x, w, bias, N, OC, K), 1e-5, 2e-6, "prefill");
  for (int n : {0, 5, 167, 168, 173, 199}) {
    std::vector<float> row(x.begin() + static_cast<size_t>(n) * K,
                           x.begin() + static_cast<size_t>(n + 1) * K);
    auto alone = RunF32(*fast, row, w, bias, 1, OC, K);
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(), got.begin() + static_cast<size_t>(n) * OC))
        << "row " << n;
  }
}

}  // namespace
}  // namespace tern
