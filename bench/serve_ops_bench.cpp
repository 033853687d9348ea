// Speed of the serving ops of the fast CPU backend (Google Benchmark), each against a baseline measured in
// the same process:
//  - PagedAttention: decode attention (one query row per sequence) of GPT-2 124M's shape (C 768, 12 heads,
//    KV blocks of 16 scattered over the pool) over fp32 and bf16 caches, one call per layer over 12 layers'
//    caches in turn (as a forward does: the caches do not stay in the last-level cache). `GBps` is the
//    cache bytes read per second; `pct_stream` compares it with a plain streaming read of as many bytes
//    (SumSquares over one buffer), the bandwidth a memory-bound kernel could reach.
//  - MatmulInt8: the decode matmuls of GPT-2 124M at 1, 16 and 32 rows. `GMACs` is multiply-adds per second;
//    `x_fp32` is how many times faster than the fp32 matmul (oneDNN) of the same shape.
//  - MatmulLayers/124M_int8 and _int4: the four matmuls of all 12 layers of GPT-2 124M in a decode step's
//    order, each layer with its own weights (85 MB in int8, 48 MB in int4: they stream from DRAM, as in the
//    model, where MatmulInt8 above finds them in cache). `GMACs` as above, `GBps` the weight bytes read per
//    second; `pct_hot` compares it with the same 48 calls on one layer's weights; int4's `x_int8` is its
//    speed-up over the int8 step measured in the same process (the bytes alone would give 1.78x).
// Run: OMP_NUM_THREADS=2 build/bench/serve_ops_bench [--benchmark_filter=Paged]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "infer/quantize.h"

namespace tern {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<float> Random(size_t n, float scale, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Seconds of one call of f, the median of `reps` after a warm-up call.
template <typename F>
double MedianSeconds(F&& f, int reps) {
  f();
  std::vector<double> t;
  for (int i = 0; i < reps; i++) {
    const auto t0 = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::nth_element(t.begin(), t.begin() + reps / 2, t.end());
  return t[reps / 2];
}

// Runs f once to warm up, then once per benchmark iteration; returns the mean seconds per call.
template <typename F>
double SecondsPerCall(benchmark::State& state, F&& f) {
  f();
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    f();
    seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  return seconds / static_cast<double>(state.iterations());
}

void PagedAttention(benchmark::State& state, DType kv_dtype) {
  const int S = static_cast<int>(state.range(0)), ctx = static_cast<int>(state.range(1));
  const int C = 768, NH = 12, bs = 16, max_blocks = (ctx + bs - 1) / bs;
  const int num_blocks = S * max_blocks, layers = 12;
  auto be = MakeCpuFastBackend();
  const size_t cache_bytes = static_cast<size_t>(num_blocks) * bs * C * DTypeSize(kv_dtype);
  std::vector<DeviceBuffer> k, v;
  for (int l = 0; l < layers; l++) {
    k.emplace_back(be.get(), cache_bytes);
    v.emplace_back(be.get(), cache_bytes);
  }
  DeviceBuffer out(be.get(), static_cast<size_t>(S) * C * 4);
  // Blocks handed out in a shuffled order, as a pool that has served many requests does.
  std::vector<int32_t> perm(num_blocks), tables, seqs, slots;
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(1));
  for (int s = 0; s < S; s++) {
    tables.insert(tables.end(), perm.begin() + s * max_blocks, perm.begin() + (s + 1) * max_blocks);
    seqs.insert(seqs.end(), {s, 1, ctx});
  }
  // Fill the caches: ctx rows of random qkv per sequence written through KvCacheWrite.
  const auto fill = Random(static_cast<size_t>(ctx) * 3 * C, 1.0f, 2);
  DeviceBuffer fill_d(be.get(), fill.size() * 4), slots_d(be.get(), ctx * 4);
  be->Upload(fill_d.data(), fill.data(), fill.size() * 4);
  for (int s = 0; s < S; s++) {
    slots.clear();
    for (int p = 0; p < ctx; p++) slots.push_back(tables[s * max_blocks + p / bs] * bs + p % bs);
    be->Upload(slots_d.data(), slots.data(), ctx * 4);
    for (int l = 0; l < layers; l++)
      be->KvCacheWrite(k[l].data(), v[l].data(), kv_dtype, fill_d.as<float>(), slots_d.as<int32_t>(), ctx, C,
                       NH, bs);
  }
  const auto qkv = Random(static_cast<size_t>(S) * 3 * C, 1.0f, 3);
  DeviceBuffer qkv_d(be.get(), qkv.size() * 4), seqs_d(be.get(), seqs.size() * 4),
      tables_d(be.get(), tables.size() * 4);
  be->Upload(qkv_d.data(), qkv.data(), qkv.size() * 4);
  be->Upload(seqs_d.data(), seqs.data(), seqs.size() * 4);
  be->Upload(tables_d.data(), tables.data(), tables.size() * 4);
  int layer = 0;
  auto attend = [&] {
    be->PagedAttentionForward(out.as<float>(), qkv_d.as<float>(), k[layer].data(), v[layer].data(), kv_dtype,
                              seqs_d.as<int32_t>(), tables_d.as<int32_t>(), S, max_blocks, S, C, NH, bs);
    layer = (layer + 1) % layers;
  };
  // Baseline: stream as many bytes (keys and values of one layer), from a buffer of all layers' size.
  const size_t stream_floats = 2 * cache_bytes / 4;
  DeviceBuffer stream(be.get(), stream_floats * 4 * layers);
  be->Upload(stream.data(), Random(stream_floats * layers, 1.0f, 4).data(), stream_floats * 4 * layers);
  int part = 0;
  const double stream_s = MedianSeconds(
      [&] {
        benchmark::DoNotOptimize(be->SumSquares(stream.as<float>() + part * stream_floats, stream_floats));
        part = (part + 1) % layers;
      },
      4 * layers);
  const double per_call = SecondsPerCall(state, attend);
  state.counters["GBps"] = 2.0 * cache_bytes / per_call / 1e9;
  state.counters["pct_stream"] = 100.0 * stream_s / per_call;
  state.counters["us_per_head"] = 1e6 * per_call / (S * NH);
}

void MatmulInt8(benchmark::State& state, int OC, int K) {
  const int N = static_cast<int>(state.range(0));
  auto be = MakeCpuFastBackend();
  const auto w = Random(static_cast<size_t>(OC) * K, 0.05f, 5);
  const auto x = Random(static_cast<size_t>(N) * K, 1.0f, 6);
  Int8Matrix q = QuantizeInt8(w.data(), OC, K);
  DeviceBuffer w_d(be.get(), w.size() * 4), x_d(be.get(), x.size() * 4), q_d(be.get(), q.packed.size()),
      s_d(be.get(), q.scale.size() * 4), out(be.get(), static_cast<size_t>(N) * OC * 4);
  be->Upload(w_d.data(), w.data(), w.size() * 4);
  be->Upload(x_d.data(), x.data(), x.size() * 4);
  be->Upload(q_d.data(), q.packed.data(), q.packed.size());
  be->Upload(s_d.data(), q.scale.data(), q.scale.size() * 4);
  const double fp32_s = MedianSeconds(
      [&] {
        be->Matmul(out.as<float>(), F32(x_d.as<float>()), F32(w_d.as<float>()), nullptr, N, OC, K, false,
                   true, 0.0f, Compute::kF32);
      },
      15);
  auto run = [&] {
    be->MatmulInt8(out.as<float>(), x_d.as<float>(), q_d.as<int8_t>(), s_d.as<float>(), nullptr, N, OC, K);
  };
  const double per_call = SecondsPerCall(state, run);
  state.counters["GMACs"] = static_cast<double>(N) * OC * K / per_call / 1e9;
  state.counters["x_fp32"] = fp32_s / per_call;
}

// The matmuls of GPT-2 124M: a layer's four, then the LM head.
struct Shape {
  const char* name;
  int OC, K;
};
constexpr Shape k124MShapes[] = {{"qkv", 2304, 768},
                                 {"attproj", 768, 768},
                                 {"fc", 3072, 768},
                                 {"fcproj", 768, 3072},
                                 {"head", 50257, 768}};
constexpr int kLayerMatmuls = 4;

// The weights of all 12 layers' four matmuls in int8 or int4, and one decode step's 48 calls over them.
struct LayerWeights {
  std::vector<DeviceBuffer> w, s;  // [layer * 4 + matmul]
  size_t macs = 0, bytes = 0;
};
LayerWeights MakeLayerWeights(Backend* be, bool int4, int N) {
  LayerWeights lw;
  for (int l = 0; l < 12; l++) {
    for (int i = 0; i < kLayerMatmuls; i++) {
      const Shape& shape = k124MShapes[i];
      const auto w = Random(static_cast<size_t>(shape.OC) * shape.K, 0.05f, 7 + l);
      auto upload = [&](const auto& packed, const std::vector<float>& scale) {
        lw.w.emplace_back(be, packed.size());
        lw.s.emplace_back(be, scale.size() * 4);
        be->Upload(lw.w.back().data(), packed.data(), packed.size());
        be->Upload(lw.s.back().data(), scale.data(), scale.size() * 4);
        lw.bytes += packed.size() + scale.size() * 4;
      };
      if (int4) {
        const Int4Matrix q = QuantizeInt4(w.data(), shape.OC, shape.K);
        upload(q.packed, q.scale);
      } else {
        const Int8Matrix q = QuantizeInt8(w.data(), shape.OC, shape.K);
        upload(q.packed, q.scale);
      }
      lw.macs += static_cast<size_t>(N) * shape.OC * shape.K;
    }
  }
  return lw;
}

// MatmulLayers/124M_int8 and _int4: `GMACs`, `GBps` (weight bytes read per second), `pct_hot` (the same 48
// calls on one layer's weights, which stay in cache); int4 also `x_int8`, its speed-up over the int8 step
// measured in the same process.
void MatmulLayers(benchmark::State& state, bool int4) {
  const int N = static_cast<int>(state.range(0)), widest = 3072;  // the largest layer K and OC
  auto be = MakeCpuFastBackend();
  const auto x = Random(static_cast<size_t>(N) * widest, 1.0f, 6);
  DeviceBuffer x_d(be.get(), x.size() * 4), out(be.get(), static_cast<size_t>(N) * widest * 4);
  be->Upload(x_d.data(), x.data(), x.size() * 4);
  // One step's 48 matmuls; weights of layer `only` every time when only >= 0 (they stay in cache).
  auto step = [&](const LayerWeights& lw, bool four, int only) {
    for (int l = 0; l < 12; l++)
      for (int i = 0; i < kLayerMatmuls; i++) {
        const int at = kLayerMatmuls * (only >= 0 ? only : l) + i;
        const Shape& sh = k124MShapes[i];
        if (four)
          be->MatmulInt4(out.as<float>(), x_d.as<float>(), lw.w[at].as<uint8_t>(), lw.s[at].as<float>(),
                         nullptr, N, sh.OC, sh.K);
        else
          be->MatmulInt8(out.as<float>(), x_d.as<float>(), lw.w[at].as<int8_t>(), lw.s[at].as<float>(),
                         nullptr, N, sh.OC, sh.K);
      }
  };
  const LayerWeights lw = MakeLayerWeights(be.get(), int4, N);
  double int8_s = 0;
  if (int4) {
    const LayerWeights base = MakeLayerWeights(be.get(), false, N);
    int8_s = MedianSeconds([&] { step(base, false, -1); }, 9);
  }
  const double hot_s = MedianSeconds([&] { step(lw, int4, 0); }, 9);
  const double per_call = SecondsPerCall(state, [&] { step(lw, int4, -1); });
  state.counters["GMACs"] = static_cast<double>(lw.macs) / per_call / 1e9;
  state.counters["GBps"] = static_cast<double>(lw.bytes) / per_call / 1e9;
  state.counters["pct_hot"] = 100.0 * hot_s / per_call;
  if (int4) state.counters["x_int8"] = int8_s / per_call;
}

void RegisterAll() {
  for (DType kv : {DType::kF32, DType::kBF16}) {
    const std::string name = std::string("PagedAttention/") + DTypeName(kv);
    benchmark::RegisterBenchmark(name.c_str(), PagedAttention, kv)
        ->ArgNames({"seqs", "ctx"})
        ->Args({1, 64})
        ->Args({16, 64})
        ->Args({16, 512})
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  }
  for (const Shape& s : k124MShapes) {
    const std::string name = std::string("MatmulInt8/124M_") + s.name;
    benchmark::RegisterBenchmark(name.c_str(), MatmulInt8, s.OC, s.K)
        ->ArgName("rows")
        ->Arg(1)
        ->Arg(16)
        ->Arg(32)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
  }
  for (bool int4 : {false, true})
    benchmark::RegisterBenchmark(int4 ? "MatmulLayers/124M_int4" : "MatmulLayers/124M_int8", MatmulLayers,
                                 int4)
        ->ArgName("rows")
        ->Arg(1)
        ->Arg(16)
        ->Unit(benchmark::kMicrosecond)
        ->UseRealTime();
}

}  // namespace
}  // namespace tern

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  tern::RegisterAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
