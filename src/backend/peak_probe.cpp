#include "backend/peak_probe.h"

#include <chrono>
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

}  // namespace tern
