// Small helpers shared by the fast CPU ops: a vectorisable exp, bf16 rounding without branches, and a
// 64-byte aligned scratch buffer that grows and is then reused. Internal to backend/cpu.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <omp.h>

namespace tern::fast {

// exp(x) for x in [-80, 80] (clamped outside), ~2 ulp: Cephes expf's polynomial on a range reduced by ln 2.
// Branch-free scalar code that GCC vectorises inside `#pragma omp simd` loops (16 lanes with AVX-512).
// The clamp keeps results normal (no denormal slow paths); exp(-80) = 1.8e-35 stands in for anything smaller.
inline float Exp(float x) {
  x = std::min(std::max(x, -80.0f), 80.0f);
  const float kMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to the nearest integer
  float n = (x * 1.44269504088896341f + kMagic) - kMagic;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r * r + r + 1.0f;
  uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  return y * std::bit_cast<float>(bits);
}

// max of x[0..n) (-inf when n = 0; NaNs are skipped). Sixteen running maxima in one GCC vector (the
// build's widest registers): GCC 12 vectorises neither `omp simd reduction(max:)` without
// -ffinite-math-only nor the same loop over a float array (it stayed scalar: a quarter of the LM head's
// loss).
inline float Max(const float* __restrict x, int n) {
  typedef float V16 __attribute__((vector_size(64)));
  V16 lanes = V16{} - __builtin_inff();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    V16 v;
    __builtin_memcpy(&v, x + i, sizeof v);
    lanes = v > lanes ? v : lanes;
  }
  float m = -__builtin_inff();
  for (int j = 0; j < 16; j++) m = lanes[j] > m ? lanes[j] : m;
  for (; i < n; i++) m = x[i] > m ? x[i] : m;
  return m;
}

// F32ToBF16 from bf16.h (round to nearest even, NaN stays a quiet NaN) without a branch, on the bits of an
// fp32 (uint32_t) or of a GCC vector of them (the result in the low 16 bits of each lane).
template <typename U>
inline U BF16Bits(U u) {
  const U rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const U nan = (u >> 16) | 0x40u;
  return (u & 0x7fffffffu) > 0x7f800000u ? nan : rounded;
}
inline uint16_t ToBF16(float f) {
  return static_cast<uint16_t>(BF16Bits(std::bit_cast<uint32_t>(f)));
}

inline float FromBF16(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

// Host scratch owned by the backend: grows to the largest request and is then reused (no per-call
// allocation, so no page faults in the training step). Contents are not preserved across growth.
class Scratch {
 public:
  Scratch() = default;
  ~Scratch() { std::free(ptr_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  void* Get(size_t bytes) {
    if (bytes > bytes_) {
      std::free(ptr_);
      bytes_ = (bytes + 63) / 64 * 64;
      ptr_ = std::aligned_alloc(64, bytes_);
      if (!ptr_) std::abort();
      std::memset(ptr_, 0, bytes_);  // touch every page now, not in the hot loop
    }
    return ptr_;
  }
  template <typename T>
  T* As(size_t count) {
    return static_cast<T*>(Get(count * sizeof(T)));
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

inline size_t RoundUp(size_t x, size_t m) {
  return (x + m - 1) / m * m;
}

// Elements below which a fork/join costs more than it saves. Waking a sleeping worker takes tens of
// microseconds on a virtual machine (the serving engine lets workers sleep between steps), about what one
// core needs for 64k elements of a simple op.
constexpr size_t kParallelMin = 1 << 16;

// Runs body(begin, end) over [0, n): on the calling thread when n < min_parallel, else one contiguous chunk
// (a multiple of 16 elements) per OpenMP thread. Not `omp parallel for simd if (...)`: GCC 12 compiles the
// serial branch of such a loop without vectorising it (GeluForward below the threshold ran 12x slower per
// element), so the body's own `omp simd` loop must be the one both branches run.
template <typename F>
inline void ParallelRange(size_t n, size_t min_parallel, F&& body) {
  if (n < min_parallel) {
    body(size_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const size_t threads = static_cast<size_t>(omp_get_num_threads());
    const size_t chunk = RoundUp((n + threads - 1) / threads, 16);
    const size_t begin = std::min(n, static_cast<size_t>(omp_get_thread_num()) * chunk);
    const size_t end = std::min(n, begin + chunk);
    if (begin < end) body(begin, end);
  }
}

}  // namespace tern::fast
