// Finite-difference checks of the reference ops' backward passes (the oracle of every other backend).
//
// For an op y = f(x) and fixed random weights w, the scalar L = sum(y * w) is evaluated in double from the
// op's float outputs; its central difference (L(x + h) - L(x - h)) / (x+h - x-h), with h = 1e-2 and the
// perturbed values' actual difference as the denominator, is compared with the backward pass fed dout = w.
// Tolerance: |analytic - numeric| <= 1e-3 * |numeric| + 2e-4 * max|numeric|. Measured errors are ~2e-5 of the
// largest gradient (float forward noise over 2h, and the O(h^2) truncation); a wrong term is far above it.
#include <functional>

#include "backend/bf16.h"
#include "testing/ops.h"

namespace tern {
namespace {

using testing::Arena;
using testing::ExpectClose;
using testing::Tokens;
using testing::Uniform;

constexpr float kStep = 1e-2f;
constexpr double kRtol = 1e-3, kAtol = 2e-4;

double Dot(const std::vector<float>& y, const std::vector<float>& w) {
  double s = 0.0;
  for (size_t i = 0; i < y.size(); i++) s += static_cast<double>(y[i]) * w[i];
  return s;
}

// Central differences of loss() with respect to every element of x (loss reads x when called).
std::vector<float> NumericGrad(std::vector<float>& x, const std::function<double()>& loss) {
  std::vector<float> g(x.size());
  for (size_t i = 0; i < x.size(); i++) {
    const float keep = x[i];
    const float hi = keep + kStep, lo = keep - kStep;
    x[i] = hi;
    const double lp = loss();
    x[i] = lo;
    const double lm = loss();
    x[i] = keep;
    g[i] = static_cast<float>((lp - lm) / (static_cast<double>(hi) - lo));
  }
  return g;
}

class ReferenceGradTest : public ::testing::Test {
 protected:
  void ExpectGrad(std::vector<float>& x, const std::vector<float>& analytic,
                  const std::function<double()>& loss, const std::string& what) {
    ExpectClose(analytic, NumericGrad(x, loss), kRtol, kAtol, what);
  }
  std::vector<float> U(size_t n, float lo = -1.0f, float hi = 1.0f) { return Uniform(rng_, n, lo, hi); }

  std::unique_ptr<Backend> ref_ = MakeCpuReferenceBackend();
  Backend& be() { return *ref_; }
  std::mt19937 rng_{7};
};

TEST_F(ReferenceGradTest, LayerNorm) {
  const int N = 3, C = 13;
  auto x = U(N * C, -2.0f, 2.0f), w = U(C), b = U(C), dout = U(N * C);
  auto loss = [&] {
    Arena ar(be());
    float *out = ar.Zeros<float>(N * C), *mean = ar.Zeros<float>(N), *rstd = ar.Zeros<float>(N);
    be().LayerNormForward(out, mean, rstd, ar.In(x), ar.In(w), ar.In(b), N, C);
    return Dot(ar.Out(out, N * C), dout);
  };
  Arena ar(be());
  float *out = ar.Zeros<float>(N * C), *mean = ar.Zeros<float>(N), *rstd = ar.Zeros<float>(N);
  float *dx = ar.Zeros<float>(N * C), *dw = ar.Zeros<float>(C), *db = ar.Zeros<float>(C);
  const float *px = ar.In(x), *pw = ar.In(w);
  be().LayerNormForward(out, mean, rstd, px, pw, ar.In(b), N, C);
  be().LayerNormBackward(dx, dw, db, ar.In(dout), px, pw, mean, rstd, N, C);
  ExpectGrad(x, ar.Out(dx, N * C), loss, "layernorm dinp");
  ExpectGrad(w, ar.Out(dw, C), loss, "layernorm dweight");
  ExpectGrad(b, ar.Out(db, C), loss, "layernorm dbias");
}

TEST_F(ReferenceGradTest, Gelu) {
  const size_t n = 41;
  auto x = U(n, -4.0f, 4.0f), dout = U(n);
  auto loss = [&] {
    Arena ar(be());
    float* out = ar.Zeros<float>(n);
    be().GeluForward(out, ar.In(x), n);
    return Dot(ar.Out(out, n), dout);
  };
  Arena ar(be());
  float* dx = ar.Zeros<float>(n);
  be().GeluBackward(dx, ar.In(x), ar.In(dout), n);
  ExpectGrad(x, ar.Out(dx, n), loss, "gelu");
}

TEST_F(ReferenceGradTest, Attention) {
  const int B = 2, T = 5, C = 12, NH = 3;
  const size_t nqkv = size_t(B) * T * 3 * C, nout = size_t(B) * T * C, natt = size_t(B) * NH * T * T;
  auto qkv = U(nqkv), dout = U(nout);
  auto loss = [&] {
    Arena ar(be());
    float *out = ar.Zeros<float>(nout), *att = ar.Zeros<float>(natt);
    be().AttentionForward(out, att, ar.In(qkv), B, T, C, NH, Compute::kF32);
    return Dot(ar.Out(out, nout), dout);
  };
  Arena ar(be());
  float *out = ar.Zeros<float>(nout), *att = ar.Zeros<float>(natt), *datt = ar.Zeros<float>(natt);
  float* dqkv = ar.Zeros<float>(nqkv);
  const float* pq = ar.In(qkv);
  be().AttentionForward(out, att, pq, B, T, C, NH, Compute::kF32);
  be().AttentionBackward(dqkv, datt, ar.In(dout), pq, out, att, B, T, C, NH, Compute::kF32);
  ExpectGrad(qkv, ar.Out(dqkv, nqkv), loss, "attention dqkv");
}

TEST_F(ReferenceGradTest, CrossEntropy) {
  const int N = 4, V = 11;
  auto logits = U(N * V, -3.0f, 3.0f);
  std::vector<int32_t> targets = {3, -1, 0, 10};
  for (float dloss : {1.0f, 0.25f}) {
    auto loss = [&] {
      Arena ar(be());
      float* losses = ar.Zeros<float>(N);
      be().CrossEntropyForwardBackward(losses, ar.In(logits), ar.In(targets), N, V, 0.0f);
      return dloss * Dot(ar.Out(losses, N), std::vector<float>(N, 1.0f));
    };
    Arena ar(be());
    float *pl = ar.In(logits), *losses = ar.Zeros<float>(N);
    be().CrossEntropyForwardBackward(losses, pl, ar.In(targets), N, V, dloss);
    ExpectGrad(logits, ar.Out(pl, N * V), loss, "cross-entropy dloss=" + std::to_string(dloss));
  }
}

// A linear layer in both weight layouts, differentiated with the matmuls the model uses:
//   W stored [OC,C]: out = inp·Wᵀ + b;  dinp = dout·W;   dW = doutᵀ·inp;  db = BiasBackward(dout)
//   W stored [C,OC]: out = inp·W;       dinp = dout·Wᵀ;  dW = inpᵀ·dout
TEST_F(ReferenceGradTest, MatmulLinearLayer) {
  const int N = 5, C = 7, OC = 6;
  auto x = U(N * C), w = U(OC * C), b = U(OC), dout = U(N * OC);
  for (bool nn_linear_layout : {true, false}) {
    auto loss = [&] {
      Arena ar(be());
      float* out = ar.Zeros<float>(N * OC);
      be().Matmul(out, F32(ar.In(x)), F32(ar.In(w)), ar.In(b), N, OC, C, false, nn_linear_layout, 0.0f,
                  Compute::kF32);
      return Dot(ar.Out(out, N * OC), dout);
    };
    Arena ar(be());
    float *dx = ar.Zeros<float>(N * C), *dw = ar.Zeros<float>(OC * C), *db = ar.Zeros<float>(OC);
    const float *pd = ar.In(dout), *px = ar.In(x), *pw = ar.In(w);
    if (nn_linear_layout) {
      be().Matmul(dx, F32(pd), F32(pw), nullptr, N, C, OC, false, false, 0.0f, Compute::kF32);
      be().Matmul(dw, F32(pd), F32(px), nullptr, OC, C, N, true, false, 1.0f, Compute::kF32);
    } else {
      be().Matmul(dx, F32(pd), F32(pw), nullptr, N, C, OC, false, true, 0.0f, Compute::kF32);
      be().Matmul(dw, F32(px), F32(pd), nullptr, C, OC, N, true, false, 1.0f, Compute::kF32);
    }
    be().BiasBackward(db, pd, N, OC);
    const std::string layout = nn_linear_layout ? " W[OC,C]" : " W[C,OC]";
    ExpectGrad(x, ar.Out(dx, N * C), loss, "matmul dinp" + layout);
    ExpectGrad(w, ar.Out(dw, OC * C), loss, "matmul dweight" + layout);
    ExpectGrad(b, ar.Out(db, OC), loss, "matmul dbias" + layout);
  }
}

TEST_F(ReferenceGradTest, Encoder) {
  const int B = 2, T = 4, C = 5, V = 6;
  auto inp = Tokens(rng_, B * T, V);
  inp[0] = inp[5] = 2;  // a repeated token must accumulate
  auto wte = U(V * C), wpe = U(T * C), dout = U(B * T * C);
  auto loss = [&] {
    Arena ar(be());
    float* out = ar.Zeros<float>(B * T * C);
    be().EncoderForward(out, ar.In(inp), ar.In(wte), ar.In(wpe), B, T, C);
    return Dot(ar.Out(out, B * T * C), dout);
  };
  Arena ar(be());
  float *dwte = ar.Zeros<float>(V * C), *dwpe = ar.Zeros<float>(T * C);
  be().EncoderBackward(dwte, dwpe, ar.In(dout), ar.In(inp), inp.data(), B, T, C);
  ExpectGrad(wte, ar.Out(dwte, V * C), loss, "encoder dwte");
  ExpectGrad(wpe, ar.Out(dwpe, T * C), loss, "encoder dwpe");
}

// Closed forms that pin down the remaining reference ops.
TEST_F(ReferenceGradTest, AdamWFirstStepIsSignDescent) {
  // t = 1: m_hat = g', v_hat = g'^2, so p -= lr * (sign(g) * |g'| / (|g'| + eps) + wd * p).
  std::vector<float> p = {1.0f, -2.0f, 0.5f}, g = {0.3f, -0.2f, 4.0f}, zeros(3, 0.0f);
  Arena ar(be());
  float *pp = ar.In(p), *pm = ar.In(zeros), *pv = ar.In(zeros);
  uint16_t* p16 = ar.Zeros<uint16_t>(3);
  be().AdamW(pp, p16, ar.In(g), pm, pv, 3, 0.1f, 0.9f, 0.95f, 1e-8f, 0.01f, 0.5f, 1);
  auto out = ar.Out(pp, 3);
  auto out16 = ar.Out(p16, 3);
  for (int i = 0; i < 3; i++) {
    const float expect = p[i] - 0.1f * ((g[i] > 0 ? 1.0f : -1.0f) + 0.01f * p[i]);
    EXPECT_NEAR(out[i], expect, 1e-6f) << i;
    EXPECT_EQ(out16[i], F32ToBF16(out[i])) << i;
  }
}

TEST_F(ReferenceGradTest, CastRoundsToNearestEven) {
  const uint32_t in[] = {0x3f808000u, 0x3f818000u, 0x3f808001u, 0x7fc00000u, 0xff800000u};
  const uint16_t want[] = {0x3f80, 0x3f82, 0x3f81, 0x7fc0, 0xff80};
  std::vector<float> x(5);
  std::memcpy(x.data(), in, sizeof(in));
  Arena ar(be());
  uint16_t* out = ar.Zeros<uint16_t>(5);
  be().CastF32ToBF16(out, ar.In(x), 5);
  auto got = ar.Out(out, 5);
  for (int i = 0; i < 5; i++) EXPECT_EQ(got[i], want[i]) << i;
}

TEST_F(ReferenceGradTest, SumsInDouble) {
  std::vector<float> x = {1e8f, 1.0f, -1e8f, 3.0f};
  Arena ar(be());
  const float* px = ar.In(x);
  EXPECT_EQ(be().Sum(px, 4), 4.0);
  EXPECT_EQ(be().SumSquares(px, 2), 1e16 + 1.0);
}

}  // namespace
}  // namespace tern
