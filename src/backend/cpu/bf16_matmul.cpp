// The fast CPU backend's matmul with bf16 weights and fp32 activations (serving with --weights bf16):
//   out[M,N] = inp[M,K] * W[N,K]^T + bias, W stored as bf16, products and sums in fp32.
//
// Why our own kernel: oneDNN 2.6 multiplies bf16 only as bf16 x bf16 and only with AVX512-BF16 or AMX; on an
// AVX2 CPU (AMD Zen 3) it has no bf16 implementation at all, and widening the weights to fp32 first writes
// twice the bytes the matmul then reads again. A decode step is bound by reading the weights, so the kernel
// reads each bf16 weight once and widens it in registers (a zero-extend and a shift: bf16 is the top half of
// an fp32). bench/serve_load.cpp (`serve_load bandwidth`) compares it with oneDNN on the decode shapes.
//
// Written with GCC vector extensions of the widest float vector the build targets (16 lanes with AVX-512, 8
// with AVX2, 4 with the baseline SSE2 of any x86-64), so one kernel serves every CPU tern compiles for.
// A tile is MR rows x NR output channels (MR * NR accumulators + NR weight vectors <= 16 registers); the
// threads split the output channels, and a group's weights stay in L1 while every row tile passes over them.
//
// Row independence: each output is one accumulator per (row, channel) walking k in the same order, reduced
// lane by lane in a fixed order, whatever MR or the number of rows: a row gets bitwise the same result
// alone or batched (infer/engine_test.cpp depends on it).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

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

inline VF LoadF32(const float* p) {
  VF v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline VF LoadBF16(const uint16_t* p) {
  VH h;
  std::memcpy(&h, p, sizeof h);
  const VU u = __builtin_convertvector(h, VU) << 16;
  VF f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

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
  const float* a;     // [M, K]
  const uint16_t* w;  // [N, K]
  const float* bias;  // [N] or null
  float* c;           // [M, N]
  int M, N, K;
};

// Rows [r0, r0 + MR) x channels [n0, n0 + NR).
template <int MR, int NR>
void Tile(const Args& p, int r0, int n0) {
  const size_t K = static_cast<size_t>(p.K);
  const float* a = p.a + r0 * K;
  const uint16_t* w = p.w + n0 * K;
  // One stream (M = 1) reads each weight once, from memory: the hardware prefetcher does not run far enough
  // ahead of 4 interleaved rows, so the same k of the tile two tiles on is asked for now (2x on GPT-2's LM
  // head on an AVX-512 Zen 5). A prefetch changes no result.
  const bool ahead = n0 + 3 * NR <= p.N;
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
      const VF av = LoadF32(a + r * K + k);
#pragma GCC unroll 16
      for (int n = 0; n < NR; n++) acc[r][n] = Fma(av, wv[n], acc[r][n]);
    }
  }
  for (int r = 0; r < MR; r++) {
    for (int n = 0; n < NR; n++) {
      float s = HorizontalSum(acc[r][n]);
      for (size_t kk = k; kk < K; kk++) s = std::fma(a[r * K + kk], BF16ToF32(w[n * K + kk]), s);
      if (p.bias) s += p.bias[n0 + n];
      p.c[static_cast<size_t>(r0 + r) * p.N + n0 + n] = s;
    }
  }
}

constexpr int kGroup = 4;    // output channels per tile (NR)
constexpr int kMaxRows = 3;  // rows per tile (MR): 12 accumulators and 4 weight vectors

using TileFn = void (*)(const Args&, int, int);
constexpr TileFn kFull[kMaxRows] = {Tile<1, kGroup>, Tile<2, kGroup>, Tile<3, kGroup>};
constexpr TileFn kNarrow[kMaxRows] = {Tile<1, 1>, Tile<2, 1>, Tile<3, 1>};

}  // namespace

void CpuFastBackend::MatmulBF16Weights(float* c, const float* a, const uint16_t* w, const float* bias, int M,
                                       int N, int K) {
  const Args args{a, w, bias, c, M, N, K};
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
