#include "backend/peak_probe.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "backend/bf16.h"

namespace tern {

double MeasurePeakGflops(Backend* backend, Compute compute, double seconds, int n) {
  const size_t elems = static_cast<size_t>(n) * n;
  DeviceBuffer a(backend, elems * 4), b(backend, elems * 4), c(backend, elems * 4);
  DeviceBuffer a16(backend, elems * 2), b16(backend, elems * 2);
  std::vector<float> host(elems);
  for (size_t i = 0; i < elems; i++) host[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
  backend->Upload(a.data(), host.data(), elems * 4);
  backend->Upload(b.data(), host.data(), elems * 4);
  Operand oa = F32(a.as<float>()), ob = F32(b.as<float>());
  if (compute == Compute::kBF16) {  // pre-cast operands: the probe measures the matmul alone
    backend->CastF32ToBF16(a16.as<uint16_t>(), a.as<float>(), elems);
    backend->CastF32ToBF16(b16.as<uint16_t>(), b.as<float>(), elems);
    oa = BF16(a16.as<uint16_t>());
    ob = BF16(b16.as<uint16_t>());
  }
  auto run = [&] {
    backend->Matmul(c.as<float>(), oa, ob, nullptr, n, n, n, false, true, 0.0f, compute);
    backend->Synchronize();
  };
  run();  // warm up: primitive creation, page faults
  double best = 0;
  auto start = std::chrono::steady_clock::now();
  int reps = 0;
  while (reps < 3 ||
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) {
    auto t0 = std::chrono::steady_clock::now();
    run();
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * n * n * static_cast<double>(n) / dt / 1e9);
    if (++reps > 1000) break;
  }
  return best;
}

// Best of 5 passes summing `mb` MB of floats, in GB/s: the most this machine reads on these threads. The
// buffer comes from the backend's allocator (2 MiB aligned, transparent huge pages: as the weights are),
// and each thread keeps 8 independent vector sums. Both matter: a std::vector on 4 KiB pages with a sum
// the compiler vectorised on its own read 18 GB/s on an Intel Xeon VM where this reads 30 (and where the
// bf16 decode read 25), and one running sum is a chain of dependent adds that a fast core's memory
// outruns (5.3 GB/s on an AVX-512 Zen 5 VM).
double MeasureHostReadGbps(Backend* backend, size_t mb) {
  constexpr int kLanes = 16, kAcc = 8;  // 16 floats: a zmm with AVX-512, two ymm or four xmm without
  typedef float V __attribute__((vector_size(kLanes * 4)));
  const size_t n = mb * 1048576 / sizeof(V) / kAcc * kAcc;
  V* buf = static_cast<V*>(backend->Alloc(n * sizeof(V)));
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) buf[i] = V{} + static_cast<float>(i & 7);
  double best = 0, sink = 0;
  for (int rep = 0; rep < 5; rep++) {
    const auto t0 = std::chrono::steady_clock::now();
    double sum = 0;
#pragma omp parallel reduction(+ : sum)
    {
      V acc[kAcc] = {};
#pragma omp for schedule(static)
      for (size_t i = 0; i < n; i += kAcc) {
#pragma GCC unroll 8
        for (int j = 0; j < kAcc; j++) acc[j] += buf[i + j];
      }
      for (int j = 0; j < kAcc; j++)
        for (int l = 0; l < kLanes; l++) sum += acc[j][l];
    }
    sink += sum;
    best = std::max(
        best,
        n * sizeof(V) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 1e9);
  }
  backend->Free(buf);
  if (sink < 0) std::printf("%f", sink);  // keep the sums
  return best;
}

}  // namespace tern
