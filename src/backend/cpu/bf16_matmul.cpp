// The fast CPU backend's MatmulBF16 (serving with --weights bf16):
//   out[M,N] = bf16(inp)[M,K] * W[N,K]^T + bias, W stored as bf16, the activations rounded to bf16 (nearest
//   even), exact bf16 products, fp32 sums.
//
// Why our own kernel: a decode step is bound by reading the weights at one row and by the multiply-adds at
// sixteen, and the rows must not change each other's results (below). oneDNN 2.6's bf16 brgemm is 2-3x faster
// than an FMA kernel at 16 rows but picks other kernels (other summation orders) for other row counts.
//
// Three kernels, chosen when the file is compiled (-march=native):
//  * AMX-BF16 (Intel Sapphire Rapids on), when the kernel grants the process the tile state and K % 32 == 0:
//    tdpbf16ps multiplies a 16-channel x 32-k tile of weights, loaded as stored ([N, K], a row stride of
//    2K bytes), by up to 16 rows of activations packed in pairs of k (the B operand), into a 16-channel x
//    rows fp32 tile: 8192 multiply-adds an instruction, so 16 rows cost about what one does and decode stays
//    bound by reading the weights at every batch size. The channels past the last 16 go to the kernel below.
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
// alone or batched (infer/engine_test.cpp depends on it). AMX computes every (channel, row) of a tile by the
// same circuit, so a row's sums do not depend on the tile's other rows either (bf16_weights_test checks it);
// which kernel a channel gets depends only on N, K and the machine. The kernels differ from each other in the
// last bits (vdpbf16ps adds its two products before the accumulator), so a machine's results are its own.
// One exception, asked for by the caller: row_independent = false (an engine of one stream, which never
// batches) sends a single row to vdpbf16ps even where AMX is granted: at one row it streams the weights
// faster than AMX's tile loads (docs/serving-speed.md, "One stream, one kernel choice").
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "backend/cpu/amx.h"
#include "backend/cpu/fast_ops.h"
#include "backend/cpu/fma_tile.h"

namespace tern {
namespace {

using fma_tile::HorizontalSum;
using fma_tile::VF;

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

// Rows [r0, r0 + MR) x channels [n0, n0 + NR): fma_tile.h's portable tile, prefetching as above.
template <int MR, int NR>
void Tile(const Args& p, int r0, int n0) {
  const size_t K = static_cast<size_t>(p.K);
  const bool ahead = n0 + 3 * NR <= p.N;
  fma_tile::Tile<MR, NR>(p.a + r0 * K, p.w + n0 * K, K, ahead ? 2 * NR * K : 0,
                         [&](int r, int n, float s) { Store(p, r0 + r, n0 + n, s); });
}
#endif

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__)
#define TERN_AMX 1
// Tiles: 0, 1 accumulate 16 channels x `cols` rows each (fp32); 2, 3 hold 16 channels x 32 k of weights;
// 4 holds 16 pairs of k x `cols` rows of activations. `cols` is M up to 16, and 16 for every row tile when
// M > 16 (the last one padded with zero rows): a row's sums do not depend on the other columns of its tile.
constexpr int kAmxChannels = 16, kAmxK = 32, kAmxMaxRows = 16;
// MatmulBF16 with row_independent false (an engine of one stream): fewer rows than this go to vdpbf16ps.
constexpr int kBf16AmxMinRows = 2;

void AmxConfigure(int cols) {
  amx::TileConfig cfg;
  for (int t = 0; t < 5; t++) cfg.rows[t] = 16;
  cfg.colsb[0] = cfg.colsb[1] = cfg.colsb[4] = static_cast<uint16_t>(cols * 4);
  cfg.colsb[2] = cfg.colsb[3] = 64;
  _tile_loadconfig(&cfg);
}

// Activations [M, K] (bf16) into row tiles of `cols` rows, pairs of k interleaved (tdpbf16ps's B operand):
// tile t holds packed[t * K * cols + (k / 2) * 2 * cols + 2 * r + k % 2] = a[t * cols + r, k], zero rows past
// M.
void AmxPackRows(uint16_t* packed, const uint16_t* a, int M, int K, int cols) {
  const int tiles = (M + cols - 1) / cols;
  for (int t = 0; t < tiles; t++) {
    uint16_t* dst = packed + static_cast<size_t>(t) * K * cols;
    for (int r = 0; r < cols; r++) {
      const int m = t * cols + r;
      for (int kp = 0; kp < K / 2; kp++) {
        uint16_t* d = dst + static_cast<size_t>(kp) * 2 * cols + 2 * r;
        if (m < M) {
          d[0] = a[static_cast<size_t>(m) * K + 2 * kp];
          d[1] = a[static_cast<size_t>(m) * K + 2 * kp + 1];
        } else {
          d[0] = d[1] = 0;
        }
      }
    }
  }
}

// Channels [n0, n0 + 16 * tiles) (tiles 1 or 2) for every row: the weights of the group (32 x 2K bytes,
// contiguous) stream from memory once and stay in L1/L2 while the row tiles pass over them.
void AmxGroup(const Args& p, const uint16_t* packed, int cols, int n0, int tiles) {
  const size_t K = static_cast<size_t>(p.K);
  const uint16_t* w = p.w + n0 * K;
  const int row_tiles = (p.M + cols - 1) / cols;
  alignas(64) float sums[kAmxChannels * kAmxMaxRows];
  for (int t = 0; t < row_tiles; t++) {
    const uint16_t* b = packed + static_cast<size_t>(t) * K * cols;
    _tile_zero(0);
    _tile_zero(1);
    for (size_t k = 0; k < K; k += kAmxK) {
      _tile_loadd(4, b + k * cols, cols * 4);
      _tile_loadd(2, w + k, K * 2);
      _tile_dpbf16ps(0, 2, 4);
      if (tiles == 2) {
        _tile_loadd(3, w + kAmxChannels * K + k, K * 2);
        _tile_dpbf16ps(1, 3, 4);
      }
    }
    for (int h = 0; h < tiles; h++) {
      if (h == 0) {
        _tile_stored(0, sums, cols * 4);
      } else {
        _tile_stored(1, sums, cols * 4);
      }
      const int rows = std::min(cols, p.M - t * cols);
      for (int r = 0; r < rows; r++)
        for (int c = 0; c < kAmxChannels; c++)
          Store(p, t * cols + r, n0 + h * kAmxChannels + c, sums[c * cols + r]);
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

// Channels [n_begin, N) through the vdpbf16ps or FMA tiles, split over the threads of an enclosing parallel
// region (or run alone outside one).
void VectorChannels(const Args& p, int n_begin) {
  const int groups = (p.N - n_begin + kGroup - 1) / kGroup;
#pragma omp for schedule(static) nowait
  for (int g = 0; g < groups; g++) {
    const int n0 = n_begin + g * kGroup;
    const bool full = n0 + kGroup <= p.N;
    for (int r0 = 0; r0 < p.M; r0 += kMaxRows) {
      const int mr = std::min(kMaxRows, p.M - r0);
      if (full) {
        kFull[mr - 1](p, r0, n0);
      } else {
        for (int n = n0; n < p.N; n++) kNarrow[mr - 1](p, r0, n);
      }
    }
  }
}

}  // namespace

void CpuFastBackend::MatmulBF16(float* out, const float* inp, const uint16_t* w, const float* bias, int M,
                                int N, int K, bool row_independent) {
  if (M <= 0 || N <= 0) return;
  const size_t na = static_cast<size_t>(M) * K;
#if defined(TERN_AMX)
  // A caller that never batches (row_independent false) gets vdpbf16ps for few rows: at one row it streams
  // the weights ~10 % faster than AMX's tile loads (docs/serving-speed.md), and no other row count shares its
  // bits.
  const bool use_amx =
      K % kAmxK == 0 && N >= kAmxChannels && amx::Granted() && (row_independent || M >= kBf16AmxMinRows);
  const int cols = std::min(M, kAmxMaxRows);
  const size_t packed_n = use_amx ? static_cast<size_t>((M + cols - 1) / cols) * cols * K : 0;
#else
  const size_t packed_n = 0;
#endif
  const size_t a16_n = fast::RoundUp(std::max<size_t>(na, 1), 32);  // keeps the packed rows 64-byte aligned
  uint16_t* a16 = bf16_acts_.As<uint16_t>(a16_n + packed_n);
  CastF32ToBF16(a16, inp, na);  // the same rounding as the reference's (FastOpsTest checks it bit for bit)
  const Args args{a16, w, bias, out, M, N, K};
  // As MatmulInt8: threads pay off for >= 4M multiply-adds or >= 256 KB of weights to stream.
  const size_t macs = static_cast<size_t>(M) * N * K, weight_bytes = 2ull * N * K;
  const bool parallel = macs >= (1 << 22) || weight_bytes >= (1 << 18);
#if defined(TERN_AMX)
  if (use_amx) {
    uint16_t* packed = a16 + a16_n;
    AmxPackRows(packed, a16, M, K, cols);
    const int amx_n = N / kAmxChannels * kAmxChannels;
    const int pairs = amx_n / (2 * kAmxChannels), odd = amx_n / kAmxChannels % 2;
#pragma omp parallel if (parallel)
    {
      AmxConfigure(cols);
#pragma omp for schedule(static) nowait
      for (int g = 0; g < pairs + odd; g++)
        AmxGroup(args, packed, cols, g * 2 * kAmxChannels, g < pairs ? 2 : 1);
      _tile_release();
      VectorChannels(args, amx_n);
    }
    return;
  }
#endif
#pragma omp parallel if (parallel)
  VectorChannels(args, 0);
}

}  // namespace tern
