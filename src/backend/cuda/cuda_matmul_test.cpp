// Matmul (every transpose combination, fp32 and bf16 compute, fp32 and bf16 operands, bias, beta, odd and
// unaligned shapes that take the cublasGemmEx fallback) and causal attention, CUDA vs the CPU reference.
//
// Bounds (rel-max error = max |got - want| / max |want| over the tensor):
//   Matmul fp32 compute            5e-5  (true fp32 GEMM, no TF32; the reference accumulates in double)
//   Matmul bf16 / fp16 compute     2e-4  (both sides round operands to bf16 / fp16 identically; fp32
//   accumulation) Attention fp32  out / dqkv     1e-4;  probabilities 1e-6 absolute Attention bf16  out /
//   dqkv     3e-2 / 6e-2; probabilities 2e-2 absolute (bf16 q, k, v, dout, att) Attention fp16  out / dqkv
//   1e-2 / 2e-2; probabilities 1e-2 absolute (fp16 q, k, v, dout, att)
#include <cmath>

#include "testing/cuda.h"

namespace tern::testing {
namespace {

TEST_F(CudaVsReference, MatmulAllLayoutsAndPrecisions) {
  struct S {
    int M, N, K;
  };
  int cases = 0;
  for (S s : {S{37, 29, 53}, S{64, 96, 128}, S{1, 7, 3}, S{130, 17, 1}, S{256, 384, 192}}) {
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (Compute compute : {Compute::kF32, Compute::kBF16, Compute::kF16})
          for (int bf16_b = 0; bf16_b < 2; bf16_b++)
            for (int with_bias = 0; with_bias < 2; with_bias++)
              for (float beta : {0.0f, 1.0f}) {
                // Unaligned operands (one element in) on the odd shapes: exercises the fallback path.
                const int off = (s.M % 2) ? 1 : 0;
                SCOPED_TRACE(::testing::Message()
                             << "M=" << s.M << " N=" << s.N << " K=" << s.K << " ta=" << ta << " tb=" << tb
                             << " compute=" << ComputeName(compute) << " bf16_b=" << bf16_b
                             << " bias=" << with_bias << " beta=" << beta << " offset=" << off);
                const size_t na = static_cast<size_t>(s.M) * s.K, nb = static_cast<size_t>(s.K) * s.N,
                             nc = static_cast<size_t>(s.M) * s.N;
                Twin a = Make(Random(na + off)), b = Make(Random(nb + off)), c = Make(Random(nc + off)),
                     bias = Make(Random(s.N + off)), b16 = Make(std::vector<uint16_t>(nb + off));
                for (Backend* be : {ref_.get(), gpu_.get()}) {
                  const bool g = be == gpu_.get();
                  auto P = [&](Twin& t) { return (g ? t.gpu.as<float>() : t.ref.as<float>()) + off; };
                  uint16_t* pb16 = (g ? b16.gpu.as<uint16_t>() : b16.ref.as<uint16_t>()) + off;
                  Operand ob = F32(P(b));
                  if (bf16_b) {
                    be->CastF32ToBF16(pb16, P(b), nb);
                    ob = BF16(pb16);
                  }
                  be->Matmul(P(c), F32(P(a)), ob, with_bias ? P(bias) : nullptr, s.M, s.N, s.K, ta, tb, beta,
                             compute);
                }
                std::vector<float> got = Gpu<float>(c), want = Ref<float>(c);
                got.erase(got.begin(), got.begin() + off);
                want.erase(want.begin(), want.begin() + off);
                const double bound = compute == Compute::kF32 ? 5e-5 : 2e-4;
                EXPECT_LT(RelMaxError(got, want), bound);
                cases++;
              }
  }
  EXPECT_EQ(cases, 5 * 2 * 2 * 3 * 2 * 2 * 2);
}

// The GELU epilogues (cuBLASLt's GELU_AUX(_BIAS) and DGELU, or the unfused ops where cuBLASLt takes no plan:
// N = 37 is not a multiple of 8) against the reference's unfused ops. Bounds: the matmul's, plus GELU's
// (tanhf vs libm, 1e-5 relative) on outputs of order one.
TEST_F(CudaVsReference, MatmulGeluEpilogues) {
  struct S {
    int M, N, K;
  };
  for (S s : {S{64, 96, 128}, S{37, 37, 53}, S{256, 3072, 768}})
    for (Compute compute : {Compute::kF32, Compute::kBF16, Compute::kF16})
      for (int with_bias = 0; with_bias < 2; with_bias++) {
        SCOPED_TRACE(::testing::Message() << "M=" << s.M << " N=" << s.N << " K=" << s.K
                                          << " compute=" << ComputeName(compute) << " bias=" << with_bias);
        const size_t nc = static_cast<size_t>(s.M) * s.N;
        Twin a = Make(Random(static_cast<size_t>(s.M) * s.K)),
             w = Make(Random(static_cast<size_t>(s.N) * s.K)), bias = Make(Random(s.N)),
             dy = Make(Random(static_cast<size_t>(s.M) * s.K)),
             w2 = Make(Random(static_cast<size_t>(s.K) * s.N)), out = Make(std::vector<float>(nc)),
             pre = Make(std::vector<float>(nc)), din = Make(std::vector<float>(nc));
        for (Backend* be : {ref_.get(), gpu_.get()}) {
          const bool g = be == gpu_.get();
          auto P = [&](Twin& t) { return g ? t.gpu.as<float>() : t.ref.as<float>(); };
          be->MatmulGelu(P(out), P(pre), F32(P(a)), F32(P(w)), with_bias ? P(bias) : nullptr, s.M, s.N, s.K,
                         false, true, compute);
          be->MatmulDGelu(P(din), P(pre), F32(P(dy)), F32(P(w2)), s.M, s.N, s.K, false, false, compute);
        }
        const double bound = compute == Compute::kF32 ? 1e-4 : 2e-3;
        EXPECT_LT(RelMaxError(Gpu<float>(pre), Ref<float>(pre)), bound) << "pre-activation";
        EXPECT_LT(RelMaxError(Gpu<float>(out), Ref<float>(out)), bound) << "gelu";
        EXPECT_LT(RelMaxError(Gpu<float>(din), Ref<float>(din)), bound) << "dgelu";
      }
}

// fp16 operands above 65504 become inf (as on the CPU): the overflow the fp16 loss scaler must see.
TEST_F(CudaVsReference, MatmulFp16OverflowIsInf) {
  const int M = 4, N = 8, K = 16;
  std::vector<float> ha = Random(M * K);
  ha[3] = 70000.0f;  // row 0
  Twin a = Make(ha), b = Make(Random(N * K)), c = Make(std::vector<float>(M * N));
  gpu_->Matmul(c.gpu.as<float>(), F32(a.gpu.as<float>()), F32(b.gpu.as<float>()), nullptr, M, N, K, false,
               true, 0.0f, Compute::kF16);
  std::vector<float> got = Gpu<float>(c);
  EXPECT_FALSE(std::isfinite(got[0]));
  for (int i = N; i < M * N; i++) EXPECT_TRUE(std::isfinite(got[i])) << i;
}

// Sets the attention GEMM precision (it follows the compute type of the most recent Matmul).
TEST_F(CudaVsReference, CausalAttentionForwardBackward) {
  struct S {
    int B, T, C, NH;
  };
  for (S s : {S{2, 13, 36, 3}, S{1, 64, 64, 4}, S{3, 5, 8, 8}, S{2, 128, 96, 2}}) {
    for (Compute compute : {Compute::kF32, Compute::kBF16, Compute::kF16}) {
      SCOPED_TRACE(::testing::Message() << "B=" << s.B << " T=" << s.T << " C=" << s.C << " NH=" << s.NH
                                        << " compute=" << ComputeName(compute));
      const size_t N = static_cast<size_t>(s.B) * s.T, natt = static_cast<size_t>(s.B) * s.NH * s.T * s.T;
      Twin qkv = Make(Random(N * 3 * s.C)), out = Make(std::vector<float>(N * s.C)),
           att = Make(std::vector<float>(natt, 7.0f));
      ref_->AttentionForward(out.ref.as<float>(), att.ref.as<float>(), qkv.ref.as<float>(), s.B, s.T, s.C,
                             s.NH, Compute::kF32);
      gpu_->AttentionForward(out.gpu.as<float>(), att.gpu.as<float>(), qkv.gpu.as<float>(), s.B, s.T, s.C,
                             s.NH, compute);
      const bool f32 = compute == Compute::kF32, f16 = compute == Compute::kF16;
      std::vector<float> att_gpu = Gpu<float>(att);
      EXPECT_LT(RelMaxError(Gpu<float>(out), Ref<float>(out)), f32 ? 1e-4 : f16 ? 1e-2 : 3e-2);
      EXPECT_TRUE(AllClose(att_gpu, Ref<float>(att), f32 ? 1e-6 : f16 ? 1e-2 : 2e-2, 0));
      for (size_t r = 0; r < natt / s.T; r++)  // above the diagonal: exactly zero
        for (int t2 = static_cast<int>(r % s.T) + 1; t2 < s.T; t2++) ASSERT_EQ(att_gpu[r * s.T + t2], 0.0f);

      // dqkv starts as garbage: the backward must overwrite every element.
      Twin dout = Make(Random(N * s.C)), dqkv = Make(std::vector<float>(N * 3 * s.C, 1e30f)),
           datt = Make(std::vector<float>(natt, -5.0f));
      ref_->AttentionBackward(dqkv.ref.as<float>(), datt.ref.as<float>(), dout.ref.as<float>(),
                              qkv.ref.as<float>(), out.ref.as<float>(), att.ref.as<float>(), s.B, s.T, s.C,
                              s.NH, Compute::kF32);
      gpu_->AttentionBackward(dqkv.gpu.as<float>(), datt.gpu.as<float>(), dout.gpu.as<float>(),
                              qkv.gpu.as<float>(), out.gpu.as<float>(), att.gpu.as<float>(), s.B, s.T, s.C,
                              s.NH, compute);
      EXPECT_LT(RelMaxError(Gpu<float>(dqkv), Ref<float>(dqkv)), f32 ? 1e-4 : f16 ? 2e-2 : 6e-2);
    }
  }
}

}  // namespace
}  // namespace tern::testing
