// MatmulInt4 for the fast CPU backend (backend.h states the arithmetic and the packing): 4-bit weights in
// groups of 64 k with a scale per channel and group, int8 activations, vpdpbusd (AVX-512 VNNI).
//
// A decode step streams every weight from DRAM once, so its time is the weights' bytes: 4.5 bits a weight
// here (a nibble, and a 4-byte scale per 64) against int8's 8, bf16's 16. The kernel keeps the arithmetic of
// the int8 one (int8_matmul.cpp) and unpacks in registers:
// 1. Each activation row is quantised to int8 as MatmulInt8 does, in panels of 16 rows that keep a step's 4
//    bytes of each row side by side, and its sum over every group of 64 k is kept.
// 2. 64 bytes of weights are two steps of 4 k for 16 channels: the low nibbles (AND 0x0F) are the first step,
//    each 0..15 = w + 8, already the unsigned operand vpdpbusd takes; the high nibbles are taken in place
//    (AND 0xF0: 16 (w + 8), no shift) into an accumulator of their own, which is exactly 16 times their sum
//    and is shifted back once a group. A group's int32 sum is then sum(a * w) + 8 * sum(a), and the row's
//    group sum removes the excess exactly. (Shifting every high nibble down cost a third more instructions
//    per weight byte: one stream's layer matmuls read 21 GB/s on one core that way, 31 GB/s this way.)
// 3. At the end of each group of 64 k the exact int32 sums are converted and added into fp32 accumulators
//    with the group's 16 channel scales (one FMA, as the reference's std::fma), so the result is bitwise the
//    reference's whatever the tiling, the threads or the rows that share the batch.
// A micro-tile is MR rows x NG groups of 16 channels (1 x 4, 2-4 x 2, 5-8 x 1): 2 MR NG int32 and MR NG fp32
// accumulators and the 2 NG unpacked weight vectors stay in the 32 zmm registers. A block's first row tile
// prefetches the next block's weights (as MatmulInt8). Batched decode is compute-bound, and there int8 is
// faster (16 streams of GPT-2 124M: int4 0.8x int8 on a Zen 5): int4 is for one or a few streams, and for
// models that need the memory.
// Without AVX-512 VNNI the reference runs (correct, not fast: Capabilities::int4_weights is then false, and
// tern serve refuses int4 with the fix named).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>
#include <utility>

#include "backend/cpu/fast_ops.h"
#include "backend/cpu/vnni.h"

namespace tern {

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
namespace {

constexpr int kInt4Group = 64;        // k per scale (backend.h)
constexpr int kInt4GroupBytes = 512;  // 16 channels x 64 k, a nibble each

// The reference's activations (backend.h, MatmulInt8) for one row: a(k) as the int32 of 4 bytes
// steps[(k / 4) * stride], the sum of a over each group of 64 k in group_sums[K / 64]; returns the row scale.
float QuantizeInt4Row(const float* x, int K, int32_t* steps, int stride, int32_t* group_sums) {
  __m512 vmax = _mm512_setzero_ps();
  for (int k = 0; k < K; k += 16) vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_loadu_ps(x + k)));
  const float m = _mm512_reduce_max_ps(vmax);
  const __m512 vinv = _mm512_set1_ps(m > 0.0f ? 127.0f / m : 0.0f);
  for (int j = 0; j < K / kInt4Group; j++) {
    __m512i vsum = _mm512_setzero_si512();
    for (int k = j * kInt4Group; k < (j + 1) * kInt4Group; k += 16) {
      const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + k), vinv));
      vsum = _mm512_add_epi32(vsum, q);
      alignas(16) int32_t four[4];
      _mm_store_si128(reinterpret_cast<__m128i*>(four), _mm512_cvtsepi32_epi8(q));
      for (int t = 0; t < 4; t++) steps[static_cast<size_t>(k / 4 + t) * stride] = four[t];
    }
    group_sums[j] = _mm512_reduce_add_epi32(vsum);
  }
  return m / 127.0f;
}

struct Int4Args {
  const int32_t* a;          // quantised activations in panels of 16 rows, [K / 4][R] int32 each (R rows)
  const float* row_scale;    // [N]
  const int32_t* group_sum;  // [N, K / 64]
  const uint8_t* w;          // packed weights
  const float* w_scale;      // [groups of 16 channels, K / 64, 16]
  const float* bias;         // [OC] or null
  float* out;                // [N, OC]
  int N, OC, K;
};

// Rows [r0, r0 + MR) x channel groups [g0, g0 + NG); r0 is a multiple of 8, so the rows lie in one panel of
// 16. Loops over rows and groups are unrolled so that the accumulators stay in registers.
template <int MR, int NG>
void Int4Tile(const Int4Args& p, int r0, int g0, const uint8_t* next) {
  const int G = p.K / kInt4Group, panel0 = r0 / 16 * 16, panel_rows = std::min(16, p.N - panel0);
  const int32_t* a0 = p.a + static_cast<size_t>(panel0) * (p.K / 4) + (r0 - panel0);
  const __m512i low_nibbles = _mm512_set1_epi8(0x0F),
                high_nibbles = _mm512_set1_epi8(static_cast<char>(0xF0));
  __m512 facc[MR][NG];
#pragma GCC unroll 8
  for (int r = 0; r < MR; r++)
#pragma GCC unroll 8
    for (int g = 0; g < NG; g++) facc[r][g] = _mm512_setzero_ps();
  for (int j = 0; j < G; j++) {
    // The low nibbles' products and the high nibbles' (times 16) in accumulators of their own.
    __m512i acc[MR][NG], acc16[MR][NG];
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 8
      for (int g = 0; g < NG; g++) acc[r][g] = acc16[r][g] = _mm512_setzero_si512();
    const uint8_t* wj = p.w + (static_cast<size_t>(g0) * G + j) * kInt4GroupBytes;
    const int32_t* ap = a0 + static_cast<size_t>(j) * 16 * panel_rows;  // step 16 j of the panel
    for (int s = 0; s < 8; s++, ap += 2 * panel_rows) {
      __m512i lo[NG], hi[NG];
#pragma GCC unroll 8
      for (int g = 0; g < NG; g++) {
        if (next) __builtin_prefetch(next + (static_cast<size_t>(g) * G + j) * kInt4GroupBytes + s * 64);
        const __m512i raw = _mm512_loadu_si512(wj + static_cast<size_t>(g) * G * kInt4GroupBytes + s * 64);
        lo[g] = _mm512_and_si512(raw, low_nibbles);
        hi[g] = _mm512_and_si512(raw, high_nibbles);  // 16 (w + 8): no shift
      }
#pragma GCC unroll 8
      for (int r = 0; r < MR; r++)
#pragma GCC unroll 8
        for (int g = 0; g < NG; g++) {
          acc[r][g] = fast::DotBroadcast(acc[r][g], lo[g], ap + r);
          acc16[r][g] = fast::DotBroadcast(acc16[r][g], hi[g], ap + panel_rows + r);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
      const __m512i excess = _mm512_set1_epi32(8 * p.group_sum[static_cast<size_t>(r0 + r) * G + j]);
#pragma GCC unroll 8
      for (int g = 0; g < NG; g++) {
        // acc16 is exactly 16 times the high nibbles' sum: the shift divides without rounding.
        acc[r][g] = _mm512_add_epi32(acc[r][g], _mm512_srai_epi32(acc16[r][g], 4));
        const __m512 scale = _mm512_loadu_ps(p.w_scale + ((static_cast<size_t>(g0) + g) * G + j) * 16);
        facc[r][g] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][g], excess)), scale, facc[r][g]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; r++) {
    const int n = r0 + r;
    const __m512 rs = _mm512_set1_ps(p.row_scale[n]);
#pragma GCC unroll 8
    for (int g = 0; g < NG; g++) {
      const int o0 = (g0 + g) * 16, valid = std::min(16, p.OC - o0);
      const __mmask16 mask =
          valid == 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << valid) - 1);
      const __m512 y = p.bias ? _mm512_fmadd_ps(facc[r][g], rs, _mm512_maskz_loadu_ps(mask, p.bias + o0))
                              : _mm512_mul_ps(facc[r][g], rs);
      _mm512_mask_storeu_ps(p.out + static_cast<size_t>(n) * p.OC + o0, mask, y);
    }
  }
}

using Int4TileFn = void (*)(const Int4Args&, int, int, const uint8_t*);
constexpr int kInt4TileRows = 8;
constexpr int Int4GroupsPerTile(int mr) {
  return mr == 1 ? 4 : mr <= 4 ? 2 : 1;
}
template <int... MR>
constexpr std::array<Int4TileFn, sizeof...(MR)> MakeInt4Tiles(std::integer_sequence<int, MR...>) {
  return {Int4Tile<MR + 1, Int4GroupsPerTile(MR + 1)>...};
}
template <int... MR>
constexpr std::array<Int4TileFn, sizeof...(MR)> MakeNarrowInt4Tiles(std::integer_sequence<int, MR...>) {
  return {Int4Tile<MR + 1, 1>...};
}
constexpr auto kInt4Tiles = MakeInt4Tiles(std::make_integer_sequence<int, kInt4TileRows>{});
constexpr auto kNarrowInt4Tiles = MakeNarrowInt4Tiles(std::make_integer_sequence<int, kInt4TileRows>{});

constexpr int kInt4BlockGroups = 4;  // 64 channels a work item: their K/2 bytes of weights stay in L1/L2
constexpr int kInt4BlockRows = 64;   // rows a work item, so that large prefills split over threads too

}  // namespace

void CpuFastBackend::MatmulInt4(float* out, const float* inp, const uint8_t* w, const float* w_scale,
                                const float* bias, int N, int OC, int K) {
  if (N <= 0 || OC <= 0) return;
  assert(K % kInt4Group == 0);
  // Scratch: the quantised rows in panels of 16 rows as MatmulInt8's, then the row scales and group sums.
  const int K4 = K / 4, G = K / kInt4Group, panels = (N + 15) / 16;
  const size_t panel_bytes = fast::RoundUp(static_cast<size_t>(N) * K, 64);
  char* scratch =
      int8_acts_.As<char>(panel_bytes + sizeof(float) * N + sizeof(int32_t) * static_cast<size_t>(N) * G);
  int32_t* a_panels = reinterpret_cast<int32_t*>(scratch);
  float* row_scale = reinterpret_cast<float*>(scratch + panel_bytes);
  int32_t* group_sum = reinterpret_cast<int32_t*>(row_scale + N);
#pragma omp parallel for schedule(static) if (static_cast <size_t>(N) * K >= (1 << 16))
  for (int pn = 0; pn < panels; pn++) {
    const int rows = std::min(16, N - 16 * pn);
    int32_t* panel = a_panels + static_cast<size_t>(pn) * 16 * K4;
    for (int r = 0; r < rows; r++) {
      const int n = 16 * pn + r;
      row_scale[n] = QuantizeInt4Row(inp + static_cast<size_t>(n) * K, K, panel + r, rows,
                                     group_sum + static_cast<size_t>(n) * G);
    }
  }
  const Int4Args args{a_panels, row_scale, group_sum, w, w_scale, bias, out, N, OC, K};
  // Threads as MatmulInt8: for >= 4M multiply-adds or >= 256 KB of weights to stream.
  const size_t macs = static_cast<size_t>(N) * OC * K, weight_bytes = static_cast<size_t>(OC) * K / 2;
  const bool parallel = macs >= (1 << 22) || weight_bytes >= (1 << 18);
  const int groups = (OC + 15) / 16;
  const int gblocks = (groups + kInt4BlockGroups - 1) / kInt4BlockGroups;
  const int rblocks = (N + kInt4BlockRows - 1) / kInt4BlockRows;
#pragma omp parallel for schedule(static) collapse(2) if (parallel)
  for (int rb = 0; rb < rblocks; rb++) {
    for (int gb = 0; gb < gblocks; gb++) {
      const int g0 = gb * kInt4BlockGroups, ng = std::min(kInt4BlockGroups, groups - g0);
      const int r_end = std::min(N, (rb + 1) * kInt4BlockRows);
      const bool full = ng == kInt4BlockGroups;  // a block short of groups takes them one at a time
      for (int r0 = rb * kInt4BlockRows; r0 < r_end; r0 += kInt4TileRows) {
        const int mr = std::min(kInt4TileRows, r_end - r0);
        const Int4TileFn tile = full ? kInt4Tiles[mr - 1] : kNarrowInt4Tiles[mr - 1];
        // The block's first row tile brings the next block's weights (the same groups' lines, one per line
        // it reads) into the cache while it works: a decode step reads every weight from DRAM once.
        const uint8_t* next = gb + 2 < gblocks && r0 == rb * kInt4BlockRows
                                  ? w + static_cast<size_t>(g0 + kInt4BlockGroups) * G * kInt4GroupBytes
                                  : nullptr;
        for (int g = 0; g < ng; g += full ? Int4GroupsPerTile(mr) : 1)
          tile(args, r0, g0 + g, next ? next + static_cast<size_t>(g) * G * kInt4GroupBytes : nullptr);
      }
    }
  }
}

#else  // without AVX-512 VNNI at compile time the reference computes it

void CpuFastBackend::MatmulInt4(float* out, const float* inp, const uint8_t* w, const float* w_scale,
                                const float* bias, int N, int OC, int K) {
  CpuReferenceBackend::MatmulInt4(out, inp, w, w_scale, bias, N, OC, K);
}

#endif

}  // namespace tern
