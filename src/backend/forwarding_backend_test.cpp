// ForwardingBackend: a decorator that overrides one op (Add, here counted) leaves every other call to the
// inner backend. The defaulted virtuals (which compile even when a forwarding line is missing) are checked
// one by one through a spy; the ops give bit-identical results to the inner backend called directly.
#include "backend/forwarding_backend.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/reference_ops.h"
#include "testing/ops.h"

namespace tern {
namespace {

using testing::Arena;
using testing::ExpectBitEqual;
using testing::Tokens;
using testing::Uniform;

// The reference backend, counting the calls it receives of the virtuals that have a default in Backend.
class SpyBackend : public CpuReferenceBackend {
 public:
  std::string name() const override { return "spy"; }
  Capabilities capabilities() const override {
    Capabilities c = CpuReferenceBackend::capabilities();
    c.attention_kinds = {"naive", "spy"};
    return c;
  }
  std::string PciBusId() const override { return "0000:00:00.0"; }
  bool SetAttentionKernel(const std::string& kind) override {
    calls["SetAttentionKernel"]++;
    return kind == "naive" || kind == "spy";
  }
  void Synchronize() override { calls["Synchronize"]++; }
  void PrepareThread() override { calls["PrepareThread"]++; }
  void Add(float* out, const float* a, const float* b, size_t n) override {
    calls["Add"]++;
    CpuReferenceBackend::Add(out, a, b, n);
  }
  void MatmulGelu(float* out, float* pre, Operand a, Operand b, const float* bias, int M, int N, int K,
                  bool trans_a, bool trans_b, Compute compute) override {
    calls["MatmulGelu"]++;
    CpuReferenceBackend::MatmulGelu(out, pre, a, b, bias, M, N, K, trans_a, trans_b, compute);
  }
  void MatmulDGelu(float* dinp, const float* pre, Operand a, Operand b, int M, int N, int K, bool trans_a,
                   bool trans_b, Compute compute) override {
    calls["MatmulDGelu"]++;
    CpuReferenceBackend::MatmulDGelu(dinp, pre, a, b, M, N, K, trans_a, trans_b, compute);
  }
  void EmbedTokens(float* out, const int32_t* tokens, const int32_t* positions, const float* wte,
                   const float* wpe, int N, int C) override {
    calls["EmbedTokens"]++;
    CpuReferenceBackend::EmbedTokens(out, tokens, positions, wte, wpe, N, C);
  }
  void MatmulF32Weights(float* out, const float* inp, const float* w, const float* bias, int N, int OC,
                        int K) override {
    calls["MatmulF32Weights"]++;
    CpuReferenceBackend::MatmulF32Weights(out, inp, w, bias, N, OC, K);
  }

  std::map<std::string, int> calls;
};

// The smallest decorator: counts Add and forwards it; everything else is ForwardingBackend's.
class CountingAdd : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void Add(float* out, const float* a, const float* b, size_t n) override {
    adds++;
    ForwardingBackend::Add(out, a, b, n);
  }
  int adds = 0;
};

TEST(ForwardingBackend, DefaultedVirtualsReachTheInnerBackend) {
  auto spy_owned = std::make_unique<SpyBackend>();
  SpyBackend* spy = spy_owned.get();
  CountingAdd deco(std::move(spy_owned));
  EXPECT_EQ(deco.inner(), spy);
  EXPECT_EQ(deco.name(), "spy");
  EXPECT_EQ(deco.PciBusId(), "0000:00:00.0");
  EXPECT_EQ(deco.capabilities().attention_kinds, (std::vector<std::string>{"naive", "spy"}));
  EXPECT_TRUE(deco.SetAttentionKernel("spy"));  // a kind only the spy has
  EXPECT_FALSE(deco.SetAttentionKernel("bogus"));
  deco.Synchronize();
  deco.PrepareThread();
  EXPECT_EQ(spy->calls["SetAttentionKernel"], 2);
  EXPECT_EQ(spy->calls["Synchronize"], 1);
  EXPECT_EQ(spy->calls["PrepareThread"], 1);

  // The overridden op runs the decorator's code and still reaches the inner backend; the optional
  // inference ops (which abort in Backend's defaults) are forwarded too.
  Arena ar(deco);
  std::mt19937 rng(1);
  const int N = 3, C = 8;
  float* out = ar.Zeros<float>(N * C);
  const float* a = ar.In(Uniform(rng, N * C));
  deco.Add(out, a, a, N * C);
  const float* wte = ar.In(Uniform(rng, 5 * C));
  const float* wpe = ar.In(Uniform(rng, 4 * C));
  const int32_t* tokens = ar.In(std::vector<int32_t>{4, 0, 2});
  const int32_t* positions = ar.In(std::vector<int32_t>{0, 1, 3});
  deco.EmbedTokens(out, tokens, positions, wte, wpe, N, C);
  // The GELU epilogues: [N, C] = out [N, C] x a^T-shaped [C, C] (any operands of the right size).
  float* pre = ar.Zeros<float>(N * C);
  float* g = ar.Zeros<float>(N * C);
  const float* w = ar.In(Uniform(rng, C * C));
  deco.MatmulGelu(g, pre, F32(a), F32(w), nullptr, N, C, C, false, true, Compute::kF32);
  deco.MatmulDGelu(g, pre, F32(a), F32(w), N, C, C, false, false, Compute::kF32);
  deco.MatmulF32Weights(g, a, w, nullptr, N, C, C);
  EXPECT_EQ(spy->calls["MatmulF32Weights"], 1);
  EXPECT_EQ(spy->calls["MatmulGelu"], 1);
  EXPECT_EQ(spy->calls["MatmulDGelu"], 1);
  EXPECT_EQ(deco.adds, 1);
  EXPECT_EQ(spy->calls["Add"], 1);
  EXPECT_EQ(spy->calls["EmbedTokens"], 1);
}

// A few training and inference ops through the decorator and on a second inner backend called directly:
// the same bits (the reference is deterministic).
TEST(ForwardingBackend, OpsGiveTheInnerBackendsResults) {
  const int B = 2, T = 5, C = 8, NH = 2, V = 11, OC = 16;
  std::mt19937 rng(7);
  const std::vector<int32_t> tokens = Tokens(rng, B * T, V), targets = Tokens(rng, B * T, V);
  const std::vector<float> wte = Uniform(rng, V * C), wpe = Uniform(rng, T * C), w = Uniform(rng, OC * C),
                           bias = Uniform(rng, OC), ln_w = Uniform(rng, C), ln_b = Uniform(rng, C);
  std::vector<int8_t> w8(OC * C);
  for (auto& x : w8) x = static_cast<int8_t>(rng() % 255 - 127);
  const std::vector<float> w8_scale = Uniform(rng, OC, 0.01f, 0.02f), qkv_host = Uniform(rng, B * T * 3 * C);

  auto run = [&](Backend& be) {
    Arena ar(be);
    const int N = B * T;
    float* x = ar.Zeros<float>(N * C);
    be.EncoderForward(x, ar.In(tokens), ar.In(wte), ar.In(wpe), B, T, C);
    float* ln = ar.Zeros<float>(N * C);
    float* mean = ar.Zeros<float>(N);
    float* rstd = ar.Zeros<float>(N);
    be.LayerNormForward(ln, mean, rstd, x, ar.In(ln_w), ar.In(ln_b), N, C);
    float* h = ar.Zeros<float>(N * OC);
    be.Matmul(h, F32(ln), F32(ar.In(w)), ar.In(bias), N, OC, C, false, true, 0.0f, Compute::kF32);
    float* g = ar.Zeros<float>(N * OC);
    be.GeluForward(g, h, static_cast<size_t>(N) * OC);
    be.Add(g, g, h, static_cast<size_t>(N) * OC);
    float* logits = ar.Zeros<float>(N * V);
    be.Matmul(logits, F32(ln), F32(ar.In(wte)), nullptr, N, V, C, false, true, 0.0f, Compute::kF32);
    float* losses = ar.Zeros<float>(N);
    be.CrossEntropyForwardBackward(losses, logits, ar.In(targets), N, V, 1.0f / N);
    float* q = ar.Zeros<float>(N * OC);
    be.MatmulInt8(q, ln, ar.In(w8), ar.In(w8_scale), nullptr, N, OC, C);
    // One sequence of all N rows in a paged fp32 cache of bs = 4: row n in slot n (block n / 4).
    const int bs = 4, blocks = (N + bs - 1) / bs;
    const size_t block_bytes = KvBlockBytes(DType::kF32, C, NH, bs);
    void* k_cache = ar.Zeros<uint8_t>(blocks * block_bytes);
    void* v_cache = ar.Zeros<uint8_t>(blocks * block_bytes);
    std::vector<int32_t> slots(N), table(blocks);
    for (int n = 0; n < N; n++) slots[n] = n;
    for (int i = 0; i < blocks; i++) table[i] = i;
    const float* qkv = ar.In(qkv_host);
    be.KvCacheWrite(k_cache, v_cache, DType::kF32, qkv, ar.In(slots), N, C, NH, bs);
    float* att = ar.Zeros<float>(N * C);
    be.PagedAttentionForward(att, qkv, k_cache, v_cache, DType::kF32, ar.In(std::vector<int32_t>{0, N, N}),
                             ar.In(table), 1, blocks, N, C, NH, bs);
    const std::vector<float> sums = {static_cast<float>(be.Sum(losses, N)),
                                     static_cast<float>(be.SumSquares(g, static_cast<size_t>(N) * OC))};
    return std::vector<std::vector<float>>{
        ar.Out(x, N * C),  ar.Out(ln, N * C), ar.Out(g, N * OC),  ar.Out(logits, N * V),
        ar.Out(losses, N), ar.Out(q, N * OC), ar.Out(att, N * C), sums};
  };

  auto inner = MakeCpuReferenceBackend();
  CountingAdd deco(MakeCpuReferenceBackend());
  const auto want = run(*inner), got = run(deco);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); i++) ExpectBitEqual(got[i], want[i], "output " + std::to_string(i));
  EXPECT_EQ(deco.adds, 1);
}

}  // namespace
}  // namespace tern
