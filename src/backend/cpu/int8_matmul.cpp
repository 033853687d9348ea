// MatmulInt8 for the fast CPU backend with AVX-512 VNNI (vpdpbusd: 64 int8 multiply-adds per instruction,
// four times the multiply-adds of an fp32 FMA and a quarter of the weight bytes to stream).
//
// 1. Each activation row is quantised to int8 with its own scale (backend.h states the rounding), and its
//    int8 sum is kept.
// 2. vpdpbusd multiplies unsigned by signed bytes. The weights are made unsigned on load
//    (w ^ 0x80 = w + 128), so the dot product comes out as sum(a * w) + 128 * sum(a); the row sum removes the
//    excess exactly.
// 3. A micro-tile is MR rows (up to 16) x NG groups of 16 output channels, MR * NG <= 16 zmm accumulators;
//    per step of 4 k it loads NG weight vectors (64 bytes each, the packed layout of backend.h) and
//    broadcasts 4 activation bytes per row. A decode batch of 16 rows is one tile: each weight vector is
//    loaded and flipped once per step for all rows (4-row tiles reloaded it 4 times: 10% slower in the
//    model, whose weights stream from DRAM).
// The int32 sums are exact, so results do not depend on tiling, threads or which rows share the batch.
// GCC 12's AVX-512 headers start some intrinsics from an undefined register and then warn about it.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#include "backend/cpu/fast_ops.h"

namespace tern {

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
namespace {

// a[0..K) = nearbyint(x * 127 / max|x|) (the current rounding mode: nearest even, as the reference);
// returns the row sum of a and sets *row_scale = max|x| / 127.
int32_t QuantizeRow(const float* x, int K, int8_t* a, float* row_scale) {
  __m512 vmax = _mm512_setzero_ps();
  int k = 0;
  for (; k + 16 <= K; k += 16) vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_loadu_ps(x + k)));
  float m = _mm512_reduce_max_ps(vmax);
  for (; k < K; k++) m = std::max(m, std::fabs(x[k]));
  const float inv = m > 0.0f ? 127.0f / m : 0.0f;
  *row_scale = m / 127.0f;
  const __m512 vinv = _mm512_set1_ps(inv);
  __m512i vsum = _mm512_setzero_si512();
  for (k = 0; k + 16 <= K; k += 16) {
    __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + k), vinv));
    vsum = _mm512_add_epi32(vsum, q);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(a + k), _mm512_cvtsepi32_epi8(q));
  }
  int32_t sum = _mm512_reduce_add_epi32(vsum);
  for (; k < K; k++) {
    int32_t q = static_cast<int32_t>(std::nearbyint(x[k] * inv));
    a[k] = static_cast<int8_t>(q);
    sum += q;
  }
  return sum;
}

constexpr int kGroupsPerBlock = 4;  // 64 output channels: K*64 bytes of weights stay in L1/L2 across rows
constexpr int kRowsPerBlock = 64;   // rows per work item, so large prefills also split over threads

struct Int8Args {
  const int8_t* a;         // [N, K] quantised activations
  const float* row_scale;  // [N]
  const int32_t* row_sum;  // [N]
  const int8_t* w;         // packed weights
  const float* w_scale;    // [OC]
  const float* bias;       // [OC] or null
  float* out;              // [N, OC]
  int N, OC, K;
};

// Rows [r0, r0 + MR) x groups [g0, g0 + NG) of 16 output channels. With `next` set, also asks for the
// weights of the NG groups at `next` to be brought into the cache, a line per group and step of 4 k: the
// tiles of a block's first rows prefetch the same groups of the next block, whose weights come from DRAM (a
// decode step reads every weight once), spread evenly over the block's work; later row tiles find theirs
// in L1/L2.
template <int MR, int NG>
void MicroTile(const Int8Args& p, int r0, int g0, const int8_t* next) {
  const int K4 = p.K / 4;
  __m512i acc[MR][NG];
  for (int r = 0; r < MR; r++)
    for (int g = 0; g < NG; g++) acc[r][g] = _mm512_setzero_si512();
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const int8_t* wg = p.w + static_cast<size_t>(g0) * K4 * 64;
  const int8_t* arow = p.a + static_cast<size_t>(r0) * p.K;
  for (int k4 = 0; k4 < K4; k4++) {
    if (next)
      for (int g = 0; g < NG; g++) __builtin_prefetch(next + (static_cast<size_t>(g) * K4 + k4) * 64);
    __m512i wv[NG];
    for (int g = 0; g < NG; g++)
      wv[g] = _mm512_xor_si512(_mm512_loadu_si512(wg + (static_cast<size_t>(g) * K4 + k4) * 64), flip);
    for (int r = 0; r < MR; r++) {
      int32_t four;
      std::memcpy(&four, arow + static_cast<size_t>(r) * p.K + 4 * k4, 4);
      const __m512i av = _mm512_set1_epi32(four);
      for (int g = 0; g < NG; g++) acc[r][g] = _mm512_dpbusd_epi32(acc[r][g], wv[g], av);
    }
  }
  for (int r = 0; r < MR; r++) {
    const int n = r0 + r;
    const __m512i excess = _mm512_set1_epi32(128 * p.row_sum[n]);
    const __m512 rs = _mm512_set1_ps(p.row_scale[n]);
    for (int g = 0; g < NG; g++) {
      const int o0 = (g0 + g) * 16;
      const int valid = std::min(16, p.OC - o0);
      const __mmask16 mask =
          valid == 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << valid) - 1);
      const __m512 sums = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][g], excess));
      const __m512 scale = _mm512_mul_ps(rs, _mm512_maskz_loadu_ps(mask, p.w_scale + o0));
      __m512 y = _mm512_mul_ps(sums, scale);
      if (p.bias) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(mask, p.bias + o0));
      _mm512_mask_storeu_ps(p.out + static_cast<size_t>(n) * p.OC + o0, mask, y);
    }
  }
}

using TileFn = void (*)(const Int8Args&, int, int, const int8_t*);

// Row tile shapes: a tile of MR rows covers NG groups, MR * NG <= 16 accumulators. Up to 16 rows share one
// weight load (and its unsigned flip), so a decode batch of 16 reads each weight vector once per step.
constexpr int kMaxTileRows = 16;
constexpr int GroupsPerTile(int mr) {
  return mr <= 4 ? 4 : mr <= 8 ? 2 : 1;
}
template <int... MR>
constexpr std::array<TileFn, sizeof...(MR)> MakeTiles(std::integer_sequence<int, MR...>) {
  return {MicroTile<MR + 1, GroupsPerTile(MR + 1)>...};
}
// Short tiles (the last groups of a matrix whose OC is not a multiple of 64) use NG = 1 for every MR.
template <int... MR>
constexpr std::array<TileFn, sizeof...(MR)> MakeNarrowTiles(std::integer_sequence<int, MR...>) {
  return {MicroTile<MR + 1, 1>...};
}
constexpr auto kTiles = MakeTiles(std::make_integer_sequence<int, kMaxTileRows>{});
constexpr auto kNarrowTiles = MakeNarrowTiles(std::make_integer_sequence<int, kMaxTileRows>{});

}  // namespace

void CpuFastBackend::MatmulInt8(float* out, const float* inp, const int8_t* w, const float* w_scale,
                                const float* bias, int N, int OC, int K) {
  if (N <= 0 || OC <= 0) return;
  const size_t a_bytes = fast::RoundUp(static_cast<size_t>(N) * K, 64);
  char* scratch = int8_acts_.As<char>(a_bytes + 8 * static_cast<size_t>(N));
  int8_t* a = reinterpret_cast<int8_t*>(scratch);
  float* row_scale = reinterpret_cast<float*>(scratch + a_bytes);
  int32_t* row_sum = reinterpret_cast<int32_t*>(row_scale + N);
#pragma omp parallel for schedule(static) if (static_cast <size_t>(N) * K >= (1 << 16))
  for (int n = 0; n < N; n++)
    row_sum[n] =
        QuantizeRow(inp + static_cast<size_t>(n) * K, K, a + static_cast<size_t>(n) * K, &row_scale[n]);

  const Int8Args args{a, row_scale, row_sum, w, w_scale, bias, out, N, OC, K};
  const int groups = (OC + 15) / 16;
  const int gblocks = (groups + kGroupsPerBlock - 1) / kGroupsPerBlock;
  const int rblocks = (N + kRowsPerBlock - 1) / kRowsPerBlock;
  // Threads pay off for compute (>= 4M multiply-adds, ~20 us on one core) or for streaming >= 2 MB of
  // weights from DRAM; below both, waking a worker costs more than it saves.
  const size_t macs = static_cast<size_t>(N) * OC * K, weight_bytes = static_cast<size_t>(OC) * K;
  const bool parallel = macs >= (1 << 22) || weight_bytes >= (1 << 21);
#pragma omp parallel for schedule(static) collapse(2) if (parallel)
  for (int rb = 0; rb < rblocks; rb++) {
    for (int gb = 0; gb < gblocks; gb++) {
      const int g0 = gb * kGroupsPerBlock, ng = std::min(kGroupsPerBlock, groups - g0);
      const int r_end = std::min(N, (rb + 1) * kRowsPerBlock);
      // the next block's weights (full blocks only: the last one may be short)
      const int8_t* next =
          gb + 2 < gblocks ? w + static_cast<size_t>(g0 + kGroupsPerBlock) * (K / 4) * 64 : nullptr;
      for (int r0 = rb * kRowsPerBlock; r0 < r_end; r0 += kMaxTileRows) {
        const int mr = std::min(kMaxTileRows, r_end - r0);
        // A block short of groups (the matrix's last) takes them one at a time.
        const bool full = ng == kGroupsPerBlock;
        const TileFn tile = full ? kTiles[mr - 1] : kNarrowTiles[mr - 1];
        const bool prefetch = next && r0 == rb * kRowsPerBlock;
        for (int g = 0; g < ng; g += full ? GroupsPerTile(mr) : 1)
          tile(args, r0, g0 + g, prefetch ? next + static_cast<size_t>(g) * (K / 4) * 64 : nullptr);
      }
    }
  }
}

#else  // no AVX-512 VNNI at compile time: the reference defines the result

void CpuFastBackend::MatmulInt8(float* out, const float* inp, const int8_t* w, const float* w_scale,
                                const float* bias, int N, int OC, int K) {
  CpuReferenceBackend::MatmulInt8(out, inp, w, w_scale, bias, N, OC, K);
}

#endif

}  // namespace tern
