// The fused flash-attention kernels (attention_flash.cu, train.attention=flash) against the CPU reference at
// odd shapes (head sizes 1, 12, 16, 48, 64, 128; T not a multiple of the tiles), fp32, bf16 and fp16.
// Written without a GPU: run on the next GPU session (scripts/gpu-check).
//
// Bounds (rel-max error over the tensor), as the naive path's: fp32 1e-4; bf16 out 3e-2, dqkv 6e-2; fp16 out
// 1e-2, dqkv 2e-2. Also: the logsumexp row statistics against a double-precision host computation, nothing of
// att beyond its first B*NH*T floats is written (no T x T matrix), and the backward repeats bit for bit.
#include <cmath>

#include "testing/cuda.h"

namespace tern::testing {
namespace {

// lse[b, h, t] = log sum_{t2 <= t} exp(scale * q_t . k_t2), in double.
std::vector<double> HostLse(const std::vector<float>& qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  std::vector<double> out(static_cast<size_t>(B) * NH * T);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        std::vector<double> s(t + 1);
        double m = -INFINITY;
        for (int t2 = 0; t2 <= t; t2++) {
          double acc = 0;
          for (int d = 0; d < hs; d++)
            acc += static_cast<double>(qkv[(static_cast<size_t>(b) * T + t) * 3 * C + h * hs + d]) *
                   qkv[(static_cast<size_t>(b) * T + t2) * 3 * C + C + h * hs + d];
          s[t2] = acc * scale;
          m = std::max(m, s[t2]);
        }
        double sum = 0;
        for (double x : s) sum += std::exp(x - m);
        out[(static_cast<size_t>(b) * NH + h) * T + t] = m + std::log(sum);
      }
  return out;
}

TEST_F(CudaVsReference, FlashAttentionMatchesTheReference) {
  ASSERT_TRUE(gpu_->SetAttentionKernel("flash"));
  EXPECT_FALSE(gpu_->SetAttentionKernel("bogus"));
  struct S {
    int B, T, C, NH;
  };
  for (S s : {S{2, 13, 36, 3}, S{1, 64, 64, 4}, S{3, 5, 8, 8}, S{2, 71, 96, 2}, S{1, 40, 256, 2},
              S{2, 33, 192, 3}}) {
    for (Compute compute : {Compute::kF32, Compute::kBF16, Compute::kF16}) {
      SCOPED_TRACE(::testing::Message() << "B=" << s.B << " T=" << s.T << " C=" << s.C << " NH=" << s.NH
                                        << " compute=" << ComputeName(compute));
      const size_t N = static_cast<size_t>(s.B) * s.T, natt = static_cast<size_t>(s.B) * s.NH * s.T * s.T;
      const size_t nlse = static_cast<size_t>(s.B) * s.NH * s.T;
      const std::vector<float> hqkv = Random(N * 3 * s.C);
      Twin qkv = Make(hqkv), out = Make(std::vector<float>(N * s.C)),
           att = Make(std::vector<float>(natt, 7.0f));
      ref_->AttentionForward(out.ref.as<float>(), att.ref.as<float>(), qkv.ref.as<float>(), s.B, s.T, s.C,
                             s.NH, Compute::kF32);
      gpu_->AttentionForward(out.gpu.as<float>(), att.gpu.as<float>(), qkv.gpu.as<float>(), s.B, s.T, s.C,
                             s.NH, compute);
      const bool f32 = compute == Compute::kF32, f16 = compute == Compute::kF16;
      EXPECT_LT(RelMaxError(Gpu<float>(out), Ref<float>(out)), f32 ? 1e-4 : f16 ? 1e-2 : 3e-2);
      const std::vector<float> att_gpu = Gpu<float>(att);
      const std::vector<double> lse = HostLse(hqkv, s.B, s.T, s.C, s.NH);
      double lse_err = 0;
      for (size_t i = 0; i < nlse; i++) lse_err = std::max(lse_err, std::fabs(att_gpu[i] - lse[i]));
      EXPECT_LT(lse_err, f32 ? 1e-4 : 5e-2) << "logsumexp rows";
      for (size_t i = nlse; i < natt; i++) ASSERT_EQ(att_gpu[i], 7.0f) << "flash must not materialise att";

      Twin dout = Make(Random(N * s.C)), dqkv = Make(std::vector<float>(N * 3 * s.C, 1e30f)),
           datt = Make(std::vector<float>(natt, -5.0f));
      ref_->AttentionBackward(dqkv.ref.as<float>(), datt.ref.as<float>(), dout.ref.as<float>(),
                              qkv.ref.as<float>(), out.ref.as<float>(), att.ref.as<float>(), s.B, s.T, s.C,
                              s.NH, Compute::kF32);
      gpu_->AttentionBackward(dqkv.gpu.as<float>(), datt.gpu.as<float>(), dout.gpu.as<float>(),
                              qkv.gpu.as<float>(), out.gpu.as<float>(), att.gpu.as<float>(), s.B, s.T, s.C,
                              s.NH, compute);
      const std::vector<float> first = Gpu<float>(dqkv);
      EXPECT_LT(RelMaxError(first, Ref<float>(dqkv)), f32 ? 1e-4 : f16 ? 2e-2 : 6e-2);
      gpu_->AttentionBackward(dqkv.gpu.as<float>(), datt.gpu.as<float>(), dout.gpu.as<float>(),
                              qkv.gpu.as<float>(), out.gpu.as<float>(), att.gpu.as<float>(), s.B, s.T, s.C,
                              s.NH, compute);
      EXPECT_TRUE(BitwiseEqual(Gpu<float>(dqkv), first)) << "the backward must be deterministic";
    }
  }
  ASSERT_TRUE(gpu_->SetAttentionKernel("naive"));
}

}  // namespace
}  // namespace tern::testing
