// The fast CPU backend's MatmulF32Weights (serving with --weights fp32):
//   out[M,N] = inp[M,K] * W[N,K]^T + bias, everything fp32, products fused into the sums (FMA).
//
// Why our own kernel: one decode stream is bound by reading the weights (GPT-2 124M: 494 MB a token), and
// oneDNN's sgemm read them at 13-22 GB/s at one row on a 2-core Xeon VM that reads ~30 (it does not prefetch
// four interleaved weight rows far enough ahead). It also picks other kernels, with other summation orders,
// for other row counts, so a sequence would get different bits alone and batched.
//
// Measured 2026-12-04 on that VM (AVX-512, 2 threads, read bound 29-31 GB/s; weights evicted from every
// cache before each call, best of 20, three runs): one row reads the weights at 29.5-31.8 GB/s against
// oneDNN's 17-22 (1 x 50257 x 768 in 4.9-5.2 ms vs 7.2-7.3); 16 rows are faster than oneDNN too (16 x 3072 x
// 768 in 556-561 us vs 770-807). GPT-2 124M decodes 57-58 tok/s at one stream (was 42). Long prefills are
// slower than oneDNN's packed sgemm (2048 x 3072 x 768: 41-42 ms vs 31-32): dot-product tiles reach less of
// the FMA peak, the price of one summation order for every row count.
//
// The kernel is bf16_matmul.cpp's with fp32 weights (the portable tile and the lane sum are both files', in
// fma_tile.h): a tile is MR rows x NR = 4 output channels, k walked 16 (AVX-512), 8 (AVX2) or 4 (SSE2) lanes
// at a time; the threads split the output channels, and a group's weights stay in cache while every row tile
// of a block passes over them.
//  * AVX-512: 6 rows a tile (24 accumulators, 4 weight vectors and 1 activation vector of the 32 zmm); the
//    last K % 16 through masked loads, whose zeros add exact zeros, so every k goes through the same FMA.
//  * Otherwise: GCC vector extensions (AVX2+FMA: 8 lanes, SSE2: 4, multiply then add), 3 rows a tile (16
//    registers), the last K % lanes in a scalar fma after the lane sum.
//
// Row independence: each output is one accumulator per (row, channel) walking k in the same order, reduced
// lane by lane in a fixed order, whatever MR, the row block or the number of rows: a row gets bitwise the
// same result alone or batched (infer/engine_test.cpp and infer/f32_weights_test.cpp depend on it). The
// three kernels differ from each other (and from oneDNN) in the last bits, so a machine's results are its
// own.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "backend/cpu/fast_ops.h"
#include "backend/cpu/fma_tile.h"

namespace tern {
namespace {

using fma_tile::HorizontalSum;
using fma_tile::VF;

constexpr int kGroup = 4;  // output channels per tile (NR)
// How many tiles ahead the weights are prefetched. At one row each weight is read once, from memory, in four
// interleaved streams (one per channel of the tile), which the hardware prefetcher may not run far enough
// ahead of; the same k of the tile this many tiles on is asked for now. On the Xeon VM 2, 3, 4 and 8 tiles
// (and none) all read 28-31 GB/s at one row, within its noise; 2 is bf16_matmul.cpp's distance, which paid
// on a Zen 5 (docs/serving-speed.md). It changes no result.
constexpr int kAhead = 2;

struct Args {
  const float* a;     // [M, K] activations
  const float* w;     // [N, K]
  const float* bias;  // [N] or null
  float* c;           // [M, N]
  int M, N, K;
};

// Writes output (row r, channel n): the lane sum plus the bias.
inline void Store(const Args& p, int r, int n, float s) {
  if (p.bias) s += p.bias[n];
  p.c[static_cast<size_t>(r) * p.N + n] = s;
}

#if defined(__AVX512F__)
constexpr int kMaxRows = 6;  // rows per tile (MR)

// One step of 16 k (a masked one for the last K % 16): the tile's weights (and those of the tile kAhead on),
// then each row's activations times them. Always inlined, into two loops of Tile below: GCC keeps the 24
// accumulators in registers (checked in the assembly), and the whole steps do not compute a mask (7 % at 16
// rows against one loop computing it every step).
template <int MR, int NR>
__attribute__((always_inline)) inline void Step(__m512 (&acc)[MR][NR], const float* a, const float* w,
                                                size_t K, size_t k, __mmask16 mask, bool ahead) {
  __m512 wv[NR];
#pragma GCC unroll 16
  for (int n = 0; n < NR; n++) {
    if (ahead) __builtin_prefetch(w + (n + kAhead * NR) * K + k);
    wv[n] = _mm512_maskz_loadu_ps(mask, w + n * K + k);
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; r++) {
    const __m512 av = _mm512_maskz_loadu_ps(mask, a + r * K + k);
#pragma GCC unroll 16
    for (int n = 0; n < NR; n++) acc[r][n] = _mm512_fmadd_ps(av, wv[n], acc[r][n]);
  }
}

// Rows [r0, r0 + MR) x channels [n0, n0 + NR). `prefetch`: the first row tile of a block asks for the weights
// ahead; the later ones find them in cache (asking again cost up to 15 % at 16 rows).
template <int MR, int NR>
void Tile(const Args& p, int r0, int n0, bool prefetch) {
  const size_t K = static_cast<size_t>(p.K);
  const float* a = p.a + r0 * K;
  const float* w = p.w + n0 * K;
  const bool ahead = prefetch && n0 + (kAhead + 1) * NR <= p.N;
  __m512 acc[MR][NR];
#pragma GCC unroll 16
  for (int r = 0; r < MR; r++)
#pragma GCC unroll 16
    for (int n = 0; n < NR; n++) acc[r][n] = _mm512_setzero_ps();
  // Masked loads' zeros add exact zeros: every k goes through the same FMA, whole step or last.
  const size_t K16 = K & ~size_t{15};
  for (size_t k = 0; k < K16; k += 16) Step<MR, NR>(acc, a, w, K, k, 0xffff, ahead);
  if (K16 < K) {
    Step<MR, NR>(acc, a, w, K, K16, static_cast<__mmask16>((1u << (K - K16)) - 1), ahead);
  }
  // Unrolled, so that every index is a constant: a variable index kept the accumulators in memory.
#pragma GCC unroll 16
  for (int r = 0; r < MR; r++)
#pragma GCC unroll 16
    for (int n = 0; n < NR; n++) Store(p, r0 + r, n0 + n, HorizontalSum((VF)acc[r][n]));
}
#else
constexpr int kMaxRows = 3;  // rows per tile (MR): 12 accumulators and 4 weight vectors

// Rows [r0, r0 + MR) x channels [n0, n0 + NR): fma_tile.h's portable tile, prefetching as above.
template <int MR, int NR>
void Tile(const Args& p, int r0, int n0, bool prefetch) {
  const size_t K = static_cast<size_t>(p.K);
  const bool ahead = prefetch && n0 + (kAhead + 1) * NR <= p.N;
  fma_tile::Tile<MR, NR>(p.a + r0 * K, p.w + n0 * K, K, ahead ? kAhead * NR * K : 0,
                         [&](int r, int n, float s) { Store(p, r0 + r, n0 + n, s); });
}
#endif

using TileFn = void (*)(const Args&, int, int, bool);
// Tile<1, NR> .. Tile<kMaxRows, NR>, indexed by rows - 1.
template <int NR, int... R>
constexpr auto Tiles(std::integer_sequence<int, R...>) {
  return std::array<TileFn, sizeof...(R)>{Tile<R + 1, NR>...};
}
constexpr auto kFull = Tiles<kGroup>(std::make_integer_sequence<int, kMaxRows>{});
constexpr auto kNarrow = Tiles<1>(std::make_integer_sequence<int, kMaxRows>{});

}  // namespace

void CpuFastBackend::MatmulF32Weights(float* out, const float* inp, const float* w, const float* bias, int M,
                                      int N, int K) {
  if (M <= 0 || N <= 0) return;
  const Args args{inp, w, bias, out, M, N, K};
  const int groups = (N + kGroup - 1) / kGroup;
  // As MatmulInt8: threads pay off for >= 4M multiply-adds or >= 256 KB of weights to stream.
  const size_t macs = static_cast<size_t>(M) * N * K, weight_bytes = 4ull * N * K;
  const bool parallel = macs >= (1 << 22) || weight_bytes >= (1 << 18);
  // Rows in blocks of about 512 KB of activations (a multiple of the tile): a block stays in L2 while every
  // channel group passes over it. Without blocks a long prefill (tern eval runs 2048 rows) read all its
  // activations again from L3 for every group of 4 channels: 2048 x 3072 x 768 took 85 ms, blocked 41-42.
  // Decode batches are one block.
  const size_t block_floats = size_t{128} << 10;
  const int block = std::max(kMaxRows, static_cast<int>(block_floats / std::max(K, 1)) / kMaxRows * kMaxRows);
#pragma omp parallel if (parallel)
  for (int b0 = 0; b0 < M; b0 += block) {
    const int b1 = std::min(M, b0 + block);
#pragma omp for schedule(static)
    for (int g = 0; g < groups; g++) {
      const int n0 = g * kGroup;
      const bool full = n0 + kGroup <= N;
      for (int r0 = b0; r0 < b1; r0 += kMaxRows) {
        const int mr = std::min(kMaxRows, b1 - r0);
        if (full) {
          kFull[mr - 1](args, r0, n0, r0 == b0);
        } else {
          for (int n = n0; n < N; n++) kNarrow[mr - 1](args, r0, n, r0 == b0);
        }
      }
    }
  }
}

}  // namespace tern
