// MatmulInt8 for the fast CPU backend with AVX-512 VNNI (vpdpbusd: 64 int8 multiply-adds per instruction,
// four times the multiply-adds of an fp32 FMA and a quarter of the weight bytes to stream); on AVX2 CPUs a
// vpmaddubsw kernel (after the AVX-512 one, below); without either the reference.
//
// 1. Each activation row is quantised to int8 with its own scale (backend.h states the rounding), and its
//    int8 sum is kept.
// 2. vpdpbusd multiplies unsigned by signed bytes. The weights are made unsigned on load
//    (w ^ 0x80 = w + 128), so the dot product comes out as sum(a * w) + 128 * sum(a); the row sum removes the
//    excess exactly.
// 3. A micro-tile is MR rows (up to 16) x NG groups of 16 output channels, MR * NG <= 16 zmm accumulators;
//    per step of 4 k it loads NG weight vectors (64 bytes each, the packed layout of backend.h) and takes
//    each row's 4 activation bytes as the embedded broadcast operand of its vpdpbusd, from a panel that
//    keeps the 16 rows' bytes of a step side by side. A decode batch of 16 rows is one tile: each weight
//    vector is loaded and flipped once per step for all rows (4-row tiles reloaded it 4 times: 10% slower
//    in the model, whose weights stream from DRAM). The inner loop is then 16 vpdpbusd and one load and
//    flip: 1.6x the multiply-adds per second of the intrinsics GCC 12 compiled (DotBroadcast).
// The int32 sums are exact, so results do not depend on tiling, threads or which rows share the batch.
// 4. On AMX-INT8 CPUs (when Linux grants the tile state and K % 64 == 0) tdpbssd multiplies signed by signed
//    bytes, 16 rows x 16 channels x 64 k an instruction: the packed layout of a group's 64 k is exactly a
//    1 KB weight tile (16 rows of 4 k for 16 channels), read contiguously. Its int32 sums are the same exact
//    integers, and the epilogue is the same arithmetic, so AMX gives bitwise the results of vpdpbusd, and
//    the row count may pick the kernel: AMX from 8 rows (GPT-2 124M decode at 16 streams: 1751-1786 tok/s vs
//    1478 with vpdpbusd), vpdpbusd below (one stream: 278 vs 227-245; AMX's tile loads stream the weights
//    slower at one row). The tests' row-independence checks compare the two: a row alone runs vpdpbusd.
// GCC 12's AVX-512 headers start some intrinsics from an undefined register and then warn about it.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#include "backend/cpu/amx.h"
#include "backend/cpu/fast_ops.h"
#include "backend/cpu/vnni.h"

namespace tern {

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
namespace {

// a(k) = nearbyint(x[k] * 127 / max|x|) (the current rounding mode: nearest even, as the reference), stored
// as groups of 4 bytes: a(4 j .. 4 j + 3) is the int32 groups[j * stride] (K % 4 == 0). Returns the row sum
// of a and sets *row_scale = max|x| / 127.
int32_t QuantizeRow(const float* x, int K, int32_t* groups, int stride, float* row_scale) {
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
    alignas(16) int32_t four[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(four), _mm512_cvtsepi32_epi8(q));
    for (int j = 0; j < 4; j++) groups[static_cast<size_t>(k / 4 + j) * stride] = four[j];
  }
  int32_t sum = _mm512_reduce_add_epi32(vsum);
  for (; k < K; k += 4) {
    int8_t bytes[4];
    for (int j = 0; j < 4; j++) {
      const int32_t q = static_cast<int32_t>(std::nearbyint(x[k + j] * inv));
      bytes[j] = static_cast<int8_t>(q);
      sum += q;
    }
    std::memcpy(&groups[static_cast<size_t>(k / 4) * stride], bytes, 4);
  }
  return sum;
}

constexpr int kGroupsPerBlock = 4;  // 64 output channels: K*64 bytes of weights stay in L1/L2 across rows
constexpr int kRowsPerBlock = 64;   // rows per work item, so large prefills also split over threads

struct Int8Args {
  const int32_t* a;        // quantised activations in panels of 16 rows, [K / 4][R] int32 each (R rows)
  const float* row_scale;  // [N]
  const int32_t* row_sum;  // [N]
  const int8_t* w;         // packed weights
  const float* w_scale;    // [OC]
  const float* bias;       // [OC] or null
  float* out;              // [N, OC]
  int N, OC, K;
};

using fast::DotBroadcast;  // vnni.h

// Rows [r0, r0 + MR) x groups [g0, g0 + NG) of 16 output channels; r0 is a multiple of 16 (a panel's first
// row). With `next` set, also asks for the weights of the NG groups at `next` to be brought into the cache, a
// line per group and step of 4 k: the tiles of a block's first rows prefetch the same groups of the next
// block, whose weights come from DRAM (a decode step reads every weight once), spread evenly over the block's
// work; later row tiles find theirs in L1/L2. The activations of a step are the panel's R int32 side by side,
// so every broadcast addresses one pointer plus a constant (a pointer per row spilled registers in the loop).
// Every loop over rows and groups is unrolled, so that the accumulators stay in registers (a loop with a
// variable index kept them in memory, stored at every step).
// The epilogue of both AVX-512 int8 kernels (the AMX path's results are bitwise vpdpbusd's only while it is
// one): row n, channels [o0, o0 + 16) of the exact int32 sums, times the row's and the channels' scales, plus
// the bias; channels past OC are masked off.
inline void StoreSums(const Int8Args& p, int n, int o0, __m512i sums) {
  const int valid = std::min(16, p.OC - o0);
  const __mmask16 mask =
      valid == 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << valid) - 1);
  const __m512 scale =
      _mm512_mul_ps(_mm512_set1_ps(p.row_scale[n]), _mm512_maskz_loadu_ps(mask, p.w_scale + o0));
  __m512 y = _mm512_mul_ps(_mm512_cvtepi32_ps(sums), scale);
  if (p.bias) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(mask, p.bias + o0));
  _mm512_mask_storeu_ps(p.out + static_cast<size_t>(n) * p.OC + o0, mask, y);
}

template <int MR, int NG, bool kPrefetch>
void MicroTileBody(const Int8Args& p, int r0, int g0, const int8_t* next) {
  const int K4 = p.K / 4;
  __m512i acc[MR][NG];
#pragma GCC unroll 16
  for (int r = 0; r < MR; r++)
#pragma GCC unroll 16
    for (int g = 0; g < NG; g++) acc[r][g] = _mm512_setzero_si512();
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const size_t group_bytes = static_cast<size_t>(K4) * 64;
  const int8_t* wg = p.w + static_cast<size_t>(g0) * group_bytes;
  const int panel_rows = std::min(16, p.N - r0);
  const int32_t* ap = p.a + static_cast<size_t>(r0) * K4;  // the panel of rows r0 .. r0 + panel_rows - 1
  for (int k4 = 0; k4 < K4; k4++, wg += 64, ap += panel_rows) {
    if constexpr (kPrefetch) {
#pragma GCC unroll 16
      for (int g = 0; g < NG; g++) __builtin_prefetch(next + g * group_bytes);
      next += 64;
    }
    __m512i wv[NG];
#pragma GCC unroll 16
    for (int g = 0; g < NG; g++) wv[g] = _mm512_xor_si512(_mm512_loadu_si512(wg + g * group_bytes), flip);
#pragma GCC unroll 16
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 16
      for (int g = 0; g < NG; g++) acc[r][g] = DotBroadcast(acc[r][g], wv[g], ap + r);
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; r++) {
    const int n = r0 + r;
    const __m512i excess = _mm512_set1_epi32(128 * p.row_sum[n]);
#pragma GCC unroll 16
    for (int g = 0; g < NG; g++) StoreSums(p, n, (g0 + g) * 16, _mm512_sub_epi32(acc[r][g], excess));
  }
}

template <int MR, int NG>
void MicroTile(const Int8Args& p, int r0, int g0, const int8_t* next) {
  if (next)
    MicroTileBody<MR, NG, true>(p, r0, g0, next);
  else
    MicroTileBody<MR, NG, false>(p, r0, g0, nullptr);
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

#if defined(__AMX_TILE__) && defined(__AMX_INT8__)
#define TERN_AMX_INT8 1
// Tiles: 0, 1 accumulate `rows` rows x 16 channels (int32); 2, 3 hold a group's 64 k of packed weights
// (16 rows of 64 bytes); 4 holds `rows` rows x 64 k of activations. `rows` is N up to 16, and 16 for every
// row tile when N > 16 (the last padded with zero rows).
constexpr int kAmxK = 64, kAmxRows = 16, kAmxMinRows = 8;

void AmxConfigureInt8(int rows) {
  amx::TileConfig cfg;
  cfg.rows[0] = cfg.rows[1] = cfg.rows[4] = static_cast<uint8_t>(rows);
  cfg.rows[2] = cfg.rows[3] = 16;
  for (int t = 0; t < 5; t++) cfg.colsb[t] = 64;
  _tile_loadconfig(&cfg);
}

// Groups [g0, g0 + ng) (ng 1 or 2) of 16 channels for every row. The epilogue is MicroTileBody's (StoreSums).
void AmxInt8Groups(const Int8Args& p, const int8_t* a_rows, int rows, int g0, int ng) {
  const size_t K = static_cast<size_t>(p.K), group_bytes = K / 4 * 64;
  const int8_t* w0 = p.w + static_cast<size_t>(g0) * group_bytes;
  alignas(64) int32_t sums[kAmxRows * 16];
  for (int r0 = 0; r0 < p.N; r0 += rows) {
    const int8_t* a = a_rows + static_cast<size_t>(r0) * K;
    _tile_zero(0);
    _tile_zero(1);
    for (size_t k = 0; k < K; k += kAmxK) {
      _tile_loadd(4, a + k, static_cast<int>(K));
      _tile_loadd(2, w0 + k / 4 * 64, 64);
      _tile_dpbssd(0, 4, 2);
      if (ng == 2) {
        _tile_loadd(3, w0 + group_bytes + k / 4 * 64, 64);
        _tile_dpbssd(1, 4, 3);
      }
    }
    const int valid_rows = std::min(rows, p.N - r0);
    for (int g = 0; g < ng; g++) {
      if (g == 0) {
        _tile_stored(0, sums, 64);
      } else {
        _tile_stored(1, sums, 64);
      }
      for (int r = 0; r < valid_rows; r++)
        StoreSums(p, r0 + r, (g0 + g) * 16, _mm512_load_si512(sums + 16 * r));
    }
  }
}

// The AMX path of MatmulInt8: each row quantised into K bytes in row order (zero rows up to a multiple of
// the row tile), then pairs of groups split over the threads.
void AmxMatmulInt8(Int8Args p, const float* inp, fast::Scratch& scratch_buf, bool parallel) {
  const int N = p.N, K = p.K, rows = std::min(N, kAmxRows);
  const int padded = (N + rows - 1) / rows * rows;
  const size_t a_bytes = fast::RoundUp(static_cast<size_t>(padded) * K, 64);
  char* scratch = scratch_buf.As<char>(a_bytes + 8 * static_cast<size_t>(N));
  int8_t* a_rows = reinterpret_cast<int8_t*>(scratch);
  float* row_scale = reinterpret_cast<float*>(scratch + a_bytes);
  std::memset(a_rows + static_cast<size_t>(N) * K, 0, static_cast<size_t>(padded - N) * K);
#pragma omp parallel for schedule(static) if (static_cast <size_t>(N) * K >= (1 << 16))
  for (int n = 0; n < N; n++)
    (void)QuantizeRow(inp + static_cast<size_t>(n) * K, K,
                      reinterpret_cast<int32_t*>(a_rows + static_cast<size_t>(n) * K), 1, &row_scale[n]);
  p.row_scale = row_scale;
  const int groups = (p.OC + 15) / 16, pairs = groups / 2, odd = groups % 2;
#pragma omp parallel if (parallel)
  {
    AmxConfigureInt8(rows);
#pragma omp for schedule(static)
    for (int g = 0; g < pairs + odd; g++) AmxInt8Groups(p, a_rows, rows, 2 * g, g < pairs ? 2 : 1);
    _tile_release();
  }
}
#endif

}  // namespace

void CpuFastBackend::MatmulInt8(float* out, const float* inp, const int8_t* w, const float* w_scale,
                                const float* bias, int N, int OC, int K) {
  if (N <= 0 || OC <= 0) return;
  // Threads pay off for compute (>= 4M multiply-adds, ~20 us on one core) or for streaming >= 256 KB of
  // weights from DRAM (~17 us on one core); below both, waking a worker costs more than it saves. The bar
  // was 2 MB: GPT-2's qkv (1.8 MB in int8) and attproj (0.6 MB; 1.2 MB in bf16) then streamed on one core at
  // half the machine's bandwidth, 18 % of a one-stream decode step (an Intel Xeon VM, 2 cores).
  const size_t macs = static_cast<size_t>(N) * OC * K, weight_bytes = static_cast<size_t>(OC) * K;
  const bool parallel = macs >= (1 << 22) || weight_bytes >= (1 << 18);
#if defined(TERN_AMX_INT8)
  if (N >= kAmxMinRows && K % kAmxK == 0 && amx::Granted()) {
    AmxMatmulInt8(Int8Args{nullptr, nullptr, nullptr, w, w_scale, bias, out, N, OC, K}, inp, int8_acts_,
                  parallel);
    return;
  }
#endif
  // Scratch: the quantised rows in panels of 16 rows (the last one R = N % 16 rows), [K / 4][R] int32 each,
  // the panel of row 16 p at int32 16 p * K / 4; then the row scales and sums.
  const int K4 = K / 4, panels = (N + 15) / 16;
  const size_t panel_bytes = fast::RoundUp(static_cast<size_t>(N) * K, 64);
  char* scratch = int8_acts_.As<char>(panel_bytes + 8 * static_cast<size_t>(N));
  int32_t* a_panels = reinterpret_cast<int32_t*>(scratch);
  float* row_scale = reinterpret_cast<float*>(scratch + panel_bytes);
  int32_t* row_sum = reinterpret_cast<int32_t*>(row_scale + N);
#pragma omp parallel for schedule(static) if (static_cast <size_t>(N) * K >= (1 << 16))
  for (int pn = 0; pn < panels; pn++) {
    const int rows = std::min(16, N - 16 * pn);
    int32_t* panel = a_panels + static_cast<size_t>(pn) * 16 * K4;
    for (int r = 0; r < rows; r++) {
      const int n = 16 * pn + r;
      row_sum[n] = QuantizeRow(inp + static_cast<size_t>(n) * K, K, panel + r, rows, &row_scale[n]);
    }
  }

  const Int8Args args{a_panels, row_scale, row_sum, w, w_scale, bias, out, N, OC, K};
  const int groups = (OC + 15) / 16;
  const int gblocks = (groups + kGroupsPerBlock - 1) / kGroupsPerBlock;
  const int rblocks = (N + kRowsPerBlock - 1) / kRowsPerBlock;
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

#elif defined(__AVX2__)  // AVX2 without AVX-512 VNNI (an AMD Zen 3, Intel before Ice Lake)
namespace {

// The reference's quantisation of one row into K bytes: a(k) = nearbyint(x[k] * (127 / m)), m = max |x|;
// returns the row scale m / 127.
float QuantizeRowBytes(const float* x, int K, int8_t* a) {
  float m = 0.0f;
  for (int k = 0; k < K; k++) m = std::max(m, std::fabs(x[k]));
  const float inv = m > 0.0f ? 127.0f / m : 0.0f;
  for (int k = 0; k < K; k++) a[k] = static_cast<int8_t>(std::nearbyint(x[k] * inv));
  return m / 127.0f;
}

struct Int8Avx2Args {
  const int8_t* a;         // [N, K] quantised rows
  const float* row_scale;  // [N]
  const int8_t* w;         // packed weights (backend.h)
  const float* w_scale;    // [OC]
  const float* bias;       // [OC] or null
  float* out;              // [N, OC]
  int N, OC, K;
};

// Rows [r0, r0 + MR) x the 16 output channels of group g. Per step of 4 k the group's 64 weight bytes are two
// ymm (8 channels x 4 bytes each), multiplied by each row's 4 bytes broadcast. vpmaddubsw multiplies unsigned
// by signed bytes and adds neighbours into int16 with saturation, so it gets |a| and w carrying a's sign
// (vpsignb): both lie in [-127, 127], a pair sums to at most 2 x 127 x 127 < 2^15 and nothing saturates;
// vpmaddwd by ones adds the pairs into int32 lanes, one per channel. The sums are exact, so the result is the
// reference's whatever the tiling; the epilogue is its float arithmetic, a multiply then an add.
template <int MR>
void Int8TileAvx2(const Int8Avx2Args& p, int r0, int g) {
  const int K4 = p.K / 4;
  const int8_t* wg = p.w + static_cast<size_t>(g) * K4 * 64;
  __m256i acc[MR][2];
#pragma GCC unroll 4
  for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi16(1);
  const int8_t* a0 = p.a + static_cast<size_t>(r0) * p.K;
  for (int j = 0; j < K4; j++, wg += 64) {
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wg));
    const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wg + 32));
#pragma GCC unroll 4
    for (int r = 0; r < MR; r++) {
      int32_t four;
      std::memcpy(&four, a0 + static_cast<size_t>(r) * p.K + 4 * j, 4);
      const __m256i av = _mm256_set1_epi32(four), mag = _mm256_sign_epi8(av, av);
      acc[r][0] = _mm256_add_epi32(
          acc[r][0], _mm256_madd_epi16(_mm256_maddubs_epi16(mag, _mm256_sign_epi8(w0, av)), ones));
      acc[r][1] = _mm256_add_epi32(
          acc[r][1], _mm256_madd_epi16(_mm256_maddubs_epi16(mag, _mm256_sign_epi8(w1, av)), ones));
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < MR; r++) {
    const int n = r0 + r;
    const __m256 rs = _mm256_set1_ps(p.row_scale[n]);
    for (int h = 0; h < 2; h++) {
      const int o0 = g * 16 + h * 8, valid = std::min(8, p.OC - o0);
      if (valid <= 0) break;
      alignas(32) float ws[8] = {}, b[8] = {}, y[8];
      std::memcpy(ws, p.w_scale + o0, valid * sizeof(float));
      if (p.bias) std::memcpy(b, p.bias + o0, valid * sizeof(float));
      __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(acc[r][h]), _mm256_mul_ps(rs, _mm256_load_ps(ws)));
      // GCC's AVX intrinsics are plain vector * and +, which -ffp-contract=fast would fuse into an FMA (one
      // rounding, not the reference's two): the empty asm keeps the product a rounded value of its own.
      asm("" : "+x"(v));
      if (p.bias) v = _mm256_add_ps(v, _mm256_load_ps(b));
      _mm256_store_ps(y, v);
      std::memcpy(p.out + static_cast<size_t>(n) * p.OC + o0, y, valid * sizeof(float));
    }
  }
}

}  // namespace

void CpuFastBackend::MatmulInt8(float* out, const float* inp, const int8_t* w, const float* w_scale,
                                const float* bias, int N, int OC, int K) {
  if (N <= 0 || OC <= 0) return;
  const size_t a_bytes = fast::RoundUp(static_cast<size_t>(N) * K, 64);
  char* scratch = int8_acts_.As<char>(a_bytes + sizeof(float) * static_cast<size_t>(N));
  int8_t* a = reinterpret_cast<int8_t*>(scratch);
  float* row_scale = reinterpret_cast<float*>(scratch + a_bytes);
#pragma omp parallel for schedule(static) if (static_cast <size_t>(N) * K >= (1 << 16))
  for (int n = 0; n < N; n++)
    row_scale[n] = QuantizeRowBytes(inp + static_cast<size_t>(n) * K, K, a + static_cast<size_t>(n) * K);
  const Int8Avx2Args args{a, row_scale, w, w_scale, bias, out, N, OC, K};
  const int groups = (OC + 15) / 16;
  // As the AVX-512 path: threads for >= 4M multiply-adds or >= 256 KB of weights streamed from DRAM.
  const size_t macs = static_cast<size_t>(N) * OC * K, weight_bytes = static_cast<size_t>(OC) * K;
  const bool parallel = macs >= (1 << 22) || weight_bytes >= (1 << 18);
  // Each thread takes whole groups: a group's K x 16 weight bytes stay in L1/L2 while every row uses them.
#pragma omp parallel for schedule(static) if (parallel)
  for (int g = 0; g < groups; g++) {
    for (int r0 = 0; r0 < N; r0 += 4) {
      switch (std::min(4, N - r0)) {
        case 1:
          Int8TileAvx2<1>(args, r0, g);
          break;
        case 2:
          Int8TileAvx2<2>(args, r0, g);
          break;
        case 3:
          Int8TileAvx2<3>(args, r0, g);
          break;
        default:
          Int8TileAvx2<4>(args, r0, g);
      }
    }
  }
}

#else  // neither AVX-512 VNNI nor AVX2 at compile time: the reference defines the result

void CpuFastBackend::MatmulInt8(float* out, const float* inp, const int8_t* w, const float* w_scale,
                                const float* bias, int N, int OC, int K) {
  CpuReferenceBackend::MatmulInt8(out, inp, w, w_scale, bias, N, OC, K);
}

#endif

}  // namespace tern
