// The row-independent dot-product tiles shared by the serving matmuls with fp32 and bf16 weights
// (f32_matmul.cpp, bf16_matmul.cpp): the lane count of the build, the fixed-order lane sum, and the portable
// tile (GCC vector extensions, for builds without AVX-512: AVX2+FMA or the SSE2 of any x86-64), which both
// kernels use with their own element type. Their AVX-512 tiles (masked FMA, vdpbf16ps) stay in their files.
//
// Row independence: each output is one accumulator per (row, channel) walking k in the same order, reduced
// lane by lane in a fixed order, whatever the tile's row count: a row gets bitwise the same result alone or
// batched. Include only from files compiled with -ffp-contract=off (src/backend/CMakeLists.txt): contraction
// left to GCC fused some tile shapes and not others.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tern::fma_tile {

#if defined(__AVX512F__)
constexpr int kLanes = 16;
#elif defined(__AVX2__)
constexpr int kLanes = 8;
#else
constexpr int kLanes = 4;
#endif
typedef float VF __attribute__((vector_size(kLanes * 4)));
typedef uint32_t VU __attribute__((vector_size(kLanes * 4)));
typedef uint16_t VH __attribute__((vector_size(kLanes * 2)));

// The lanes' sum in a fixed tree order (lanes l + (l + w) for w = kLanes/2, ..., 1): the order does not
// depend on the tile, so a row gets the same bits alone or batched. With AVX-512 or AVX2 the same pairs are
// added as whole halves of the register (a generic loop compiled to 40 instructions a sum, a third of a 6 x 4
// tile's time at K = 768); float addition commutes exactly, so the bits are the loop's.
inline float HorizontalSum(VF v) {
#if defined(__AVX512F__)
  // Lanes l + (l + 8), the halves taken by a vector shuffle: GCC 12's extract intrinsics warn
  // (-Wuninitialized, their undefined pass-through operand), and memcpy went through the stack.
  const __m256 h = _mm256_add_ps((__m256)__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7),
                                 (__m256)__builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15));
#elif defined(__AVX2__)
  const __m256 h = (__m256)v;
#endif
#if defined(__AVX512F__) || defined(__AVX2__)
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));  // lanes l + (l + 4)
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));                                         // 0 + 2, 1 + 3
  q = _mm_add_ss(q, _mm_movehdup_ps(q));                                          // 0 + 1
  return _mm_cvtss_f32(q);
#else
  alignas(64) float t[kLanes];
  std::memcpy(t, &v, sizeof v);
#pragma GCC unroll 8
  for (int w = kLanes / 2; w >= 1; w /= 2) {
#pragma GCC unroll 8
    for (int l = 0; l < w; l++) t[l] += t[l + w];
  }
  return t[0];
#endif
}

// acc + a * b, fused where the build has FMA (asked for explicitly: the files do not contract).
inline VF Fma(VF a, VF b, VF acc) {
#if defined(__AVX512F__)
  return (VF)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)acc);
#elif defined(__AVX2__) && defined(__FMA__)
  return (VF)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)acc);
#else
  return acc + a * b;
#endif
}

// kLanes consecutive elements as floats: fp32 as they are, bf16 widened in registers (a zero-extend and a
// shift: bf16 is the top half of an fp32).
inline VF Load(const float* p) {
  VF v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline VF Load(const uint16_t* p) {
  VH h;
  std::memcpy(&h, p, sizeof h);
  const VU u = __builtin_convertvector(h, VU) << 16;
  VF f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline float Scalar(float x) {
  return x;
}
inline float Scalar(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// The portable tile: rows [0, MR) of a (row stride K) x channels [0, NR) of w (row stride K), k walked kLanes
// at a time, the last K % kLanes in a scalar fma after the lane sum; store(r, n, sum) writes each output.
// `ahead` > 0: the same k of the weights `ahead` elements on is prefetched, once per 64-byte line.
template <int MR, int NR, typename T, typename StoreFn>
void Tile(const T* a, const T* w, size_t K, size_t ahead, StoreFn store) {
  constexpr size_t kLine = 64 / sizeof(T);
  VF acc[MR][NR];
#pragma GCC unroll 16
  for (int r = 0; r < MR; r++)
#pragma GCC unroll 16
    for (int n = 0; n < NR; n++) acc[r][n] = VF{};
  size_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    VF wv[NR];
#pragma GCC unroll 16
    for (int n = 0; n < NR; n++) {
      if (ahead && k % kLine == 0) __builtin_prefetch(w + n * K + ahead + k);
      wv[n] = Load(w + n * K + k);
    }
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++) {
      const VF av = Load(a + r * K + k);
#pragma GCC unroll 16
      for (int n = 0; n < NR; n++) acc[r][n] = Fma(av, wv[n], acc[r][n]);
    }
  }
  // Unrolled, so that every index is a constant: a variable index kept the accumulators in memory.
#pragma GCC unroll 16
  for (int r = 0; r < MR; r++) {
#pragma GCC unroll 16
    for (int n = 0; n < NR; n++) {
      float s = HorizontalSum(acc[r][n]);
      for (size_t kk = k; kk < K; kk++) s = std::fma(Scalar(a[r * K + kk]), Scalar(w[n * K + kk]), s);
      store(r, n, s);
    }
  }
}

}  // namespace tern::fma_tile
