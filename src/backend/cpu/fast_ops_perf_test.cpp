// Timings of the fast CPU backend (disabled by default; not part of the fast suite). Run with
//   OMP_NUM_THREADS=2 ./backend_ops_test --gtest_also_run_disabled_tests --gtest_filter='*Perf*'
// Prints GFLOP/s of the matmuls that dominate GPT-2 training at 256 tokens per step, and each op's speedup
// over the reference at the shapes of the L6 C384 B=8 T=256 benchmark. Best of a few runs (the machine is
// shared); the "cpu" columns divide CPU time by the thread count (best with OMP_WAIT_POLICY=passive).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <thread>

#include "backend/cpu/dnnl_matmul.h"
#include "backend/cpu/fast_ops.h"
#include "testing/ops.h"

namespace tern {
namespace {

using testing::Arena;
using testing::Tokens;
using testing::Uniform;

double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int Threads() {
  const char* env = std::getenv("OMP_NUM_THREADS");
  return env && std::atoi(env) > 0 ? std::atoi(env) : static_cast<int>(std::thread::hardware_concurrency());
}

// Best wall time of `reps` runs after a warm-up (primitive creation, scratch growth). On a shared machine the
// wall time suffers from other processes; *cpu receives the best CPU time / threads, which suffers less
// (run with OMP_WAIT_POLICY=passive so that idle threads do not spin).
double BestSeconds(const std::function<void()>& fn, int reps, double* cpu = nullptr) {
  fn();
  double best = 1e30, best_cpu = 1e30;
  for (int r = 0; r < reps; r++) {
    const double c0 = CpuSeconds();
    auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    best_cpu = std::min(best_cpu, (CpuSeconds() - c0) / Threads());
  }
  if (cpu) *cpu = best_cpu;
  return best;
}

TEST(FastOpsPerf, DISABLED_Matmul) {
  CpuFastBackend be;
  std::mt19937 rng(1);
  struct Case {
    const char* name;
    int M, N, K;
    bool ta, tb;
    float beta;
  };
  const Case cases[] = {{"qkv fwd   ", 256, 2304, 768, false, true, 0.0f},
                        {"qkv dinp  ", 256, 768, 2304, false, false, 0.0f},
                        {"qkv dW    ", 2304, 768, 256, true, false, 1.0f},
                        {"head fwd  ", 256, 50257, 768, false, true, 0.0f},
                        {"head dinp ", 256, 768, 50257, false, false, 0.0f},
                        {"head dW   ", 50257, 768, 256, true, false, 1.0f}};
  for (const Case& c : cases) {
    Arena ar(be);
    const size_t na = size_t(c.M) * c.K, nb = size_t(c.K) * c.N;
    const float *a = ar.In(Uniform(rng, na)), *b = ar.In(Uniform(rng, nb));
    uint16_t *a16 = ar.Zeros<uint16_t>(na), *b16 = ar.Zeros<uint16_t>(nb);
    be.CastF32ToBF16(a16, a, na);
    be.CastF32ToBF16(b16, b, nb);
    float* out = ar.Zeros<float>(size_t(c.M) * c.N);
    const double flop = 2.0 * c.M * c.N * c.K;
    std::printf("%s M=%5d N=%5d K=%5d  GFLOP/s wall (cpu):", c.name, c.M, c.N, c.K);
    auto run = [&](const char* what, Operand oa, Operand ob, Compute compute) {
      double cpu;
      const double wall = BestSeconds(
          [&] { be.Matmul(out, oa, ob, nullptr, c.M, c.N, c.K, c.ta, c.tb, c.beta, compute); }, 4, &cpu);
      std::printf("  %s %4.0f (%4.0f)", what, flop / 1e9 / wall, flop / 1e9 / cpu);
    };
    run("fp32", F32(a), F32(b), Compute::kF32);
    run("bf16 cast", F32(a), F32(b), Compute::kBF16);
    run("bf16", BF16(a16), BF16(b16), Compute::kBF16);
    std::printf("\n");
  }
}

TEST(FastOpsPerf, DISABLED_OpsVsReference) {
  auto ref = MakeCpuReferenceBackend();
  auto fast = MakeCpuFastBackend();
  std::mt19937 rng(2);
  const int B = 8, T = 256, C = 384, NH = 6, V = 50257, N = B * T;
  const size_t nparams = 30'000'000;
  struct Bufs {
    float *x, *y, *z, *w, *b, *p, *g, *mean, *rstd, *qkv, *att, *datt, *dqkv, *logits, *losses, *m, *v, *wte,
        *wpe;
    uint16_t* p16;
    int32_t *tokens, *targets;
  };
  auto make = [&](Arena& ar) {
    Bufs u;
    u.x = ar.In(Uniform(rng, size_t(N) * 4 * C));
    u.y = ar.In(Uniform(rng, size_t(N) * 4 * C));
    u.z = ar.Zeros<float>(size_t(N) * 4 * C);
    u.w = ar.In(Uniform(rng, 4 * C));
    u.b = ar.In(Uniform(rng, 4 * C));
    u.mean = ar.Zeros<float>(N);
    u.rstd = ar.Zeros<float>(N);
    u.qkv = ar.In(Uniform(rng, size_t(N) * 3 * C));
    u.att = ar.Zeros<float>(size_t(B) * NH * T * T);
    u.datt = ar.Zeros<float>(size_t(B) * NH * T * T);
    u.dqkv = ar.Zeros<float>(size_t(N) * 3 * C);
    u.logits = ar.In(Uniform(rng, size_t(N) * V, -4.0f, 4.0f));
    u.losses = ar.Zeros<float>(N);
    u.p = ar.In(Uniform(rng, nparams));
    u.g = ar.In(Uniform(rng, nparams, -1e-2f, 1e-2f));
    u.m = ar.In(Uniform(rng, nparams, -1e-3f, 1e-3f));
    u.v = ar.In(Uniform(rng, nparams, 0.0f, 1e-6f));
    u.p16 = ar.Zeros<uint16_t>(nparams);
    u.wte = ar.In(Uniform(rng, size_t(V) * C));
    u.wpe = ar.In(Uniform(rng, size_t(T) * C));
    u.tokens = ar.In(Tokens(rng, N, V));
    u.targets = ar.In(Tokens(rng, N, V));
    return u;
  };
  Arena ar_ref(*ref), ar_fast(*fast);
  Bufs r = make(ar_ref), f = make(ar_fast);
  const size_t n4 = size_t(N) * 4 * C, nC = size_t(N) * C;
  struct Op {
    const char* name;
    std::function<void(Backend&, Bufs&)> fn;
  };
  const Op ops[] = {
      {"EncoderForward",
       [&](Backend& be, Bufs& u) { be.EncoderForward(u.z, u.tokens, u.wte, u.wpe, B, T, C); }},
      {"EncoderBackward",
       [&](Backend& be, Bufs& u) { be.EncoderBackward(u.wte, u.wpe, u.x, u.tokens, nullptr, B, T, C); }},
      {"LayerNormForward",
       [&](Backend& be, Bufs& u) { be.LayerNormForward(u.z, u.mean, u.rstd, u.x, u.w, u.b, N, C); }},
      {"LayerNormBackward",
       [&](Backend& be, Bufs& u) {
         be.LayerNormBackward(u.z, u.w, u.b, u.y, u.x, u.w, u.mean, u.rstd, N, C);
       }},
      {"GeluForward (N x 4C)", [&](Backend& be, Bufs& u) { be.GeluForward(u.z, u.x, n4); }},
      {"GeluBackward (N x 4C)", [&](Backend& be, Bufs& u) { be.GeluBackward(u.z, u.x, u.y, n4); }},
      {"Add (N x C)", [&](Backend& be, Bufs& u) { be.Add(u.z, u.x, u.y, nC); }},
      {"BiasBackward (OC=4C)", [&](Backend& be, Bufs& u) { be.BiasBackward(u.w, u.x, N, 4 * C); }},
      {"AttentionForward T=256",
       [&](Backend& be, Bufs& u) { be.AttentionForward(u.z, u.att, u.qkv, B, T, C, NH, Compute::kF32); }},
      {"AttentionBackward T=256",
       [&](Backend& be, Bufs& u) {
         be.AttentionBackward(u.dqkv, u.datt, u.x, u.qkv, u.z, u.att, B, T, C, NH, Compute::kF32);
       }},
      {"CrossEntropy N=2048 V=50257",
       [&](Backend& be, Bufs& u) {
         be.CrossEntropyForwardBackward(u.losses, u.logits, u.targets, N, V, 1e-3f);
       }},
      {"AdamW 30M (+bf16 copy)",
       [&](Backend& be, Bufs& u) {
         be.AdamW(u.p, u.p16, u.g, u.m, u.v, nparams, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 3);
       }},
      {"SumSquares 30M", [&](Backend& be, Bufs& u) { be.SumSquares(u.m, nparams); }},
      {"CastF32ToBF16 30M", [&](Backend& be, Bufs& u) { be.CastF32ToBF16(u.p16, u.m, nparams); }},
  };
  for (const Op& op : ops) {
    double cr, cf;
    const double tr = BestSeconds([&] { op.fn(*ref, r); }, 1, &cr),
                 tf = BestSeconds([&] { op.fn(*fast, f); }, 5, &cf);
    std::printf("%-28s reference %9.3f ms  fast %8.3f ms (cpu %8.3f ms)  speedup %6.1fx (cpu %6.1fx)\n",
                op.name, tr * 1e3, tf * 1e3, cf * 1e3, tr / tf, cr * Threads() / cf);
  }
}

}  // namespace
}  // namespace tern
