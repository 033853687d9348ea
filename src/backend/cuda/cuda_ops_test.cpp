// Every CUDA op against the CPU reference on random inputs, odd shapes included (matmul and attention are in
// cuda_matmul_test.cpp, same binary). Skipped with "skipped: no GPU" where no GPU is visible.
//
// Bounds (atol + rtol * |want| per element unless stated):
//   exact ops (encoder forward, Add, casts, memory)       bitwise equal
//   layernorm, encoder gradients (fp32 sums)              1e-4 + 1e-4
//   bias gradient (fp32 sums over up to 4097 rows)       5e-4 + 1e-4
//   GELU forward / backward (tanhf, coshf vs libm)        1e-6 + 1e-5
//   cross-entropy loss / gradient                         1e-5 + 1e-5 / 1e-7 + 1e-4
//   Sum, SumSquares (double accumulation)                 1e-10 of the sum of |terms|
//   AdamW parameters and moments                          1e-7 + 1e-6; bf16 copy = RNE of its own fp32 value
// Determinism: encoder backward, reductions: bitwise equal across two runs.
#include <cmath>
#include <limits>
#include <tuple>

#include "backend/bf16.h"
#include "testing/cuda.h"

namespace tern::testing {
namespace {

TEST_F(CudaVsReference, MemoryAllocIsZeroAndCopiesRoundTrip) {
  const size_t n = (1 << 18) + 3;
  DeviceBuffer a(gpu_.get(), n * sizeof(float)), b(gpu_.get(), n * sizeof(float));
  std::vector<float> host(n);
  gpu_->Download(host.data(), a.data(), n * sizeof(float));
  for (size_t i = 0; i < n; i++) ASSERT_EQ(host[i], 0.0f) << i;
  std::vector<float> src = Random(n);
  gpu_->Upload(a.data(), src.data(), n * sizeof(float));
  gpu_->Copy(b.data(), a.data(), n * sizeof(float));
  gpu_->Zero(b.as<float>() + 5, 7 * sizeof(float));
  gpu_->Download(host.data(), b.data(), n * sizeof(float));
  for (size_t i = 0; i < n; i++) ASSERT_EQ(host[i], i >= 5 && i < 12 ? 0.0f : src[i]) << i;
  gpu_->Synchronize();
}

TEST_F(CudaVsReference, EncoderForwardBackwardDeterministic) {
  struct S {
    int B, T, C, V;
  };
  for (S s : {S{3, 13, 37, 29}, S{2, 64, 768, 50}, S{4, 7, 5, 3}}) {
    SCOPED_TRACE(::testing::Message() << "B=" << s.B << " T=" << s.T << " C=" << s.C << " V=" << s.V);
    const size_t N = static_cast<size_t>(s.B) * s.T;
    Twin inp = Make(RandomInts(N, s.V)), wte = Make(Random(s.V * s.C)), wpe = Make(Random(s.T * s.C));
    Twin out = Make(std::vector<float>(N * s.C));
    ref_->EncoderForward(out.ref.as<float>(), inp.ref.as<int32_t>(), wte.ref.as<float>(), wpe.ref.as<float>(),
                         s.B, s.T, s.C);
    gpu_->EncoderForward(out.gpu.as<float>(), inp.gpu.as<int32_t>(), wte.gpu.as<float>(), wpe.gpu.as<float>(),
                         s.B, s.T, s.C);
    EXPECT_TRUE(BitwiseEqual(Gpu<float>(out), Ref<float>(out)));

    Twin dout = Make(Random(N * s.C));
    std::vector<float> dwte0 = Random(s.V * s.C), dwpe0 = Random(s.T * s.C);
    Twin dwte = Make(dwte0), dwpe = Make(dwpe0);
    ref_->EncoderBackward(dwte.ref.as<float>(), dwpe.ref.as<float>(), dout.ref.as<float>(),
                          inp.ref.as<int32_t>(), nullptr, s.B, s.T, s.C);
    gpu_->EncoderBackward(dwte.gpu.as<float>(), dwpe.gpu.as<float>(), dout.gpu.as<float>(),
                          inp.gpu.as<int32_t>(), nullptr, s.B, s.T, s.C);
    std::vector<float> first_wte = Gpu<float>(dwte), first_wpe = Gpu<float>(dwpe);
    EXPECT_TRUE(AllClose(first_wte, Ref<float>(dwte), 1e-4, 1e-4));
    EXPECT_TRUE(AllClose(first_wpe, Ref<float>(dwpe), 1e-4, 1e-4));
    // Again from the same start: bitwise the same.
    gpu_->Upload(dwte.gpu.data(), dwte0.data(), dwte.bytes);
    gpu_->Upload(dwpe.gpu.data(), dwpe0.data(), dwpe.bytes);
    gpu_->EncoderBackward(dwte.gpu.as<float>(), dwpe.gpu.as<float>(), dout.gpu.as<float>(),
                          inp.gpu.as<int32_t>(), nullptr, s.B, s.T, s.C);
    EXPECT_TRUE(BitwiseEqual(Gpu<float>(dwte), first_wte));
    EXPECT_TRUE(BitwiseEqual(Gpu<float>(dwpe), first_wpe));
    // With the host copy of the ids (no download, no stream synchronisation): the same bits, twice in a row
    // (the second call reuses the pinned buckets the first one's uploads read).
    const std::vector<int32_t> host_ids = Ref<int32_t>(inp);
    for (int again = 0; again < 2; again++) {
      gpu_->Upload(dwte.gpu.data(), dwte0.data(), dwte.bytes);
      gpu_->Upload(dwpe.gpu.data(), dwpe0.data(), dwpe.bytes);
      gpu_->EncoderBackward(dwte.gpu.as<float>(), dwpe.gpu.as<float>(), dout.gpu.as<float>(),
                            inp.gpu.as<int32_t>(), host_ids.data(), s.B, s.T, s.C);
      EXPECT_TRUE(BitwiseEqual(Gpu<float>(dwte), first_wte));
      EXPECT_TRUE(BitwiseEqual(Gpu<float>(dwpe), first_wpe));
    }
  }
}

TEST_F(CudaVsReference, LayerNormForwardBackward) {
  struct S {
    int N, C;
  };
  for (S s : {S{37, 77}, S{64, 768}, S{7, 1}, S{300, 33}}) {
    SCOPED_TRACE(::testing::Message() << "N=" << s.N << " C=" << s.C);
    std::vector<float> x = Random(static_cast<size_t>(s.N) * s.C, 2.0f);
    for (auto& v : x) v += 0.5f;
    Twin inp = Make(x), w = Make(Random(s.C)), b = Make(Random(s.C));
    Twin out = Make(std::vector<float>(x.size())), mean = Make(std::vector<float>(s.N)),
         rstd = Make(std::vector<float>(s.N));
    for (Backend* be : {ref_.get(), gpu_.get()}) {
      bool g = be == gpu_.get();
      auto P = [&](Twin& t) { return g ? t.gpu.as<float>() : t.ref.as<float>(); };
      be->LayerNormForward(P(out), P(mean), P(rstd), P(inp), P(w), P(b), s.N, s.C);
    }
    EXPECT_TRUE(AllClose(Gpu<float>(out), Ref<float>(out), 1e-4, 1e-4));
    EXPECT_TRUE(AllClose(Gpu<float>(mean), Ref<float>(mean), 1e-5, 1e-5));
    EXPECT_TRUE(AllClose(Gpu<float>(rstd), Ref<float>(rstd), 1e-5, 1e-4));

    Twin dout = Make(Random(x.size())), dinp = Make(Random(x.size())), dw = Make(Random(s.C)),
         db = Make(Random(s.C));
    for (Backend* be : {ref_.get(), gpu_.get()}) {
      bool g = be == gpu_.get();
      auto P = [&](Twin& t) { return g ? t.gpu.as<float>() : t.ref.as<float>(); };
      be->LayerNormBackward(P(dinp), P(dw), P(db), P(dout), P(inp), P(w), P(mean), P(rstd), s.N, s.C);
    }
    EXPECT_TRUE(AllClose(Gpu<float>(dinp), Ref<float>(dinp), 1e-4, 1e-4));
    EXPECT_TRUE(AllClose(Gpu<float>(dw), Ref<float>(dw), 1e-4, 1e-4));
    EXPECT_TRUE(AllClose(Gpu<float>(db), Ref<float>(db), 1e-4, 1e-4));
  }
}

TEST_F(CudaVsReference, BiasBackward) {
  struct S {
    int N, OC;
  };
  for (S s : {S{1000, 37}, S{5, 3072}, S{1, 1}, S{4097, 65}}) {
    SCOPED_TRACE(::testing::Message() << "N=" << s.N << " OC=" << s.OC);
    Twin dout = Make(Random(static_cast<size_t>(s.N) * s.OC)), dbias = Make(Random(s.OC));
    ref_->BiasBackward(dbias.ref.as<float>(), dout.ref.as<float>(), s.N, s.OC);
    gpu_->BiasBackward(dbias.gpu.as<float>(), dout.gpu.as<float>(), s.N, s.OC);
    EXPECT_TRUE(AllClose(Gpu<float>(dbias), Ref<float>(dbias), 5e-4, 1e-4));
  }
}

TEST_F(CudaVsReference, GeluAndAdd) {
  const size_t n = 100003;
  Twin inp = Make(Random(n, 3.0f)), dout = Make(Random(n)), other = Make(Random(n));
  Twin out = Make(std::vector<float>(n)), dinp = Make(std::vector<float>(n));
  ref_->GeluForward(out.ref.as<float>(), inp.ref.as<float>(), n);
  gpu_->GeluForward(out.gpu.as<float>(), inp.gpu.as<float>(), n);
  EXPECT_TRUE(AllClose(Gpu<float>(out), Ref<float>(out), 1e-6, 1e-5));
  ref_->GeluBackward(dinp.ref.as<float>(), inp.ref.as<float>(), dout.ref.as<float>(), n);
  gpu_->GeluBackward(dinp.gpu.as<float>(), inp.gpu.as<float>(), dout.gpu.as<float>(), n);
  EXPECT_TRUE(AllClose(Gpu<float>(dinp), Ref<float>(dinp), 1e-6, 1e-5));
  ref_->Add(out.ref.as<float>(), inp.ref.as<float>(), other.ref.as<float>(), n);
  gpu_->Add(out.gpu.as<float>(), inp.gpu.as<float>(), other.gpu.as<float>(), n);
  EXPECT_TRUE(BitwiseEqual(Gpu<float>(out), Ref<float>(out)));
  // The bf16 GELU output is the GPU's own fp32 GELU rounded to bf16, bit for bit.
  Twin out16 = Make(std::vector<uint16_t>(n));
  gpu_->GeluForward(out.gpu.as<float>(), inp.gpu.as<float>(), n);
  gpu_->GeluForwardBF16(out16.gpu.as<uint16_t>(), inp.gpu.as<float>(), n);
  const std::vector<float> g32 = Gpu<float>(out);
  const std::vector<uint16_t> g16 = Gpu<uint16_t>(out16);
  size_t wrong = 0;
  for (size_t i = 0; i < n; i++) wrong += g16[i] != F32ToBF16(g32[i]);
  EXPECT_EQ(wrong, 0u);
}

TEST_F(CudaVsReference, CrossEntropyForwardBackward) {
  struct S {
    int N, V;
  };
  for (S s : {S{5, 50257}, S{9, 13}, S{3, 1}}) {
    for (float dloss : {0.0f, 0.37f}) {
      SCOPED_TRACE(::testing::Message() << "N=" << s.N << " V=" << s.V << " dloss=" << dloss);
      std::vector<float> x = Random(static_cast<size_t>(s.N) * s.V, 3.0f);
      std::vector<int32_t> tg = RandomInts(s.N, s.V);
      tg[std::min(2, s.N - 1)] = -1;  // ignored position
      Twin logits = Make(x), targets = Make(tg), losses = Make(std::vector<float>(s.N));
      ref_->CrossEntropyForwardBackward(losses.ref.as<float>(), logits.ref.as<float>(),
                                        targets.ref.as<int32_t>(), s.N, s.V, dloss);
      gpu_->CrossEntropyForwardBackward(losses.gpu.as<float>(), logits.gpu.as<float>(),
                                        targets.gpu.as<int32_t>(), s.N, s.V, dloss);
      EXPECT_TRUE(AllClose(Gpu<float>(losses), Ref<float>(losses), 1e-5, 1e-5));
      if (dloss == 0.0f) {
        EXPECT_TRUE(BitwiseEqual(Gpu<float>(logits), x));  // untouched
      } else {
        EXPECT_TRUE(AllClose(Gpu<float>(logits), Ref<float>(logits), 1e-7, 1e-4));
      }
    }
  }
}

// The bf16 layer norm output is the GPU's own fp32 output rounded, bit for bit, with the same statistics.
TEST_F(CudaVsReference, LayerNormForwardBF16) {
  const int N = 37, C = 771;
  Twin x = Make(Random(static_cast<size_t>(N) * C, 3.0f)), w = Make(Random(C)), b = Make(Random(C));
  Twin out = Make(std::vector<float>(static_cast<size_t>(N) * C));
  Twin out16 = Make(std::vector<uint16_t>(static_cast<size_t>(N) * C));
  Twin m = Make(std::vector<float>(N)), r = Make(std::vector<float>(N)), m16 = Make(std::vector<float>(N)),
       r16 = Make(std::vector<float>(N));
  gpu_->LayerNormForward(out.gpu.as<float>(), m.gpu.as<float>(), r.gpu.as<float>(), x.gpu.as<float>(),
                         w.gpu.as<float>(), b.gpu.as<float>(), N, C);
  gpu_->LayerNormForwardBF16(out16.gpu.as<uint16_t>(), m16.gpu.as<float>(), r16.gpu.as<float>(),
                             x.gpu.as<float>(), w.gpu.as<float>(), b.gpu.as<float>(), N, C);
  EXPECT_TRUE(BitwiseEqual(Gpu<float>(m16), Gpu<float>(m)));
  EXPECT_TRUE(BitwiseEqual(Gpu<float>(r16), Gpu<float>(r)));
  const std::vector<float> g32 = Gpu<float>(out);
  const std::vector<uint16_t> g16 = Gpu<uint16_t>(out16);
  size_t wrong = 0;
  for (size_t i = 0; i < g16.size(); i++) wrong += g16[i] != F32ToBF16(g32[i]);
  EXPECT_EQ(wrong, 0u);
}

// The fused residual add + layer norm is the GPU's own Add then layer norm, bit for bit (fp32 output).
TEST_F(CudaVsReference, ResidualLayerNormForward) {
  const int N = 37, C = 771;
  const size_t n = static_cast<size_t>(N) * C;
  Twin a = Make(Random(n, 3.0f)), b = Make(Random(n)), w = Make(Random(C)), bias = Make(Random(C));
  Twin res = Make(std::vector<float>(n)), out = Make(std::vector<float>(n)), m = Make(std::vector<float>(N)),
       r = Make(std::vector<float>(N));
  Twin res2 = Make(std::vector<float>(n)), out2 = Make(std::vector<float>(n)),
       m2 = Make(std::vector<float>(N)), r2 = Make(std::vector<float>(N));
  gpu_->Add(res.gpu.as<float>(), a.gpu.as<float>(), b.gpu.as<float>(), n);
  gpu_->LayerNormForward(out.gpu.as<float>(), m.gpu.as<float>(), r.gpu.as<float>(), res.gpu.as<float>(),
                         w.gpu.as<float>(), bias.gpu.as<float>(), N, C);
  gpu_->ResidualLayerNormForward(res2.gpu.as<float>(), out2.gpu.as<float>(), m2.gpu.as<float>(),
                                 r2.gpu.as<float>(), a.gpu.as<float>(), b.gpu.as<float>(), w.gpu.as<float>(),
                                 bias.gpu.as<float>(), N, C);
  EXPECT_TRUE(BitwiseEqual(Gpu<float>(res2), Gpu<float>(res)));
  EXPECT_TRUE(BitwiseEqual(Gpu<float>(out2), Gpu<float>(out)));
  EXPECT_TRUE(BitwiseEqual(Gpu<float>(m2), Gpu<float>(m)));
  EXPECT_TRUE(BitwiseEqual(Gpu<float>(r2), Gpu<float>(r)));
}

// bf16 logits (bf16 compute's LM head): the GPU's loss over the widened logits and its bf16 gradient,
// against the GPU's own fp32 op on the widened logits (bit for bit), and the reference within bounds.
TEST_F(CudaVsReference, CrossEntropyOverBF16Logits) {
  const int N = 5, V = 50257;
  std::vector<float> x = Random(static_cast<size_t>(N) * V, 3.0f);
  std::vector<uint16_t> x16(x.size());
  for (size_t i = 0; i < x.size(); i++) {
    x16[i] = F32ToBF16(x[i]);
    x[i] = BF16ToF32(x16[i]);
  }
  std::vector<int32_t> tg = RandomInts(N, V);
  tg[2] = -1;
  Twin l32 = Make(x), l16 = Make(x16), targets = Make(tg), loss32 = Make(std::vector<float>(N)),
       loss16 = Make(std::vector<float>(N));
  gpu_->CrossEntropyForwardBackward(loss32.gpu.as<float>(), l32.gpu.as<float>(), targets.gpu.as<int32_t>(), N,
                                    V, 0.25f);
  gpu_->CrossEntropyForwardBackwardBF16(loss16.gpu.as<float>(), l16.gpu.as<uint16_t>(),
                                        targets.gpu.as<int32_t>(), N, V, 0.25f);
  ref_->CrossEntropyForwardBackwardBF16(loss16.ref.as<float>(), l16.ref.as<uint16_t>(),
                                        targets.ref.as<int32_t>(), N, V, 0.25f);
  EXPECT_TRUE(BitwiseEqual(Gpu<float>(loss16), Gpu<float>(loss32)));
  EXPECT_TRUE(AllClose(Gpu<float>(loss16), Ref<float>(loss16), 1e-5, 1e-5));
  const std::vector<float> g32 = Gpu<float>(l32);
  const std::vector<uint16_t> g16 = Gpu<uint16_t>(l16);
  size_t wrong = 0;
  for (size_t i = 0; i < g16.size(); i++) wrong += g16[i] != F32ToBF16(g32[i]);
  EXPECT_EQ(wrong, 0u);
}

// MatmulToBF16 (bf16 compute): the product stored as bf16 by cuBLASLt (aligned N) or cublasGemmEx (N =
// 50257), within one bf16 ulp of the GPU's fp32 product rounded. With a bias (the qkv projection: cuBLASLt's
// BIAS epilogue with a bf16 D, or the default's fp32 product and cast), the sum rounded once.
TEST_F(CudaVsReference, MatmulToBF16) {
  for (auto [M, N, K] : {std::tuple{64, 512, 128}, std::tuple{33, 50257, 96}, std::tuple{64, 2304, 768}}) {
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE(::testing::Message() << M << "x" << N << "x" << K << " bias " << with_bias);
      Twin a = Make(Random(static_cast<size_t>(M) * K)), b = Make(Random(static_cast<size_t>(N) * K));
      Twin bias = Make(Random(static_cast<size_t>(N)));
      const float* pbias = with_bias ? bias.gpu.as<float>() : nullptr;
      Twin c32 = Make(std::vector<float>(static_cast<size_t>(M) * N));
      Twin c16 = Make(std::vector<uint16_t>(static_cast<size_t>(M) * N));
      gpu_->Matmul(c32.gpu.as<float>(), F32(a.gpu.as<float>()), F32(b.gpu.as<float>()), pbias, M, N, K, false,
                   true, 0.0f, Compute::kBF16);
      gpu_->MatmulToBF16(c16.gpu.as<uint16_t>(), F32(a.gpu.as<float>()), F32(b.gpu.as<float>()), pbias, M, N,
                         K, false, true, Compute::kBF16);
      const std::vector<float> want = Gpu<float>(c32);
      const std::vector<uint16_t> got = Gpu<uint16_t>(c16);
      size_t far = 0;
      for (size_t i = 0; i < got.size(); i++) far += std::abs(int(got[i]) - int(F32ToBF16(want[i]))) > 1;
      EXPECT_EQ(far, 0u);
    }
  }
}

// Attention over bf16 qkv with a bf16 output (naive, flash and, where cuDNN loads, cudnn kernels, bf16
// compute): the fp32-interface op on the widened values, its output rounded, and the same gradients, bit for
// bit (the kernels round q, k, v to bf16 for their products either way; cuDNN's fp32 interface rounds the
// output it is handed back to the very bits its forward wrote).
TEST_F(CudaVsReference, AttentionOverBF16QkvIsTheFp32OpOnTheWidenedValues) {
  for (const char* kind : {"naive", "flash", "cudnn"}) {
    if (!gpu_->SetAttentionKernel(kind)) {
      ASSERT_STREQ(kind, "cudnn") << "naive and flash are always there";
      continue;  // no cuDNN on this machine: cuda_cudnn_test.cpp says so as a skip
    }
    for (auto [B, T, C, NH] : {std::tuple{2, 13, 36, 3}, std::tuple{1, 64, 768, 12}}) {
      SCOPED_TRACE(::testing::Message() << kind << " B=" << B << " T=" << T << " C=" << C << " NH=" << NH);
      const size_t N = static_cast<size_t>(B) * T;
      std::vector<uint16_t> h16(N * 3 * C);
      std::vector<float> hw(h16.size());
      const std::vector<float> r = Random(h16.size());
      for (size_t i = 0; i < h16.size(); i++) {
        h16[i] = F32ToBF16(r[i]);
        hw[i] = BF16ToF32(h16[i]);
      }
      const AttentionMemory mem = AttentionStateBytes(gpu_->attention_kind(), B, T, C, NH, Compute::kBF16);
      const size_t st = mem.state / 4 + 1, sc = mem.scratch / 4 + 1;
      Twin q16 = Make(h16), q32 = Make(hw), dout = Make(Random(N * C));
      Twin out32 = Make(std::vector<float>(N * C)), out16 = Make(std::vector<uint16_t>(N * C));
      Twin s32 = Make(std::vector<float>(st)), s16 = Make(std::vector<float>(st));
      Twin x32 = Make(std::vector<float>(sc)), x16 = Make(std::vector<float>(sc));
      Twin d32 = Make(std::vector<float>(N * 3 * C)), d16 = Make(std::vector<float>(N * 3 * C));
      gpu_->AttentionForward(out32.gpu.as<float>(), s32.gpu.as<float>(), q32.gpu.as<float>(), B, T, C, NH,
                             Compute::kBF16);
      gpu_->AttentionForwardBF16(out16.gpu.as<uint16_t>(), s16.gpu.as<float>(), q16.gpu.as<uint16_t>(), B, T,
                                 C, NH, Compute::kBF16);
      gpu_->AttentionBackward(d32.gpu.as<float>(), x32.gpu.as<float>(), dout.gpu.as<float>(),
                              q32.gpu.as<float>(), out32.gpu.as<float>(), s32.gpu.as<float>(), B, T, C, NH,
                              Compute::kBF16);
      gpu_->AttentionBackwardBF16(d16.gpu.as<float>(), x16.gpu.as<float>(), dout.gpu.as<float>(),
                                  q16.gpu.as<uint16_t>(), out16.gpu.as<uint16_t>(), s16.gpu.as<float>(), B, T,
                                  C, NH, Compute::kBF16);
      const std::vector<float> o32 = Gpu<float>(out32);
      const std::vector<uint16_t> o16 = Gpu<uint16_t>(out16);
      for (size_t i = 0; i < o16.size(); i++) ASSERT_EQ(o16[i], F32ToBF16(o32[i])) << i;
      EXPECT_EQ(Gpu<float>(d16), Gpu<float>(d32));
    }
  }
  ASSERT_TRUE(gpu_->SetAttentionKernel("naive"));
}

// AccumulateMean keeps the loss sum on the device: acc += float(Sum / divisor), as the host would add it.
TEST_F(CudaVsReference, AccumulateMeanIsTheHostsArithmetic) {
  const std::vector<float> x = Random(100003);
  Twin xs = Make(x), acc = Make(std::vector<double>{0.25});
  double want = 0.25;
  for (int i = 0; i < 3; i++) {
    gpu_->AccumulateMean(acc.gpu.as<double>(), xs.gpu.as<float>(), x.size() - i, 7.0);
    want += static_cast<float>(gpu_->Sum(xs.gpu.as<float>(), x.size() - i) / 7.0);
  }
  EXPECT_EQ(Gpu<double>(acc)[0], want);
}

TEST_F(CudaVsReference, SumAndSumSquaresDeterministic) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{1000003}}) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    std::vector<float> x = Random(n);
    double abs_sum = 0, sq_sum = 0;
    for (float v : x) {
      abs_sum += std::fabs(v);
      sq_sum += static_cast<double>(v) * v;
    }
    Twin t = Make(x);
    const double s = gpu_->Sum(t.gpu.as<float>(), n), q = gpu_->SumSquares(t.gpu.as<float>(), n);
    EXPECT_NEAR(s, ref_->Sum(t.ref.as<float>(), n), 1e-10 * abs_sum + 1e-12);
    EXPECT_NEAR(q, ref_->SumSquares(t.ref.as<float>(), n), 1e-10 * sq_sum + 1e-12);
    EXPECT_EQ(s, gpu_->Sum(t.gpu.as<float>(), n));
    EXPECT_EQ(q, gpu_->SumSquares(t.gpu.as<float>(), n));
  }
}

TEST_F(CudaVsReference, AdamW) {
  const size_t n = 1001;
  for (int t : {1, 7}) {
    for (bool with_bf16 : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "t=" << t << " bf16=" << with_bf16);
      std::vector<float> v0 = Random(n, 0.01f);
      for (auto& v : v0) v = std::fabs(v);
      Twin p = Make(Random(n)), g = Make(Random(n)), m = Make(Random(n, 0.1f)), v = Make(v0);
      Twin p16 = Make(std::vector<uint16_t>(n));
      for (Backend* be : {ref_.get(), gpu_.get()}) {
        bool gp = be == gpu_.get();
        auto P = [&](Twin& x) { return gp ? x.gpu.as<float>() : x.ref.as<float>(); };
        uint16_t* copy = with_bf16 ? (gp ? p16.gpu.as<uint16_t>() : p16.ref.as<uint16_t>()) : nullptr;
        be->AdamW(P(p), copy, P(g), P(m), P(v), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, t);
      }
      std::vector<float> got = Gpu<float>(p);
      EXPECT_TRUE(AllClose(got, Ref<float>(p), 1e-7, 1e-6));
      EXPECT_TRUE(AllClose(Gpu<float>(m), Ref<float>(m), 1e-7, 1e-6));
      EXPECT_TRUE(AllClose(Gpu<float>(v), Ref<float>(v), 1e-9, 1e-6));
      std::vector<uint16_t> copy = Gpu<uint16_t>(p16);
      for (size_t i = 0; i < n; i++) ASSERT_EQ(copy[i], with_bf16 ? F32ToBF16(got[i]) : 0) << i;
    }
  }
}

TEST_F(CudaVsReference, CastF32ToBF16RoundsToNearestEven) {
  std::vector<float> x = Random(4099, 100.0f);
  const float specials[] = {0.0f,
                            -0.0f,
                            1.00390625f,
                            1.01171875f,
                            -1.00390625f,
                            3.3e38f,
                            -3.4e38f,
                            1e-40f,
                            -1e-45f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            65504.0f,
                            1.0f / 3.0f};
  x.insert(x.end(), std::begin(specials), std::end(specials));
  Twin src = Make(x), dst = Make(std::vector<uint16_t>(x.size()));
  ref_->CastF32ToBF16(dst.ref.as<uint16_t>(), src.ref.as<float>(), x.size());
  gpu_->CastF32ToBF16(dst.gpu.as<uint16_t>(), src.gpu.as<float>(), x.size());
  std::vector<uint16_t> got = Gpu<uint16_t>(dst), want = Ref<uint16_t>(dst);
  for (size_t i = 0; i < x.size(); i++) ASSERT_EQ(got[i], want[i]) << "x = " << x[i];
}

}  // namespace
}  // namespace tern::testing
