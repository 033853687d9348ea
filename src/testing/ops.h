// Helpers for the CPU op tests: device buffers filled from host vectors, random inputs, and a closeness
// check that names the worst element.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace tern::testing {

// Owns the device buffers of one op invocation on one backend.
class Arena {
 public:
  explicit Arena(Backend& be) : be_(be) {}
  template <typename T>
  T* In(const std::vector<T>& host) {
    bufs_.emplace_back(&be_, host.size() * sizeof(T) + 64);
    be_.Upload(bufs_.back().data(), host.data(), host.size() * sizeof(T));
    return bufs_.back().template as<T>();
  }
  template <typename T>
  T* Zeros(size_t n) {
    bufs_.emplace_back(&be_, n * sizeof(T) + 64);
    return bufs_.back().template as<T>();
  }
  template <typename T>
  std::vector<T> Out(const T* p, size_t n) {
    std::vector<T> host(n);
    be_.Download(host.data(), p, n * sizeof(T));
    return host;
  }
  Backend& backend() { return be_; }

 private:
  Backend& be_;
  std::vector<DeviceBuffer> bufs_;
};

inline std::vector<float> Uniform(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<int32_t> Tokens(std::mt19937& rng, size_t n, int vocab) {
  std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// |got - want| <= rtol * |want| + atol * max|want| for every element (atol is relative to the largest value,
// so that sums with cancellation are judged against the scale of the tensor).
inline void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, double rtol,
                        double atol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0.0;
  for (float w : want) scale = std::max(scale, std::fabs(static_cast<double>(w)));
  double worst = 0.0;
  size_t worst_i = 0;
  for (size_t i = 0; i < got.size(); i++) {
    double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    double bound = rtol * std::fabs(static_cast<double>(want[i])) + atol * scale + 1e-30;
    if (!(err / bound <= worst)) {  // also catches NaN
      worst = err / bound;
      worst_i = i;
      if (std::isnan(err)) break;
    }
  }
  EXPECT_LE(worst, 1.0) << what << ": worst element " << worst_i << " got " << got[worst_i] << " want "
                        << want[worst_i] << " (rtol " << rtol << ", atol " << atol << " x max|want| " << scale
                        << ")";
}

template <typename T>
void ExpectBitEqual(const std::vector<T>& a, const std::vector<T>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_TRUE(a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0) << what << " differs";
}

}  // namespace tern::testing
