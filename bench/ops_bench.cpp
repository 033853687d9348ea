// Per-op speed of the fast CPU backend against its baselines, in one process (Google Benchmark):
//  - memory-bound ops (AdamW, SumSquares, cross-entropy) fast vs the reference backend: compare the
//    bytes_per_second columns of the two rows;
//  - every matmul shape of the two bench/vs_pytorch.sh configs (GPT-2 124M B4 T64, L6 C384 B8 T256), fp32 and
//    bf16, with `pct_peak` = achieved FLOP/s / this process's matmul probe (the MFU denominator).
// Tells which op holds a training step back. Run: OMP_NUM_THREADS=2 build/bench/ops_bench
//   (--benchmark_filter=Matmul to select; the probe takes ~2 s at start).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/peak_probe.h"

namespace tern {
namespace {

double g_peak_gflops[2] = {0, 0};  // indexed by Compute

std::unique_ptr<Backend> MakeNamed(const std::string& which) {
  return which == "ref" ? MakeCpuReferenceBackend() : MakeCpuFastBackend();
}

void Fill(Backend* be, void* dst, size_t n, float scale) {
  std::vector<float> h(n);
  for (size_t i = 0; i < n; i++)
    h[i] = scale * (static_cast<float>((i * 2654435761u) % 2001) / 1000.0f - 1.0f);
  be->Upload(dst, h.data(), n * sizeof(float));
}

void AdamW(benchmark::State& state, const std::string& which) {
  auto be = MakeNamed(which);
  const size_t n = size_t{16} << 20;
  DeviceBuffer p(be.get(), n * 4), g(be.get(), n * 4), m(be.get(), n * 4), v(be.get(), n * 4);
  Fill(be.get(), p.data(), n, 0.02f);
  Fill(be.get(), g.data(), n, 0.001f);
  int t = 1;
  for (auto _ : state)
    be->AdamW(p.as<float>(), nullptr, g.as<float>(), m.as<float>(), v.as<float>(), n, 1e-4f, 0.9f, 0.95f,
              1e-8f, 0.1f, 1.0f, t++);
  state.SetBytesProcessed(state.iterations() * n * 28);  // read p g m v, write p m v
}

void SumSquares(benchmark::State& state, const std::string& which) {
  auto be = MakeNamed(which);
  const size_t n = size_t{32} << 20;
  DeviceBuffer x(be.get(), n * 4);
  Fill(be.get(), x.data(), n, 1.0f);
  for (auto _ : state) benchmark::DoNotOptimize(be->SumSquares(x.as<float>(), n));
  state.SetBytesProcessed(state.iterations() * n * 4);
}

void CrossEntropy(benchmark::State& state, const std::string& which) {
  auto be = MakeNamed(which);
  const int n = static_cast<int>(state.range(0)), vocab = 50257;
  const size_t elems = static_cast<size_t>(n) * vocab;
  DeviceBuffer logits(be.get(), elems * 4), losses(be.get(), n * 4), targets(be.get(), n * 4);
  std::vector<int32_t> tg(n);
  for (int i = 0; i < n; i++) tg[i] = (i * 7919) % vocab;
  be->Upload(targets.data(), tg.data(), n * 4);
  for (auto _ : state) {
    state.PauseTiming();
    Fill(be.get(), logits.data(), elems, 3.0f);
    state.ResumeTiming();
    be->CrossEntropyForwardBackward(losses.as<float>(), logits.as<float>(), targets.as<int32_t>(), n, vocab,
                                    1.0f / n);
  }
  state.SetBytesProcessed(state.iterations() * elems * 8);  // read the logits, write the gradient
}

// One model matmul shape; kind: 0 = forward (trans_b), 1 = backward dinp (plain), 2 = backward dW (trans_a,
// beta 1).
void Matmul(benchmark::State& state, int M, int N, int K, int kind, Compute compute) {
  auto be = MakeCpuFastBackend();
  const bool ta = kind == 2, tb = kind == 0;
  const size_t a_n = static_cast<size_t>(M) * K, b_n = static_cast<size_t>(K) * N,
               c_n = static_cast<size_t>(M) * N;
  DeviceBuffer a(be.get(), a_n * 4), b(be.get(), b_n * 4), c(be.get(), c_n * 4);
  DeviceBuffer a16(be.get(), a_n * 2), b16(be.get(), b_n * 2);
  Fill(be.get(), a.data(), a_n, 0.5f);
  Fill(be.get(), b.data(), b_n, 0.5f);
  Operand oa = F32(a.as<float>()), ob = F32(b.as<float>());
  if (compute == Compute::kBF16) {
    be->CastF32ToBF16(a16.as<uint16_t>(), a.as<float>(), a_n);
    be->CastF32ToBF16(b16.as<uint16_t>(), b.as<float>(), b_n);
    oa = BF16(a16.as<uint16_t>());
    ob = BF16(b16.as<uint16_t>());
  }
  const float beta = kind == 2 ? 1.0f : 0.0f;
  be->Matmul(c.as<float>(), oa, ob, nullptr, M, N, K, ta, tb, beta, compute);  // warm up
  double seconds = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    be->Matmul(c.as<float>(), oa, ob, nullptr, M, N, K, ta, tb, beta, compute);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const double gflops = 2.0 * M * N * static_cast<double>(K) * state.iterations() / seconds / 1e9;
  state.counters["GFLOPs"] = gflops;
  state.counters["pct_peak"] = 100.0 * gflops / g_peak_gflops[static_cast<int>(compute)];
}

void RegisterAll() {
  for (const char* which : {"fast", "ref"}) {
    benchmark::RegisterBenchmark((std::string("AdamW/") + which).c_str(), AdamW, std::string(which))
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark((std::string("SumSquares/") + which).c_str(), SumSquares, std::string(which))
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark((std::string("CrossEntropy/") + which).c_str(), CrossEntropy,
                                 std::string(which))
        ->Arg(256)
        ->Arg(2048)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  struct Shape {
    const char* name;
    int M, N, K, kind;
  };
  // The per-layer and head matmuls of the two vs_pytorch configs (M = B*T rows).
  const Shape shapes[] = {
      {"124M_T64/qkv_fwd", 256, 2304, 768, 0},    {"124M_T64/fc_fwd", 256, 3072, 768, 0},
      {"124M_T64/fcproj_fwd", 256, 768, 3072, 0}, {"124M_T64/fc_dinp", 256, 768, 3072, 1},
      {"124M_T64/fc_dW", 3072, 768, 256, 2},      {"124M_T64/head_fwd", 256, 50257, 768, 0},
      {"124M_T64/head_dinp", 256, 768, 50257, 1}, {"124M_T64/head_dW", 50257, 768, 256, 2},
      {"L6_T256/qkv_fwd", 2048, 1152, 384, 0},    {"L6_T256/fc_fwd", 2048, 1536, 384, 0},
      {"L6_T256/fcproj_fwd", 2048, 384, 1536, 0}, {"L6_T256/fc_dinp", 2048, 384, 1536, 1},
      {"L6_T256/fc_dW", 1536, 384, 2048, 2},      {"L6_T256/head_fwd", 2048, 50257, 384, 0},
      {"L6_T256/head_dinp", 2048, 384, 50257, 1}, {"L6_T256/head_dW", 50257, 384, 2048, 2},
  };
  for (Compute compute : {Compute::kF32, Compute::kBF16}) {
    for (const Shape& s : shapes) {
      std::string name = std::string("Matmul/") + s.name + "/" + ComputeName(compute);
      benchmark::RegisterBenchmark(name.c_str(), Matmul, s.M, s.N, s.K, s.kind, compute)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
}

}  // namespace
}  // namespace tern

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  auto be = tern::MakeCpuFastBackend();
  tern::g_peak_gflops[0] = tern::MeasurePeakGflops(be.get(), tern::Compute::kF32);
  tern::g_peak_gflops[1] = tern::MeasurePeakGflops(be.get(), tern::Compute::kBF16);
  std::printf("matmul probe: fp32 %.1f GFLOP/s, bf16 %.1f GFLOP/s\n", tern::g_peak_gflops[0],
              tern::g_peak_gflops[1]);
  tern::RegisterAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
