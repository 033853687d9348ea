// Helpers for the CUDA tests: a tensor mirrored on the CPU reference and the CUDA backend, and error checks
// that print the worst element.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_api.h"

namespace tern::testing {

// The same buffer on both backends.
struct Twin {
  DeviceBuffer ref, gpu;
  size_t bytes = 0;
};

class CudaVsReference : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CudaDevicePresent()) GTEST_SKIP() << "skipped: no GPU";
    gpu_ = MakeCudaBackend();
    ref_ = MakeCpuReferenceBackend();
  }

  template <typename T>
  Twin Make(const std::vector<T>& host) {
    Twin t{DeviceBuffer(ref_.get(), host.size() * sizeof(T)),
           DeviceBuffer(gpu_.get(), host.size() * sizeof(T)), host.size() * sizeof(T)};
    if (!host.empty()) {
      ref_->Upload(t.ref.data(), host.data(), t.bytes);
      gpu_->Upload(t.gpu.data(), host.data(), t.bytes);
    }
    return t;
  }
  template <typename T>
  std::vector<T> Ref(const Twin& t) {
    std::vector<T> h(t.bytes / sizeof(T));
    ref_->Download(h.data(), t.ref.data(), t.bytes);
    return h;
  }
  template <typename T>
  std::vector<T> Gpu(const Twin& t) {
    std::vector<T> h(t.bytes / sizeof(T));
    gpu_->Download(h.data(), t.gpu.data(), t.bytes);
    return h;
  }

  std::vector<float> Random(size_t n, float scale = 1.0f) {
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng_);
    return v;
  }
  std::vector<int32_t> RandomInts(size_t n, int hi) {
    std::uniform_int_distribution<int> d(0, hi - 1);
    std::vector<int32_t> v(n);
    for (auto& x : v) x = d(rng_);
    return v;
  }

  std::unique_ptr<Backend> gpu_, ref_;
  std::mt19937 rng_{1234};
};

// max |got - want| / max(1e-6, max |want|): the scale-free tensor error the golden tests use.
inline double RelMaxError(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, scale = 1e-6;
  for (size_t i = 0; i < want.size(); i++) {
    diff = std::max(diff, std::fabs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  return diff / scale;
}

// Every element within atol + rtol * |want|; reports the worst one.
inline ::testing::AssertionResult AllClose(const std::vector<float>& got, const std::vector<float>& want,
                                           double atol, double rtol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  double worst = -1;
  size_t at = 0;
  for (size_t i = 0; i < want.size(); i++) {
    const double excess =
        std::fabs(static_cast<double>(got[i]) - want[i]) - (atol + rtol * std::fabs(want[i]));
    if (!(excess <= 0) && (worst < 0 || !(excess <= worst))) {  // NaN counts as the worst
      worst = std::isnan(excess) ? INFINITY : excess;
      at = i;
    }
  }
  if (worst < 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "element " << at << ": got " << got[at] << ", want " << want[at] << " (atol " << atol << ", rtol "
         << rtol << "; rel-max error " << RelMaxError(got, want) << ")";
}

inline bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace tern::testing
