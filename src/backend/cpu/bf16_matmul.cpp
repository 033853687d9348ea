// The fast CPU backend's MatmulBF16 (serving with --weights bf16):
//   out[M,N] = bf16(inp)[M,K] * W[N,K]^T + bias, W stored as bf16, the activations rounded to bf16 (nearest
//   even), exact bf16 products, fp32 sums.
//
// Why our own kernel: a decode step is bound by reading the weights at one row and by the multiply-adds at
// sixteen, and the rows must not change each other's results (below). oneDNN 2.6's bf16 brgemm is 2-3x faster
// than an FMA kernel at 16 rows but picks other kernels (other summation orders) for other row counts.
//
// Two kernels, chosen when the file is compiled (-march=native):
//  * AVX512-BF16 (AMD Zen 4/5, Intel Cooper Lake and Sapphire Rapids on): vdpbf16ps multiplies 32 bf16 pairs
//    into 16 fp32 lanes (each lane adds two exact products): half the instructions of an fp32 FMA per weight,
//    and the weights and activations are read as they are stored, without widening.
//  * Otherwise: GCC vector extensions of the widest float vector the build targets (16 lanes with AVX-512, 8
//    with AVX2, 4 with the baseline SSE2 of any x86-64), both operands widened in registers (a zero-extend
//    and a shift: bf16 is the top half of an fp32) and multiplied with FMA.
// A tile is MR rows x NR output channels; the threads split the output channels, and a group's weights stay
// in L1 while every row tile passes over them. bench/decode_bound.cpp and `serve_load bandwidth` time it.
//
// Row independence: each output is one accumulator per (row, channel) walking k in the same order, reduced
// lane by lane in a fixed order, whatever MR or the number of rows: a row gets bitwise the same result
// alone or batched (infer/engine_test.cpp depends on it). The two kernels differ from each other in the last
// bits (vdpbf16ps adds its two products before the accumulator), so a machine's results are its own.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "backend/bf16.h"
#include "backend/cpu/fast_ops.h"

namespace tern {
namespace {

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

// The lanes' sum in a fixed tree order (halves added, then their halves, ...). One scalar add after another
// was a 16-add dependency chain per output, which cost more than the k loop itself once rows were batched.
// The order does not depend on the tile, so a row still gets the same bits alone or batched.
inline float HorizontalSum(VF v) {
  alignas(64) float t[kLanes];
  std::memcpy(t, &v, sizeof v);
#pragma GCC unroll 8
  for (int w = kLanes / 2; w >= 1; w /= 2) {
#pragma GCC unroll 8
    for (int l = 0; l < w; l++) t[l] += t[l + w];
  }
  return t[0];
}

struct Args {
  const uint16_t* a;  // [M, K] activations, rounded to bf16
  const uint16_t* w;  // [N, K]
  const float* bias;  // [N] or null
  float* c;           // [M, N]
  int M, N, K;
};

// Writes output (row r, channel n): the lane sum plus the bias.
inline void Store(const Args& p, int r, int n, float s) {
  if (p.bias) s += p.bias[n];
  p.c[static_cast<size_t>(r) * p.N + n] = s;
}

#if defined(__AVX512BF16__)
constexpr int kMaxRows = 6;  // rows per tile (MR): 24 accumulators, 4 weight vectors, 1 activation vector

// Rows [r0, r0 + MR) x channels [n0, n0 + NR), 32 k at a time; the last (K % 32) through masked loads, whose
// zeros add exact zeros, so every k goes through the same instruction.
template <int MR, int NR>
void Tile(const Args& p, int r0, int n0) {
  const size_t K = static_cast<size_t>(p.K);
  const uint16_t* a = p.a + r0 * K;
  const uint16_t* w = p.w + n0 * K;
  // One stream (M = 1) reads each weight once, from memory: the hardware prefetcher does not run far enough
  // ahead of 4 interleaved rows, so the same k of the tile two tiles on is asked for now. It changes no
  // result.
  const bool ahead = n0 + 3 * NR <= p.N;
  __m512 acc[MR][NR];
#pragma GCC unroll 16
  for (int r = 0; r < MR; r++)
#pragma GCC unroll 16
    for (int n = 0; n < NR; n++) acc[r][n] = _mm512_setzero_ps();
  // One loop for every k (no lambda or second copy: GCC then kept the accumulators in registers).
  for (size_t k = 0; k < K; k += 32) {
    const __mmask32 mask = K - k >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((uint64_t{1} << (K - k)) - 1);
    __m512bh wv[NR];
#pragma GCC unroll 16
    for (int n = 0; n < NR; n++) {
      if (ahead) __builtin_prefetch(w + (n + 2 * NR) * K + k);
      wv[n] = (__m512bh)_mm512_maskz_loadu_epi16(mask, w + n * K + k);
    }
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++) {
      const __m512bh av = (__m512bh)_mm512_maskz_loadu_epi16(mask, a + r * K + k);
#pragma GCC unroll 16
      for (int n = 0; n < NR; n++) acc[r][n] = _mm512_dpbf16_ps(acc[r][n], av, wv[n]);
    }
  }
  // Unrolled, so that every index is a constant: a variable index kept the accumulators in memory, stored
  // on every k step (a third of the speed).
#pragma GCC unroll 16
  for (int r = 0; r < MR; r++)
#pragma GCC unroll 16
    for (int n = 0; n < NR; n++) Store(p, r0 + r, n0 + n, HorizontalSum((VF)acc[r][n]));
}
#else
constexpr int kMaxRows = 3;  // rows per tile (MR): 12 accumulators and 4 weight vectors

// acc + a * b. The file is compiled with -ffp-contract=off: left to contraction, GCC fused some tile shapes
// and not others, and a row then came out differently alone and batched. So FMA is asked for explicitly.
inline VF Fma(VF a, VF b, VF acc) {
#if defined(__AVX512F__)
  return (VF)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)acc);
#elif defined(__AVX2__) && defined(__FMA__)
  return (VF)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)acc);
#else
  return acc + a * b;
#endif
}

inline VF LoadBF16(const uint16_t* p) {
  VH h;
  std::memcpy(&h, p, sizeof h);
  const VU u = __builtin_convertvector(h, VU) << 16;
  VF f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Rows [r0, r0 + MR) x channels [n0, n0 + NR).
template <int MR, int NR>
void Tile(const Args& p, int r0, int n0) {
  const size_t K = static_cast<size_t>(p.K);
  const uint16_t* a = p.a + r0 * K;
  const uint16_t* w = p.w + n0 * K;
  const bool ahead = n0 + 3 * NR <= p.N;  // prefetch as above
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
      if (ahead) __builtin_prefetch(w + (n + 2 * NR) * K + k);
      wv[n] = LoadBF16(w + n * K + k);
    }
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++) {
      const VF av = LoadBF16(a + r * K + k);
#pragma GCC unroll 16
      for (int n = 0; n < NR; n++) acc[r][n] = Fma(av, wv[n], acc[r][n]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; r++) {
#pragma GCC unroll 16
    for (int n = 0; n < NR; n++) {
      float s = HorizontalSum(acc[r][n]);
      for (size_t kk = k; kk < K; kk++) s = std::fma(BF16ToF32(a[r * K + kk]), BF16ToF32(w[n * K + kk]), s);
      Store(p, r0 + r, n0 + n, s);
    }
  }
}
#endif

constexpr int kGroup = 4;  // output channels per tile (NR)

using TileFn = void (*)(const Args&, int, int);
// Tile<1, NR> .. Tile<kMaxRows, NR>, indexed by rows - 1.
template <int NR, int... R>
constexpr auto Tiles(std::integer_sequence<int, R...>) {
  return std::array<TileFn, sizeof...(R)>{Tile<R + 1, NR>...};
}
constexpr auto kFull = Tiles<kGroup>(std::make_integer_sequence<int, kMaxRows>{});
constexpr auto kNarrow = Tiles<1>(std::make_integer_sequence<int, kMaxRows>{});

}  // namespace

void CpuFastBackend::MatmulBF16(float* out, const float* inp, const uint16_t* w, const float* bias, int M,
                                int N, int K) {
  if (M <= 0 || N <= 0) return;
  const size_t na = static_cast<size_t>(M) * K;
  uint16_t* a16 = bf16_acts_.As<uint16_t>(std::max<size_t>(na, 1));
  CastF32ToBF16(a16, inp, na);  // the same rounding as the reference's (FastOpsTest checks it bit for bit)
  const Args args{a16, w, bias, out, M, N, K};
  const int groups = (N + kGroup - 1) / kGroup;
  // As MatmulInt8: threads pay off for >= 4M multiply-adds or >= 2 MB of weights to stream.
  const size_t macs = static_cast<size_t>(M) * N * K, weight_bytes = 2ull * N * K;
  const bool parallel = macs >= (1 << 22) || weight_bytes >= (1 << 21);
#pragma omp parallel for schedule(static) if (parallel)
  for (int g = 0; g < groups; g++) {
    const int n0 = g * kGroup;
    const bool full = n0 + kGroup <= N;
    for (int r0 = 0; r0 < M; r0 += kMaxRows) {
      const int mr = std::min(kMaxRows, M - r0);
      if (full) {
        kFull[mr - 1](args, r0, n0);
      } else {
        for (int n = n0; n < N; n++) kNarrow[mr - 1](args, r0, n);
      }
    }
  }
}

}  // namespace tern
