// fp16 conversions and fp16 matmuls on the CPU: the plain conversion (fp16.h) agrees bit for bit with the
// hardware one (F16C) everywhere that matters (normals, subnormals, the overflow edge, inf, NaN), the
// vectorised rounding equals the scalar one, and the fast backend wrapped by WithF16Emulation multiplies
// like the reference does with Compute::kF16.
#include "backend/fp16.h"

#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/f16_emulation.h"

namespace tern {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::vector<float> Interesting() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,
                          65519.99f,
                          65520.0f,
                          -65520.0f,
                          1e9f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          6.103515625e-05f /* 2^-14 */,
                          6.1e-05f,
                          5.9604645e-08f /* 2^-24 */,
                          2.98e-08f,
                          2.9802322e-08f /* 2^-25: a tie, rounds to 0 */,
                          8.9406967e-08f /* 1.5 * 2^-24 */,
                          1.0009765625f /* 1 + 2^-10 */,
                          1.00048828125f /* tie, to even: 1 */,
                          1.00146484375f /* tie, to even: 1 + 2^-9 */,
                          1e-30f,
                          3.14159265f,
                          -2.71828f};
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 200000; i++) {
    float f;
    uint32_t u = any(rng);
    std::memcpy(&f, &u, 4);
    if (!std::isnan(f)) v.push_back(f);
  }
  std::uniform_real_distribution<float> e(-26.0f, 17.0f);
  for (int i = 0; i < 200000; i++) v.push_back((i % 2 ? 1 : -1) * std::exp2(e(rng)));
  return v;
}

TEST(Fp16, PlainConversionMatchesTheHardware) {
#if defined(__F16C__)
  for (float f : Interesting()) {
    const uint16_t hw = _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    ASSERT_EQ(F32ToF16(f), hw) << f << " (bits " << std::hex << Bits(f) << ")";
    ASSERT_EQ(Bits(F16ToF32(hw)), Bits(_cvtsh_ss(hw))) << std::hex << hw;
  }
#else
  GTEST_SKIP() << "skipped: this build has no F16C (compile with -mf16c or -march=native)";
#endif
  EXPECT_TRUE(std::isnan(RoundToF16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(RoundToF16(65504.0f), 65504.0f);
  EXPECT_EQ(RoundToF16(65519.0f), 65504.0f);
  EXPECT_TRUE(std::isinf(RoundToF16(65520.0f)));  // the overflow the loss scaler detects
  EXPECT_EQ(RoundToF16(1e-8f), 0.0f);             // below half the smallest subnormal: underflow to zero
}

TEST(Fp16, VectorisedRoundingEqualsScalar) {
  std::vector<float> in = Interesting();
  in.resize(100003);  // an odd length: the scalar tail runs too
  std::vector<float> out(in.size());
  RoundToF16Array(out.data(), in.data(), in.size());
  for (size_t i = 0; i < in.size(); i++) ASSERT_EQ(Bits(out[i]), Bits(RoundToF16(in[i]))) << in[i];
}

// C = A[M,K] * B[N,K]^T + bias on one backend, from host data.
std::vector<float> RunMatmul(Backend& be, const std::vector<float>& a, const std::vector<float>& b,
                             const std::vector<float>& bias, int M, int N, int K, Compute compute) {
  DeviceBuffer da(&be, a.size() * 4), db(&be, b.size() * 4), dbias(&be, bias.size() * 4), dc(&be, M * N * 4);
  be.Upload(da.data(), a.data(), a.size() * 4);
  be.Upload(db.data(), b.data(), b.size() * 4);
  be.Upload(dbias.data(), bias.data(), bias.size() * 4);
  be.Matmul(dc.as<float>(), F32(da.as<float>()), F32(db.as<float>()), dbias.as<float>(), M, N, K, false, true,
            0.0f, compute);
  std::vector<float> c(M * N);
  be.Download(c.data(), dc.data(), c.size() * 4);
  return c;
}

TEST(Fp16, EmulatedFastMatmulMatchesTheReference) {
  const int M = 37, N = 29, K = 53;  // odd shapes
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> a(M * K), b(N * K), bias(N);
  for (auto* v : {&a, &b, &bias})
    for (float& x : *v) x = nd(rng);
  auto ref = MakeCpuReferenceBackend();
  auto fast = WithF16Emulation(MakeCpuFastBackend());
  EXPECT_TRUE(fast->capabilities().fp16_matmul);
  Backend* raw = fast.get();
  fast = WithF16Emulation(std::move(fast));  // already fp16-capable: returned as is, not wrapped twice
  EXPECT_EQ(fast.get(), raw);
  const std::vector<float> want = RunMatmul(*ref, a, b, bias, M, N, K, Compute::kF16);
  const std::vector<float> got = RunMatmul(*fast, a, b, bias, M, N, K, Compute::kF16);
  const std::vector<float> f32 = RunMatmul(*ref, a, b, bias, M, N, K, Compute::kF32);
  double err = 0, rounding = 0;
  for (int i = 0; i < M * N; i++) {
    err = std::max(err, std::fabs(double(got[i]) - want[i]));
    rounding = std::max(rounding, std::fabs(double(f32[i]) - want[i]));
  }
  EXPECT_LT(err, 1e-4) << "same fp16 operands, different summation order only";
  EXPECT_GT(rounding, 1e-4) << "fp16 rounding must be visible against fp32";
  EXPECT_LT(rounding, 5e-2);

  a[5] = 70000.0f;  // above fp16's range: the row of C that reads it becomes non-finite
  const std::vector<float> over = RunMatmul(*fast, a, b, bias, M, N, K, Compute::kF16);
  EXPECT_FALSE(std::isfinite(over[0]));
  EXPECT_TRUE(std::isfinite(over[N]));
}

}  // namespace
}  // namespace tern
