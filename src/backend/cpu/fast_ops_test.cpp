// Every op of the fast CPU backend ("cpu") against the reference backend ("cpu-ref") on random inputs,
// including odd shapes, and run twice to check that the fast path is deterministic (bit-identical reruns).
//
// Tolerances: |fast - ref| <= rtol * |ref| + atol * max|ref| per element.
//   fp32 ops: rtol 1e-5 (different summation order, a polynomial exp); attention atol 1e-5.
//   bf16 matmul vs the reference's computation on the same bf16-rounded operands: rtol 1e-3, atol 1e-4.
//   Encoder, Add, BiasBackward and CastF32ToBF16 sum in the reference's order: exact.
#include <immintrin.h>
#include <omp.h>
#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>

#include <limits>
#include <thread>

#include "backend/bf16.h"
#include "backend/cpu/dnnl_matmul.h"
#include "backend/cpu/fast_ops.h"
#include "testing/ops.h"

namespace tern {
namespace {

using testing::Arena;
using testing::ExpectBitEqual;
using testing::ExpectClose;
using testing::Tokens;
using testing::Uniform;
using Outputs = std::vector<std::vector<float>>;

class FastOpsTest : public ::testing::Test {
 protected:
  // Runs `op` on the reference and twice on the fast backend: every output close to the reference, and the
  // two fast runs bit-identical.
  void Check(const std::function<Outputs(Backend&)>& op, double rtol, double atol, const std::string& what) {
    Outputs want = op(*ref_), got = op(*fast_), again = op(*fast_);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); i++) {
      ExpectClose(got[i], want[i], rtol, atol, what + " output " + std::to_string(i));
      ExpectBitEqual(got[i], again[i], what + " rerun output " + std::to_string(i));
    }
  }
  std::vector<float> U(size_t n, float lo = -1.0f, float hi = 1.0f) { return Uniform(rng_, n, lo, hi); }

  std::unique_ptr<Backend> ref_ = MakeCpuReferenceBackend();
  std::unique_ptr<Backend> fast_ = MakeCpuFastBackend();
  std::mt19937 rng_{20240601};
};

TEST_F(FastOpsTest, IsTheFastBackend) {
  EXPECT_EQ(fast_->name(), "cpu");
}

// The fast backend flushes subnormals (FTZ/DAZ) on its threads: a subnormal input reads as zero and a result
// that would be subnormal is written as zero, on the calling thread and on the OpenMP workers alike.
TEST_F(FastOpsTest, FlushesSubnormalsOnEveryThread) {
  constexpr float tiny = std::numeric_limits<float>::denorm_min() * 1000;  // subnormal
  // At compile time: at run time this thread has DAZ on (the fixture made the fast backend), so tiny reads 0.
  static_assert(tiny > 0.0f);
  for (size_t n : {size_t{16}, size_t{1} << 20}) {  // below and above the size that goes parallel
    std::vector<float> a(n, tiny), b(n, 0.0f), out(n, 1.0f);
    fast_->Add(out.data(), a.data(), b.data(), n);
    // as bits: this thread reads subnormals as zero (DAZ), so a float comparison could not tell
    for (size_t i = 0; i < n; i += n / 8)
      EXPECT_EQ(std::bit_cast<uint32_t>(out[i]), 0u) << "n=" << n << " i=" << i;
  }
}

// A thread whose floating-point state was not set up by the backend's constructor (it cleared FTZ/DAZ, as a
// thread created before the backend or by foreign code may have) gets it from PrepareThread, for itself and
// for its own OpenMP team (the serving engine's thread).
TEST_F(FastOpsTest, PrepareThreadFlushesSubnormalsOnANewThreadAndItsTeam) {
  const float tiny = std::numeric_limits<float>::denorm_min() * 1000;
  const size_t big = size_t{1} << 20;
  // Compared as bits: this thread reads subnormals as zero (DAZ), so a float comparison could not tell.
  uint32_t small_result = 1, big_result = 1;
  std::thread t([&] {
    _mm_setcsr(_mm_getcsr() & ~0x8040u);
#pragma omp parallel
    _mm_setcsr(_mm_getcsr() & ~0x8040u);
    fast_->PrepareThread();
    std::vector<float> a(big, tiny), b(big, 0.0f), out(big, 1.0f);
    fast_->Add(out.data(), a.data(), b.data(), 16);
    small_result = std::bit_cast<uint32_t>(out[0]);
    fast_->Add(out.data(), a.data(), b.data(), big);
    big_result = std::bit_cast<uint32_t>(out[big - 1]);  // the last OpenMP worker's chunk
  });
  t.join();
  EXPECT_EQ(small_result, 0u) << "the thread itself";
  EXPECT_EQ(big_result, 0u) << "its OpenMP workers";
}

// ---- matmul ------------------------------------------------------------------------------------------

struct Shape {
  int M, N, K;
};
// {4100, 13, 7} is tall enough for DnnlMatmul to prepack B.
const std::vector<Shape> kShapes = {{7, 13, 5}, {33, 17, 65}, {1, 1, 1}, {130, 70, 257}, {4100, 13, 7}};
const std::vector<Shape> kSmallShapes = {{7, 13, 5}, {33, 17, 65}};

std::vector<uint16_t> ToBF16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); i++) h[i] = F32ToBF16(v[i]);
  return h;
}

// Runs every layout (trans_a, trans_b) of every shape for one operand/compute mix. The first two shapes get
// every (beta in {0, 1, 0.5}) x (bias or not); the others beta 0 without bias and beta 1 with bias.
void MatmulSweep(const std::vector<Shape>& shapes, std::mt19937& rng, DType a_type, DType b_type,
                 Compute compute, std::function<void(std::function<Outputs(Backend&)>, std::string)> check) {
  for (const Shape& s : shapes) {
    auto a = Uniform(rng, size_t(s.M) * s.K), b = Uniform(rng, size_t(s.K) * s.N);
    auto c0 = Uniform(rng, size_t(s.M) * s.N), bias = Uniform(rng, s.N);
    auto a16 = ToBF16(a), b16 = ToBF16(b);
    for (int layout = 0; layout < 4; layout++) {
      for (float beta : {0.0f, 1.0f, 0.5f}) {
        const bool full_grid = &s - shapes.data() < 2;
        if (!full_grid && beta == 0.5f) continue;
        for (bool with_bias : {false, true}) {
          if (!full_grid && with_bias != (beta == 1.0f)) continue;
          const bool ta = layout & 1, tb = layout & 2;
          auto op = [&](Backend& be) {
            Arena ar(be);
            float* c = ar.In(c0);
            Operand oa = a_type == DType::kBF16 ? BF16(ar.In(a16)) : F32(ar.In(a));
            Operand ob = b_type == DType::kBF16 ? BF16(ar.In(b16)) : F32(ar.In(b));
            be.Matmul(c, oa, ob, with_bias ? ar.In(bias) : nullptr, s.M, s.N, s.K, ta, tb, beta, compute);
            return Outputs{ar.Out(c, size_t(s.M) * s.N)};
          };
          check(op, "matmul " + std::string(DTypeName(a_type)) + "x" + DTypeName(b_type) + " compute " +
                        ComputeName(compute) + " M=" + std::to_string(s.M) + " N=" + std::to_string(s.N) +
                        " K=" + std::to_string(s.K) + " ta=" + std::to_string(ta) +
                        " tb=" + std::to_string(tb) + " beta=" + std::to_string(beta) +
                        " bias=" + std::to_string(with_bias));
        }
      }
    }
  }
}

TEST_F(FastOpsTest, MatmulF32) {
  MatmulSweep(kShapes, rng_, DType::kF32, DType::kF32, Compute::kF32,
              [&](auto op, std::string what) { Check(op, 1e-5, 1e-5, what); });
}

TEST_F(FastOpsTest, MatmulBF16CastsF32Operands) {
  MatmulSweep(kShapes, rng_, DType::kF32, DType::kF32, Compute::kBF16,
              [&](auto op, std::string what) { Check(op, 1e-3, 1e-4, what); });
}

TEST_F(FastOpsTest, MatmulBF16Operands) {
  MatmulSweep(kShapes, rng_, DType::kBF16, DType::kBF16, Compute::kBF16,
              [&](auto op, std::string what) { Check(op, 1e-3, 1e-4, what); });
  MatmulSweep(kSmallShapes, rng_, DType::kF32, DType::kBF16, Compute::kBF16,
              [&](auto op, std::string what) { Check(op, 1e-3, 1e-4, what); });
}

TEST_F(FastOpsTest, MatmulF32ComputeWidensBF16Operands) {
  MatmulSweep(kSmallShapes, rng_, DType::kBF16, DType::kF32, Compute::kF32,
              [&](auto op, std::string what) { Check(op, 1e-5, 1e-5, what); });
}

// The LM head's three products at a reduced vocabulary (odd V, many rows): forward, dinp, dweight.
TEST_F(FastOpsTest, MatmulHeadShapes) {
  const int N = 48, C = 40, V = 4111;
  auto x = U(size_t(N) * C), w = U(size_t(V) * C), dlogits = U(size_t(N) * V), dw0 = U(size_t(V) * C);
  for (Compute compute : {Compute::kF32, Compute::kBF16}) {
    const double rtol = compute == Compute::kBF16 ? 1e-3 : 1e-5,
                 atol = compute == Compute::kBF16 ? 1e-4 : 1e-5;
    Check(
        [&](Backend& be) {
          Arena ar(be);
          float* logits = ar.Zeros<float>(size_t(N) * V);
          float* dx = ar.Zeros<float>(size_t(N) * C);
          float* dw = ar.In(dw0);
          const float* pw = ar.In(w);
          be.Matmul(logits, F32(ar.In(x)), F32(pw), nullptr, N, V, C, false, true, 0.0f, compute);
          const float* pd = ar.In(dlogits);
          be.Matmul(dx, F32(pd), F32(pw), nullptr, N, C, V, false, false, 0.0f, compute);
          be.Matmul(dw, F32(pd), F32(ar.In(x)), nullptr, V, C, N, true, false, 1.0f, compute);
          return Outputs{ar.Out(logits, size_t(N) * V), ar.Out(dx, size_t(N) * C), ar.Out(dw, size_t(V) * C)};
        },
        rtol, atol, std::string("head ") + ComputeName(compute));
  }
}

// A weight gradient's fp32 A operand under bf16 compute is cast and transposed in one pass (16x16 register
// tiles with AVX-512, scalar at the edges): bit for bit the product of A transposed beforehand. Two ties
// (round to even) sit inside a full tile.
TEST_F(FastOpsTest, MatmulBF16TransposedOperandIsTheCastOfItsTranspose) {
  const int M = 70, N = 24,
            K = 83;  // A [K, M]: 4 full strips of 16 columns and a tail, 5 full row tiles and a tail
  auto a = U(size_t(K) * M), b = U(size_t(K) * N);
  a[3 * M + 5] = std::bit_cast<float>(0x3f808000u);  // a tie: rounds to even (down)
  a[4 * M + 6] = std::bit_cast<float>(0x3f818000u);  // a tie: rounds to even (up)
  std::vector<float> at(size_t(M) * K);
  for (int k = 0; k < K; k++)
    for (int m = 0; m < M; m++) at[size_t(m) * K + k] = a[size_t(k) * M + m];
  Arena ar(*fast_);
  float* c1 = ar.Zeros<float>(size_t(M) * N);
  float* c2 = ar.Zeros<float>(size_t(M) * N);
  const float* pb = ar.In(b);
  fast_->Matmul(c1, F32(ar.In(a)), F32(pb), nullptr, M, N, K, true, false, 0.0f, Compute::kBF16);
  fast_->Matmul(c2, F32(ar.In(at)), F32(pb), nullptr, M, N, K, false, false, 0.0f, Compute::kBF16);
  ExpectBitEqual(ar.Out(c1, size_t(M) * N), ar.Out(c2, size_t(M) * N), "cast-transposed A");
}

// A bf16 weight gradient with many output rows and a long enough reduction (the LM head's under bf16
// compute): the fast backend copies A's columns transposed into blocks of 8192 (two full blocks and a tail of
// 17 here, K with a tail of 3 rows past the 16 x 16 tiles) and multiplies them untransposed. The copy moves
// bits, so the product is the product of A transposed beforehand, bit for bit, and within bf16 bounds of the
// oracle. Without AVX-512 (an AVX2-only Zen 3) the blocks are not compiled in: the transposed and the
// untransposed A go through different oneDNN (or widened fp32) kernels whose sums run in different orders, so
// only the bounds hold there, and the bit-for-bit half is skipped, visibly.
TEST_F(FastOpsTest, MatmulBF16WeightGradientInTransposedBlocks) {
  const int M = 2 * 8192 + 17, N = 5, K = 515;
  const auto a = ToBF16(U(size_t(K) * M)), b = ToBF16(U(size_t(K) * N));
  const auto c0 = U(size_t(M) * N);
  std::vector<uint16_t> at(a.size());
  for (int k = 0; k < K; k++)
    for (int m = 0; m < M; m++) at[size_t(m) * K + k] = a[size_t(k) * M + m];
  for (float beta : {0.0f, 1.0f}) {
    Check(
        [&](Backend& be) {
          Arena ar(be);
          float* c = ar.In(c0);
          be.Matmul(c, BF16(ar.In(a)), BF16(ar.In(b)), nullptr, M, N, K, true, false, beta, Compute::kBF16);
          return Outputs{ar.Out(c, c0.size())};
        },
        1e-3, 1e-4, "beta=" + std::to_string(beta));
    Arena ar(*fast_);
    float* c1 = ar.In(c0);
    float* c2 = ar.In(c0);
    const uint16_t* pb = ar.In(b);
    fast_->Matmul(c1, BF16(ar.In(a)), BF16(pb), nullptr, M, N, K, true, false, beta, Compute::kBF16);
    fast_->Matmul(c2, BF16(ar.In(at)), BF16(pb), nullptr, M, N, K, false, false, beta, Compute::kBF16);
#if defined(__AVX512F__)
    ExpectBitEqual(ar.Out(c1, c0.size()), ar.Out(c2, c0.size()), "blocks vs pre-transposed A");
#endif
  }
#if !defined(__AVX512F__)
  GTEST_SKIP() << "bounds checked; the blocked path (and its bit-for-bit claim) needs AVX-512";
#endif
}

// The fp32 shapes the fast backend reshapes for oneDNN: a long reduction into a small product (computed as
// C^T = B^T A^T, then transposed) and a weight gradient with many output rows (A transposed in 2048-column
// blocks: 8 full blocks and a tail of 17, K with a tail of 3 rows past the 16 x 16 tiles).
TEST_F(FastOpsTest, MatmulF32ReshapedProducts) {
  struct Case {
    int M, N, K;
    bool ta;
  };
  for (Case s : {Case{9, 7, 300, false}, Case{16401, 5, 259, true}}) {
    auto a = U(size_t(s.M) * s.K), b = U(size_t(s.K) * s.N), c0 = U(size_t(s.M) * s.N);
    for (float beta : {0.0f, 1.0f}) {
      Check(
          [&](Backend& be) {
            Arena ar(be);
            float* c = ar.In(c0);
            be.Matmul(c, F32(ar.In(a)), F32(ar.In(b)), nullptr, s.M, s.N, s.K, s.ta, false, beta,
                      Compute::kF32);
            return Outputs{ar.Out(c, c0.size())};
          },
          1e-5, 1e-5,
          "M=" + std::to_string(s.M) + " ta=" + std::to_string(s.ta) + " beta=" + std::to_string(beta));
    }
  }
}

// A long reduction (K = GPT-2's vocabulary, few outputs), where oneDNN may split K across threads: still
// bit-identical from run to run.
TEST_F(FastOpsTest, MatmulLongReductionIsDeterministic) {
  const int M = 64, N = 96, K = 50257;
  auto a = U(size_t(M) * K), b = U(size_t(K) * N);
  for (Compute compute : {Compute::kF32, Compute::kBF16}) {
    std::vector<float> first;
    for (int run = 0; run < 2; run++) {
      Arena ar(*fast_);
      float* c = ar.Zeros<float>(size_t(M) * N);
      fast_->Matmul(c, F32(ar.In(a)), F32(ar.In(b)), nullptr, M, N, K, false, false, 0.0f, compute);
      auto out = ar.Out(c, size_t(M) * N);
      if (run == 0) first = out;
      ExpectBitEqual(out, first, std::string("long reduction ") + ComputeName(compute));
    }
  }
}

TEST_F(FastOpsTest, MatmulCachesPrimitivesAndAvoidsReferenceKernels) {
  CpuFastBackend fb;
  auto a = U(7 * 5), b = U(5 * 13);
  Arena ar(fb);
  float* c = ar.Zeros<float>(7 * 13);
  const float *pa = ar.In(a), *pb = ar.In(b);
  for (int i = 0; i < 3; i++)
    fb.Matmul(c, F32(pa), F32(pb), nullptr, 7, 13, 5, false, false, 0.0f, Compute::kF32);
  EXPECT_EQ(fb.dnnl().CachedPrimitives(), 1u);
  fb.Matmul(c, F32(pa), F32(pb), nullptr, 7, 13, 5, false, false, 1.0f, Compute::kF32);
  EXPECT_EQ(fb.dnnl().CachedPrimitives(), 2u);
  // What oneDNN can pick depends on the CPU: bf16 kernels need AVX512-BF16 or AMX (without them tern falls
  // back, and says so), and the prepacked brgemm kernels need AVX-512. Nowhere a reference kernel.
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool native_bf16 = __builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16");
  for (DType d : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(d == DType::kF32 ? "f32" : "bf16");
    std::string impl = fb.dnnl().ImplName(d, false, 256, 50257, 768, false, true, 0.0f);
    if (d == DType::kBF16 && !native_bf16) {
      EXPECT_TRUE(impl.empty()) << "no AVX512-BF16/AMX, yet oneDNN has a bf16 kernel: " << impl;
      continue;
    }
    EXPECT_FALSE(impl.empty());
    EXPECT_EQ(impl.find("ref"), std::string::npos) << impl;
    impl = fb.dnnl().ImplName(d, false, 50257, 768, 256, false, false, 1.0f);  // the head's dweight
    EXPECT_EQ(impl.find("ref"), std::string::npos) << impl;
    if (avx512) {
      EXPECT_NE(impl.find("prepacked"), std::string::npos) << impl;
    }
  }
}

// ---- embedding, layernorm, bias ----------------------------------------------------------------------

TEST_F(FastOpsTest, Encoder) {
  struct Case {
    int B, T, C, V;
  };
  for (Case s : {Case{3, 7, 13, 37}, Case{4, 64, 96, 50}}) {
    auto inp = Tokens(rng_, size_t(s.B) * s.T, s.V);
    auto wte = U(size_t(s.V) * s.C), wpe = U(size_t(s.T) * s.C), dout = U(size_t(s.B) * s.T * s.C);
    auto dwte0 = U(size_t(s.V) * s.C), dwpe0 = U(size_t(s.T) * s.C);
    Check(
        [&](Backend& be) {
          Arena ar(be);
          const size_t n = size_t(s.B) * s.T * s.C;
          float* out = ar.Zeros<float>(n);
          float *dwte = ar.In(dwte0), *dwpe = ar.In(dwpe0);
          const int32_t* pi = ar.In(inp);
          be.EncoderForward(out, pi, ar.In(wte), ar.In(wpe), s.B, s.T, s.C);
          be.EncoderBackward(dwte, dwpe, ar.In(dout), pi, nullptr, s.B, s.T, s.C);
          return Outputs{ar.Out(out, n), ar.Out(dwte, wte.size()), ar.Out(dwpe, wpe.size())};
        },
        0.0, 0.0, "encoder C=" + std::to_string(s.C));
  }
}

TEST_F(FastOpsTest, LayerNorm) {
  struct Case {
    int N, C;
  };
  for (Case s : {Case{5, 13}, Case{64, 768}, Case{33, 1000}}) {
    const size_t n = size_t(s.N) * s.C;
    auto inp = U(n, -2.0f, 3.0f), w = U(s.C), b = U(s.C), dout = U(n), dinp0 = U(n), dw0 = U(s.C),
         db0 = U(s.C);
    Check(
        [&](Backend& be) {
          Arena ar(be);
          float *out = ar.Zeros<float>(n), *mean = ar.Zeros<float>(s.N), *rstd = ar.Zeros<float>(s.N);
          float *dinp = ar.In(dinp0), *dw = ar.In(dw0), *db = ar.In(db0);
          const float *pi = ar.In(inp), *pw = ar.In(w);
          be.LayerNormForward(out, mean, rstd, pi, pw, ar.In(b), s.N, s.C);
          be.LayerNormBackward(dinp, dw, db, ar.In(dout), pi, pw, mean, rstd, s.N, s.C);
          return Outputs{ar.Out(out, n),  ar.Out(mean, s.N), ar.Out(rstd, s.N),
                         ar.Out(dinp, n), ar.Out(dw, s.C),   ar.Out(db, s.C)};
        },
        1e-5, 1e-6, "layernorm C=" + std::to_string(s.C));
  }
}

TEST_F(FastOpsTest, BiasBackward) {
  struct Case {
    int N, OC;
  };
  for (Case s : {Case{5, 13}, Case{256, 2311}}) {
    auto dout = U(size_t(s.N) * s.OC), db0 = U(s.OC);
    Check(
        [&](Backend& be) {
          Arena ar(be);
          float* db = ar.In(db0);
          be.BiasBackward(db, ar.In(dout), s.N, s.OC);
          return Outputs{ar.Out(db, s.OC)};
        },
        0.0, 0.0, "bias backward OC=" + std::to_string(s.OC));
  }
}

// The GELU epilogues (the MLP's fc forward, the fcproj input gradient): fast vs reference on odd shapes in
// fp32 and bf16, and on each backend the epilogue is its unfused ops bit for bit (Matmul then GeluForward;
// Matmul then GeluBackward, in place or not: the model relies on both).
TEST_F(FastOpsTest, MatmulGeluEpilogues) {
  struct S {
    int M, N, K;
  };
  for (S s : {S{7, 37, 13}, S{33, 96, 64}, S{1, 3, 1}})
    for (Compute compute : {Compute::kF32, Compute::kBF16}) {
      const std::string what = "M=" + std::to_string(s.M) + " N=" + std::to_string(s.N) +
                               " K=" + std::to_string(s.K) + " " + ComputeName(compute);
      const size_t nc = static_cast<size_t>(s.M) * s.N;
      auto a = U(static_cast<size_t>(s.M) * s.K, -2, 2), w = U(static_cast<size_t>(s.N) * s.K, -2, 2),
           bias = U(s.N), dy = U(static_cast<size_t>(s.M) * s.K), w2 = U(static_cast<size_t>(s.K) * s.N);
      auto run = [&](Backend& be) {
        Arena ar(be);
        float *out = ar.Zeros<float>(nc), *pre = ar.Zeros<float>(nc), *din = ar.Zeros<float>(nc);
        // forward: pre = a w^T + bias, out = gelu(pre); backward: din = gelu'(pre) * (dy w2), w2 [K, N]
        be.MatmulGelu(out, pre, F32(ar.In(a)), F32(ar.In(w)), ar.In(bias), s.M, s.N, s.K, false, true,
                      compute);
        be.MatmulDGelu(din, pre, F32(ar.In(dy)), F32(ar.In(w2)), s.M, s.N, s.K, false, false, compute);
        // The same through the unfused ops.
        float *pre2 = ar.Zeros<float>(nc), *out2 = ar.Zeros<float>(nc), *prod = ar.Zeros<float>(nc),
              *din2 = ar.Zeros<float>(nc);
        be.Matmul(pre2, F32(ar.In(a)), F32(ar.In(w)), ar.In(bias), s.M, s.N, s.K, false, true, 0.0f, compute);
        be.GeluForward(out2, pre2, nc);
        be.Matmul(prod, F32(ar.In(dy)), F32(ar.In(w2)), nullptr, s.M, s.N, s.K, false, false, 0.0f, compute);
        be.GeluBackward(din2, pre2, prod, nc);
        be.GeluBackward(prod, pre2, prod, nc);  // in place
        ExpectBitEqual(ar.Out(pre, nc), ar.Out(pre2, nc), be.name() + " pre-activation " + what);
        ExpectBitEqual(ar.Out(out, nc), ar.Out(out2, nc), be.name() + " gelu " + what);
        ExpectBitEqual(ar.Out(din, nc), ar.Out(din2, nc), be.name() + " dgelu " + what);
        ExpectBitEqual(ar.Out(prod, nc), ar.Out(din2, nc), be.name() + " in-place gelu backward " + what);
        // The bf16 GELU output: the same pre-activation, and the fp32 GELU rounded to bf16.
        float* pre3 = ar.Zeros<float>(nc);
        uint16_t* out16 = ar.Zeros<uint16_t>(nc);
        be.MatmulGeluBF16(out16, pre3, F32(ar.In(a)), F32(ar.In(w)), ar.In(bias), s.M, s.N, s.K, false, true,
                          compute);
        ExpectBitEqual(ar.Out(pre3, nc), ar.Out(pre2, nc), be.name() + " bf16 gelu's pre-activation " + what);
        const std::vector<float> g32 = ar.Out(out2, nc);
        const std::vector<uint16_t> g16 = ar.Out(out16, nc);
        size_t wrong = 0;
        for (size_t i = 0; i < nc; i++) wrong += g16[i] != F32ToBF16(g32[i]);
        EXPECT_EQ(wrong, 0u) << be.name() << " bf16 gelu " << what;
        return Outputs{ar.Out(out, nc), ar.Out(pre, nc), ar.Out(din, nc)};
      };
      const bool bf16 = compute == Compute::kBF16;
      Check(run, bf16 ? 1e-3 : 1e-5, bf16 ? 1e-4 : 1e-6, "matmul gelu " + what);
    }
}

// ---- elementwise -------------------------------------------------------------------------------------

TEST_F(FastOpsTest, GeluAndAdd) {
  for (size_t n : {size_t(1001), size_t(100003)}) {
    auto x = U(n, -6.0f, 6.0f), y = U(n), dout = U(n);
    const float specials[] = {0.0f, -0.0f, 20.0f, -20.0f, 100.0f, -100.0f, 1e-3f, -1e-3f, -0.7517916f};
    for (size_t i = 0; i < std::size(specials); i++) x[i * 7] = specials[i];
    Check(
        [&](Backend& be) {
          Arena ar(be);
          float *out = ar.Zeros<float>(n), *dinp = ar.Zeros<float>(n);
          const float* px = ar.In(x);
          be.GeluForward(out, px, n);
          be.GeluBackward(dinp, px, ar.In(dout), n);
          return Outputs{ar.Out(out, n), ar.Out(dinp, n)};
        },
        1e-5, 1e-6, "gelu n=" + std::to_string(n));
    Check(
        [&](Backend& be) {
          Arena ar(be);
          float* out = ar.Zeros<float>(n);
          be.Add(out, ar.In(x), ar.In(y), n);
          return Outputs{ar.Out(out, n)};
        },
        0.0, 0.0, "add n=" + std::to_string(n));
    // GeluForwardBF16 is each backend's GeluForward rounded to bf16, bit for bit (threaded at 100003).
    for (Backend* be : {static_cast<Backend*>(fast_.get()), static_cast<Backend*>(ref_.get())}) {
      Arena ar(*be);
      const float* px = ar.In(x);
      float* out = ar.Zeros<float>(n);
      uint16_t* out16 = ar.Zeros<uint16_t>(n);
      be->GeluForward(out, px, n);
      be->GeluForwardBF16(out16, px, n);
      const std::vector<float> g32 = ar.Out(out, n);
      const std::vector<uint16_t> g16 = ar.Out(out16, n);
      size_t wrong = 0;
      for (size_t i = 0; i < n; i++) wrong += g16[i] != F32ToBF16(g32[i]);
      EXPECT_EQ(wrong, 0u) << be->name() << " bf16 gelu n=" << n;
    }
  }
}

// ---- attention ---------------------------------------------------------------------------------------

TEST_F(FastOpsTest, Attention) {
  struct Case {
    int B, T, C, NH;
  };
  const Case cases[] = {{2, 7, 24, 3},    {1, 1, 16, 2},  {2, 33, 96, 2}, {1, 64, 128, 2},
                        {2, 130, 192, 3}, {1, 20, 39, 3}, {3, 17, 96, 1}};
  for (Case s : cases) {
    const size_t nqkv = size_t(s.B) * s.T * 3 * s.C, nout = size_t(s.B) * s.T * s.C;
    const size_t natt = size_t(s.B) * s.NH * s.T * s.T;
    auto qkv = U(nqkv, -2.0f, 2.0f), dout = U(nout), garbage_att = U(natt, 5.0f, 6.0f), garbage_qkv = U(nqkv);
    Check(
        [&](Backend& be) {
          Arena ar(be);
          // att, datt and dqkv start as garbage: the ops must overwrite what they promise to
          float *out = ar.Zeros<float>(nout), *att = ar.In(garbage_att), *datt = ar.In(garbage_att);
          float* dqkv = ar.In(garbage_qkv);
          const float* pq = ar.In(qkv);
          be.AttentionForward(out, att, pq, s.B, s.T, s.C, s.NH, Compute::kF32);
          be.AttentionBackward(dqkv, datt, ar.In(dout), pq, out, att, s.B, s.T, s.C, s.NH, Compute::kF32);
          return Outputs{ar.Out(out, nout), ar.Out(att, natt), ar.Out(dqkv, nqkv)};
        },
        1e-5, 1e-5,
        "attention B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " C=" + std::to_string(s.C) +
            " NH=" + std::to_string(s.NH));
  }
}

// flash keeps two floats per score row instead of the probabilities and recomputes them in the backward:
// the same bits as naive (out and dqkv), from a state and scratch that start as garbage, at odd shapes.
TEST_F(FastOpsTest, FlashAttentionIsNaiveAttentionBitForBit) {
  auto flash = MakeCpuFastBackend();
  ASSERT_TRUE(flash->SetAttentionKernel("flash"));
  EXPECT_EQ(flash->attention_kind(), AttentionKind::kFlash);
  EXPECT_EQ(fast_->attention_kind(), AttentionKind::kNaive);
  EXPECT_FALSE(flash->SetAttentionKernel("cudnn"));
  EXPECT_EQ(flash->attention_kind(), AttentionKind::kFlash);  // a refused name changes nothing
  EXPECT_TRUE(flash->capabilities().HasAttentionKind("flash"));
  EXPECT_FALSE(ref_->capabilities().HasAttentionKind("flash"));
  EXPECT_FALSE(ref_->SetAttentionKernel("flash"));
  struct Case {
    int B, T, C, NH;
  };
  for (Case s :
       {Case{2, 7, 24, 3}, Case{1, 1, 16, 2}, Case{2, 130, 192, 3}, Case{1, 20, 39, 3}, Case{3, 17, 96, 1}}) {
    const std::string what = "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) +
                             " C=" + std::to_string(s.C) + " NH=" + std::to_string(s.NH);
    const size_t nqkv = size_t(s.B) * s.T * 3 * s.C, nout = size_t(s.B) * s.T * s.C;
    const AttentionMemory naive_mem =
                              AttentionStateBytes(AttentionKind::kNaive, s.B, s.T, s.C, s.NH, Compute::kF32),
                          flash_mem =
                              AttentionStateBytes(AttentionKind::kFlash, s.B, s.T, s.C, s.NH, Compute::kF32);
    EXPECT_EQ(naive_mem.state, size_t(s.B) * s.NH * s.T * s.T * 4) << what;
    EXPECT_EQ(naive_mem.scratch, naive_mem.state) << what;
    EXPECT_EQ(flash_mem.state, size_t(s.B) * s.NH * s.T * 2 * 4) << what;
    EXPECT_EQ(flash_mem.scratch, 0u) << what;
    // Enough garbage for either state: at T = 1 flash's two floats a row are more than naive's one.
    auto qkv = U(nqkv, -2.0f, 2.0f), dout = U(nout),
         garbage = U(std::max(naive_mem.state, flash_mem.state) / 4, 5.0f, 6.0f);
    auto run = [&](Backend& be, const AttentionMemory& mem) {
      Arena ar(be);
      std::vector<float> state_init(garbage.begin(), garbage.begin() + mem.state / 4);
      float* out = ar.Zeros<float>(nout);
      float* state = ar.In(state_init);
      float* scratch = mem.scratch ? ar.In(garbage) : nullptr;
      float* dqkv = ar.Zeros<float>(nqkv);
      const float* pq = ar.In(qkv);
      be.AttentionForward(out, state, pq, s.B, s.T, s.C, s.NH, Compute::kF32);
      be.AttentionBackward(dqkv, scratch, ar.In(dout), pq, out, state, s.B, s.T, s.C, s.NH, Compute::kF32);
      return Outputs{ar.Out(out, nout), ar.Out(dqkv, nqkv)};
    };
    const Outputs want = run(*fast_, naive_mem), got = run(*flash, flash_mem);
    for (size_t i = 0; i < want.size(); i++) {
      ASSERT_EQ(want[i].size(), got[i].size());
      EXPECT_EQ(0, std::memcmp(want[i].data(), got[i].data(), want[i].size() * sizeof(float)))
          << what << " output " << i;
    }
  }
}

// bf16 q, k, v and a bf16 output (bf16 compute's attention): on every CPU kernel (reference, fast naive, fast
// flash) the forward is the fp32 op on the widened values with its output rounded, and the backward the fp32
// op's gradients, bit for bit; fast against the reference within the fp32 op's bounds; state and scratch
// start as garbage.
TEST_F(FastOpsTest, AttentionOverBF16QkvIsTheFp32OpOnTheWidenedValues) {
  auto flash = MakeCpuFastBackend();
  ASSERT_TRUE(flash->SetAttentionKernel("flash"));
  struct Case {
    int B, T, C, NH;
  };
  for (Case s : {Case{2, 7, 24, 3}, Case{1, 1, 16, 2}, Case{2, 33, 96, 2}, Case{1, 20, 39, 3}}) {
    const std::string what = "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) +
                             " C=" + std::to_string(s.C) + " NH=" + std::to_string(s.NH);
    const size_t nqkv = size_t(s.B) * s.T * 3 * s.C, nout = size_t(s.B) * s.T * s.C;
    const std::vector<uint16_t> qkv16 = ToBF16(U(nqkv, -2.0f, 2.0f));
    std::vector<float> widened(nqkv);
    for (size_t i = 0; i < nqkv; i++) widened[i] = BF16ToF32(qkv16[i]);
    const auto dout = U(nout);
    std::vector<Outputs> bf16_runs;
    for (Backend* be : {static_cast<Backend*>(ref_.get()), static_cast<Backend*>(fast_.get()),
                        static_cast<Backend*>(flash.get())}) {
      const AttentionMemory mem =
          AttentionStateBytes(be->attention_kind(), s.B, s.T, s.C, s.NH, Compute::kBF16);
      const auto garbage = U(std::max<size_t>(mem.state, mem.scratch) / 4 + 1, 5.0f, 6.0f);
      Arena ar(*be);
      float *state32 = ar.In(garbage), *state16 = ar.In(garbage);
      float *scratch32 = ar.In(garbage), *scratch16 = ar.In(garbage);
      float* out32 = ar.Zeros<float>(nout);
      uint16_t* out16 = ar.Zeros<uint16_t>(nout);
      float *dqkv32 = ar.In(U(nqkv)), *dqkv16 = ar.In(U(nqkv));
      const float* pdout = ar.In(dout);
      const float* pq32 = ar.In(widened);
      const uint16_t* pq16 = ar.In(qkv16);
      be->AttentionForward(out32, state32, pq32, s.B, s.T, s.C, s.NH, Compute::kBF16);
      be->AttentionForwardBF16(out16, state16, pq16, s.B, s.T, s.C, s.NH, Compute::kBF16);
      be->AttentionBackward(dqkv32, scratch32, pdout, pq32, out32, state32, s.B, s.T, s.C, s.NH,
                            Compute::kBF16);
      be->AttentionBackwardBF16(dqkv16, scratch16, pdout, pq16, out16, state16, s.B, s.T, s.C, s.NH,
                                Compute::kBF16);
      const auto o32 = ar.Out(out32, nout);
      const auto o16 = ar.Out(out16, nout);
      for (size_t i = 0; i < nout; i++)
        ASSERT_EQ(o16[i], F32ToBF16(o32[i])) << be->name() << " " << what << " out " << i;
      const auto d32 = ar.Out(dqkv32, nqkv), d16 = ar.Out(dqkv16, nqkv);
      ExpectBitEqual(d16, d32, be->name() + " " + what + " dqkv");
      std::vector<float> o16w(nout);
      for (size_t i = 0; i < nout; i++) o16w[i] = BF16ToF32(o16[i]);
      bf16_runs.push_back(Outputs{o16w, d16});
    }
    // fast (naive and flash) against the reference: the output one bf16 rounding apart at most.
    for (size_t r = 1; r < bf16_runs.size(); r++) {
      ExpectClose(bf16_runs[r][0], bf16_runs[0][0], 1e-2, 1e-5, what + " out vs reference");
      ExpectClose(bf16_runs[r][1], bf16_runs[0][1], 1e-5, 1e-5, what + " dqkv vs reference");
    }
    ExpectBitEqual(bf16_runs[2][0], bf16_runs[1][0], what + " flash out is naive's");
    ExpectBitEqual(bf16_runs[2][1], bf16_runs[1][1], what + " flash dqkv is naive's");
  }
}

// ---- loss, reductions, optimizer, cast ---------------------------------------------------------------

TEST_F(FastOpsTest, CrossEntropy) {
  struct Case {
    int N, V;
    float dloss;
  };
  for (Case s : {Case{5, 37, 0.1f}, Case{4, 50257, 1.0f / 8}, Case{3, 50257, 0.0f}, Case{1, 13, 1.0f}}) {
    auto logits = U(size_t(s.N) * s.V, -4.0f, 4.0f);
    auto targets = Tokens(rng_, s.N, s.V);
    if (s.N > 1) targets[1] = -1;  // ignored position
    Check(
        [&](Backend& be) {
          Arena ar(be);
          float *pl = ar.In(logits), *losses = ar.Zeros<float>(s.N);
          be.CrossEntropyForwardBackward(losses, pl, ar.In(targets), s.N, s.V, s.dloss);
          return Outputs{ar.Out(losses, s.N), ar.Out(pl, logits.size())};
        },
        1e-5, 1e-7, "cross-entropy V=" + std::to_string(s.V) + " dloss=" + std::to_string(s.dloss));
  }
}

// The bf16 variant (bf16 logits in, their bf16 gradient written over them): the fp32 op's losses on the
// widened logits and its gradient rounded to bf16, bit for bit, on the fast backend (rows widened per thread)
// and the reference; an ignored position's gradient is zero; dloss 0 leaves the logits as they were.
TEST_F(FastOpsTest, CrossEntropyOverBF16LogitsIsTheFp32OpOnTheWidenedLogits) {
  const int N = 6, V = 5003;
  std::vector<uint16_t> logits16(size_t(N) * V);
  std::vector<float> widened(logits16.size());
  const auto logits = U(logits16.size(), -4.0f, 4.0f);
  for (size_t i = 0; i < logits.size(); i++) {
    logits16[i] = F32ToBF16(logits[i]);
    widened[i] = BF16ToF32(logits16[i]);
  }
  auto targets = Tokens(rng_, N, V);
  targets[2] = -1;
  for (Backend* be : {static_cast<Backend*>(fast_.get()), static_cast<Backend*>(ref_.get())}) {
    for (float dloss : {1.0f / 8, 0.0f}) {
      Arena ar(*be);
      float* l32 = ar.In(widened);
      uint16_t* l16 = ar.In(logits16);
      float *loss32 = ar.Zeros<float>(N), *loss16 = ar.Zeros<float>(N);
      const int32_t* pt = ar.In(targets);
      be->CrossEntropyForwardBackward(loss32, l32, pt, N, V, dloss);
      be->CrossEntropyForwardBackwardBF16(loss16, l16, pt, N, V, dloss);
      ExpectBitEqual(ar.Out(loss16, N), ar.Out(loss32, N), "losses");
      const auto got = ar.Out(l16, logits16.size());
      if (dloss == 0.0f) {
        EXPECT_EQ(got, logits16) << "dloss 0 writes no gradient";
        continue;
      }
      const auto g32 = ar.Out(l32, size_t(N) * V);
      for (size_t i = 0; i < got.size(); i++) ASSERT_EQ(got[i], F32ToBF16(g32[i])) << "element " << i;
      for (int i = 0; i < V; i++) ASSERT_EQ(got[size_t(2) * V + i], 0) << "ignored position";
    }
  }
}

// The layer norm output in bf16 (bf16 compute's ln1, ln2, lnf): the fp32 op's output rounded, bit for bit,
// and the same statistics (odd C; rows past the parallel threshold).
TEST_F(FastOpsTest, LayerNormForwardBF16IsTheRoundedFp32Output) {
  for (auto [N, C] : {std::pair{5, 77}, std::pair{2049, 385}}) {
    const auto x = U(size_t(N) * C, -3.0f, 3.0f), w = U(C, 0.5f, 1.5f), b = U(C, -0.2f, 0.2f);
    for (Backend* be : {static_cast<Backend*>(fast_.get()), static_cast<Backend*>(ref_.get())}) {
      Arena ar(*be);
      const float *px = ar.In(x), *pw = ar.In(w), *pb = ar.In(b);
      float* out = ar.Zeros<float>(x.size());
      uint16_t* out16 = ar.Zeros<uint16_t>(x.size());
      float *m = ar.Zeros<float>(N), *r = ar.Zeros<float>(N), *m16 = ar.Zeros<float>(N),
            *r16 = ar.Zeros<float>(N);
      be->LayerNormForward(out, m, r, px, pw, pb, N, C);
      be->LayerNormForwardBF16(out16, m16, r16, px, pw, pb, N, C);
      ExpectBitEqual(ar.Out(m16, N), ar.Out(m, N), "mean");
      ExpectBitEqual(ar.Out(r16, N), ar.Out(r, N), "rstd");
      const auto want = ar.Out(out, x.size());
      const auto got = ar.Out(out16, x.size());
      for (size_t i = 0; i < got.size(); i++) ASSERT_EQ(got[i], F32ToBF16(want[i])) << be->name() << " " << i;
    }
  }
}

// The fused residual add + layer norm: Add, then the layer norm (fp32 or bf16 output), bit for bit, on the
// fast backend (one pass) and the reference (the Backend default: the two ops).
TEST_F(FastOpsTest, ResidualLayerNormForwardIsAddThenLayerNorm) {
  for (auto [N, C] : {std::pair{3, 45}, std::pair{2049, 385}}) {
    const size_t n = size_t(N) * C;
    const auto a = U(n, -3.0f, 3.0f), b = U(n, -1.0f, 1.0f), w = U(C, 0.5f, 1.5f), bias = U(C, -0.2f, 0.2f);
    for (Backend* be : {static_cast<Backend*>(fast_.get()), static_cast<Backend*>(ref_.get())}) {
      Arena ar(*be);
      const float *pa = ar.In(a), *pb = ar.In(b), *pw = ar.In(w), *pbias = ar.In(bias);
      float *res = ar.Zeros<float>(n), *out = ar.Zeros<float>(n), *m = ar.Zeros<float>(N),
            *r = ar.Zeros<float>(N);
      be->Add(res, pa, pb, n);
      be->LayerNormForward(out, m, r, res, pw, pbias, N, C);
      float *res2 = ar.Zeros<float>(n), *out2 = ar.Zeros<float>(n), *m2 = ar.Zeros<float>(N),
            *r2 = ar.Zeros<float>(N), *res3 = ar.Zeros<float>(n), *m3 = ar.Zeros<float>(N),
            *r3 = ar.Zeros<float>(N);
      uint16_t* out3 = ar.Zeros<uint16_t>(n);
      be->ResidualLayerNormForward(res2, out2, m2, r2, pa, pb, pw, pbias, N, C);
      be->ResidualLayerNormForwardBF16(res3, out3, m3, r3, pa, pb, pw, pbias, N, C);
      const auto want = ar.Out(out, n);
      for (float* got : {res2, res3}) ExpectBitEqual(ar.Out(got, n), ar.Out(res, n), "residual");
      for (float* got : {m2, m3}) ExpectBitEqual(ar.Out(got, N), ar.Out(m, N), "mean");
      for (float* got : {r2, r3}) ExpectBitEqual(ar.Out(got, N), ar.Out(r, N), "rstd");
      ExpectBitEqual(ar.Out(out2, n), want, "output");
      const auto got16 = ar.Out(out3, n);
      for (size_t i = 0; i < n; i++) ASSERT_EQ(got16[i], F32ToBF16(want[i])) << be->name() << " " << i;
    }
  }
}

// The head's logits under bf16 compute: the product rounded to bf16 as it is stored, against the fp32
// product rounded (odd shapes; a transposed B as the head's weight); with a bias (the qkv projection), the
// sum rounded once. oneDNN accumulates in its own order, so an element may round the other way when the fp32
// sums differ in their last bits: at most one bf16 ulp.
TEST_F(FastOpsTest, MatmulToBF16IsTheRoundedProduct) {
  for (auto [M, N, K] : {std::tuple{7, 1001, 45}, std::tuple{33, 5003, 96}}) {
    const auto a = U(size_t(M) * K), b = U(size_t(N) * K), bias = U(N, -4.0f, 4.0f);
    for (Backend* be : {static_cast<Backend*>(fast_.get()), static_cast<Backend*>(ref_.get())}) {
      std::vector<uint16_t> without_bias;
      for (bool with_bias : {false, true}) {
        Arena ar(*be);
        const float *pa = ar.In(a), *pb = ar.In(b), *pbias = with_bias ? ar.In(bias) : nullptr;
        float* c32 = ar.Zeros<float>(size_t(M) * N);
        uint16_t* c16 = ar.Zeros<uint16_t>(size_t(M) * N);
        be->Matmul(c32, F32(pa), F32(pb), pbias, M, N, K, false, true, 0.0f, Compute::kBF16);
        be->MatmulToBF16(c16, F32(pa), F32(pb), pbias, M, N, K, false, true, Compute::kBF16);
        const auto want = ar.Out(c32, size_t(M) * N);
        const auto got = ar.Out(c16, size_t(M) * N);
        int off = 0;
        for (size_t i = 0; i < got.size(); i++) {
          const int d = std::abs(int(got[i]) - int(F32ToBF16(want[i])));
          ASSERT_LE(d, 1) << be->name() << " bias " << with_bias << " element " << i;
          off += d;
        }
        EXPECT_LE(off, int(got.size() / 100)) << be->name() << ": most elements round as the fp32 product";
        if (!with_bias) {
          without_bias = got;
          continue;
        }
        int same = 0;  // the bias is in: most elements differ from the product without it
        for (size_t i = 0; i < got.size(); i++) same += without_bias[i] == got[i];
        EXPECT_LT(same, int(got.size() / 10)) << be->name();
      }
    }
  }
}

TEST_F(FastOpsTest, SumAndSumSquares) {
  for (size_t n : {size_t(0), size_t(1), size_t(17), size_t(1 << 20) + 3}) {
    auto x = U(n + 1, -3.0f, 2.0f);
    Arena ar_ref(*ref_), ar_fast(*fast_);
    const float *xr = ar_ref.In(x), *xf = ar_fast.In(x);
    const double sq = ref_->SumSquares(xr, n), s = ref_->Sum(xr, n);
    EXPECT_NEAR(fast_->SumSquares(xf, n), sq, 1e-12 * (std::fabs(sq) + 1)) << n;
    EXPECT_NEAR(fast_->Sum(xf, n), s, 1e-12 * (std::fabs(sq) + 1)) << n;
    EXPECT_EQ(fast_->SumSquares(xf, n), fast_->SumSquares(xf, n));
    EXPECT_EQ(fast_->Sum(xf, n), fast_->Sum(xf, n));
  }
}

// The fp32 state must match the reference to float rounding; the bf16 copy must be the rounded new parameter.
TEST_F(FastOpsTest, AdamW) {
  for (size_t n : {size_t(1001), size_t(100003)}) {
    auto p0 = U(n), g = U(n, -0.1f, 0.1f), m0 = U(n, -0.01f, 0.01f), v0 = U(n, 0.0f, 1e-4f);
    for (bool with_bf16 : {false, true}) {
      for (int t : {1, 10}) {
        Check(
            [&](Backend& be) {
              Arena ar(be);
              float *p = ar.In(p0), *m = ar.In(m0), *v = ar.In(v0);
              uint16_t* p16 = with_bf16 ? ar.Zeros<uint16_t>(n) : nullptr;
              be.AdamW(p, p16, ar.In(g), m, v, n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t);
              Outputs outs{ar.Out(p, n), ar.Out(m, n), ar.Out(v, n)};
              if (p16) {
                auto copy = ar.Out(p16, n);
                for (size_t i = 0; i < n; i++) EXPECT_EQ(copy[i], F32ToBF16(outs[0][i])) << i;
              }
              return outs;
            },
            1e-6, 0.0,
            "adamw n=" + std::to_string(n) + " t=" + std::to_string(t) +
                " bf16=" + std::to_string(with_bf16));
      }
    }
  }
}

TEST_F(FastOpsTest, CastF32ToBF16MatchesReferenceExactly) {
  auto x = U(100003, -1e3f, 1e3f);
  const uint32_t bits[] = {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7f800000u, 0xff800000u,
                           0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x7f7fffffu,
                           0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7f7f8000u};
  for (size_t i = 0; i < std::size(bits); i++) std::memcpy(&x[i * 3], &bits[i], 4);
  for (size_t n : {size_t(50), x.size()}) {
    std::vector<uint16_t> want, got;
    for (Backend* be : {ref_.get(), fast_.get()}) {
      Arena ar(*be);
      uint16_t* out = ar.Zeros<uint16_t>(n);
      be->CastF32ToBF16(out, ar.In(x), n);
      (be == ref_.get() ? want : got) = ar.Out(out, n);
    }
    ExpectBitEqual(got, want, "cast n=" + std::to_string(n));
  }
}

}  // namespace
}  // namespace tern
