// The fast CPU backend's Matmul: operands brought to the compute type (bf16 casts, transposing casts), the
// product by oneDNN (dnnl_matmul.cpp), reshaped where oneDNN 2.6 runs another layout faster, and the fp32
// fallback for bf16 on CPUs without a bf16 kernel.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "backend/cpu/dnnl_matmul.h"
#include "backend/cpu/fast_ops.h"

namespace tern {
namespace {

using fast::kParallelMin;

#if defined(__AVX512F__)
// fast::ToBF16 on 16 lanes: round to nearest even, NaN stays a quiet NaN.
inline __m256i ToBF16x16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd), 16);
  const __m512i nan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                   _mm512_set1_epi32(0x7f800000));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(is_nan, rounded, nan));
}

// The 16 x 16 floats of r[] transposed in registers (r[i] becomes column i).
inline void Transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xee);
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  for (int i = 0; i < 4; i++) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 4; i++) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    r[i + 4] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88);
    r[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xdd);
  }
}
#endif

// dst[c][r] = bf16(src[r][c]) for src [rows, cols]: 16x16 tiles, parallel over blocks of 64 columns. With
// AVX-512 a tile is transposed in registers. The weight gradients' A operand is large and its rows far apart
// (the LM head's: 1024 rows of 50257 floats), so a block reads 256 contiguous bytes of each row and asks for
// the next 16 rows' bytes while it converts these: a 16-column strip alone waited on one miss per row.
void CastTransposeBF16(uint16_t* dst, const float* src, int rows, int cols) {
  constexpr int kTile = 16, kBlock = 64;
  const int blocks = (cols + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (static_cast <size_t>(rows) * cols >= kParallelMin)
  for (int blk = 0; blk < blocks; blk++) {
    const int b0 = blk * kBlock, b1 = std::min(cols, b0 + kBlock);
    int r0 = 0;
#if defined(__AVX512F__)
    const int full_end = b0 + (b1 - b0) / kTile * kTile;  // columns [b0, full_end) in whole tiles
    for (; r0 + kTile <= rows; r0 += kTile) {
      if (r0 + 2 * kTile <= rows) {
        for (int i = 0; i < kTile; i++)
          for (int c = b0; c < b1; c += kTile)
            __builtin_prefetch(src + static_cast<size_t>(r0 + kTile + i) * cols + c);
      }
      for (int c0 = b0; c0 < full_end; c0 += kTile) {
        __m512 r[kTile];
        for (int i = 0; i < kTile; i++) r[i] = _mm512_loadu_ps(src + static_cast<size_t>(r0 + i) * cols + c0);
        Transpose16(r);
        for (int i = 0; i < kTile; i++)
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + static_cast<size_t>(c0 + i) * rows + r0),
                              ToBF16x16(r[i]));
      }
      for (int c = full_end; c < b1; c++)
        for (int r = r0; r < r0 + kTile; r++)
          dst[static_cast<size_t>(c) * rows + r] = fast::ToBF16(src[static_cast<size_t>(r) * cols + c]);
    }
#endif
    for (; r0 < rows; r0 += kTile) {
      const int r1 = std::min(rows, r0 + kTile);
      for (int c = b0; c < b1; c++) {
        uint16_t* __restrict d = dst + static_cast<size_t>(c) * rows;
        for (int r = r0; r < r1; r++) d[r] = fast::ToBF16(src[static_cast<size_t>(r) * cols + c]);
      }
    }
  }
}

#if defined(__AVX512F__)
constexpr int kTransposeBlock = 2048;  // columns of A per transposed block (8 MB at K = 1024)

// dst[j][r] = src[r][c0 + j] for j < cb, src [rows, cols]: 16 x 16 tiles in registers, scalar at the edges.
void TransposeF32Block(float* dst, const float* src, int rows, int cols, int c0, int cb) {
  constexpr int kTile = 16;
  const int tiles = (cb + 63) / 64;
#pragma omp parallel for schedule(static)
  for (int t = 0; t < tiles; t++) {
    const int j0 = t * 64, j1 = std::min(cb, j0 + 64), full_end = j0 + (j1 - j0) / kTile * kTile;
    int r0 = 0;
    for (; r0 + kTile <= rows; r0 += kTile) {
      for (int j = j0; j < full_end; j += kTile) {
        __m512 r[kTile];
        for (int i = 0; i < kTile; i++)
          r[i] = _mm512_loadu_ps(src + static_cast<size_t>(r0 + i) * cols + c0 + j);
        Transpose16(r);
        for (int i = 0; i < kTile; i++) _mm512_storeu_ps(dst + static_cast<size_t>(j + i) * rows + r0, r[i]);
      }
      for (int j = full_end; j < j1; j++)
        for (int r = r0; r < r0 + kTile; r++)
          dst[static_cast<size_t>(j) * rows + r] = src[static_cast<size_t>(r) * cols + c0 + j];
    }
    for (int j = j0; j < j1; j++)
      for (int r = r0; r < rows; r++)
        dst[static_cast<size_t>(j) * rows + r] = src[static_cast<size_t>(r) * cols + c0 + j];
  }
}
#endif

}  // namespace

void CpuFastBackend::Matmul(float* c, Operand a, Operand b, const float* bias, int M, int N, int K,
                            bool trans_a, bool trans_b, float beta, Compute compute) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0 || a.dtype == DType::kI32 || b.dtype == DType::kI32) {  // degenerate: let the oracle define it
    CpuReferenceBackend::Matmul(c, a, b, bias, M, N, K, trans_a, trans_b, beta, compute);
    return;
  }
  const DType want = compute == Compute::kBF16 ? DType::kBF16 : DType::kF32;
  // Brings an operand to the compute type: bf16 compute casts fp32 into scratch; fp32 compute widens bf16.
  auto convert = [&](Operand op, size_t n, fast::Scratch& scratch) -> const void* {
    if (op.dtype == want) return op.ptr;
    if (want == DType::kBF16) {
      uint16_t* dst = scratch.As<uint16_t>(n);
      CastF32ToBF16(dst, static_cast<const float*>(op.ptr), n);
      return dst;
    }
    float* dst = scratch.As<float>(n);
    const uint16_t* src = static_cast<const uint16_t*>(op.ptr);
    fast::ParallelRange(n, kParallelMin, [&](size_t b, size_t e) {
#pragma omp simd
      for (size_t i = b; i < e; i++) dst[i] = fast::FromBF16(src[i]);
    });
    return dst;
  };
  const void* pa;
  bool ta = trans_a;
  if (want == DType::kBF16 && trans_a && a.dtype == DType::kF32) {
    // The cast has to copy A anyway: it writes A back untransposed, which oneDNN multiplies faster.
    uint16_t* dst = operand_a_.As<uint16_t>(static_cast<size_t>(M) * K);
    CastTransposeBF16(dst, static_cast<const float*>(a.ptr), K, M);
    pa = dst;
    ta = false;
  } else {
    pa = convert(a, static_cast<size_t>(M) * K, operand_a_);
  }
  const void* pb = convert(b, static_cast<size_t>(K) * N, operand_b_);
  if (want == DType::kF32 && !ta && !trans_b && beta == 0.0f && !bias && K >= 16 * std::max(M, N) &&
      dnnl_->Run(transposed_c_.As<float>(static_cast<size_t>(M) * N), pb, pa, want, nullptr, N, M, K, true,
                 true, 0.0f)) {
    // A long reduction into a small product (the LM head's input gradient: K = the vocabulary, M = rows,
    // N = channels): oneDNN 2.6's fp32 kernel runs C^T = B^T A^T 15-20 % faster than C = A B on an AVX-512
    // Xeon (293 vs 250 GFLOP/s at 1024 x 384 x 50257), and the transpose back is small.
    const float* ct = transposed_c_.As<float>(static_cast<size_t>(M) * N);
#pragma omp parallel for schedule(static) if (static_cast <size_t>(M) * N >= kParallelMin)
    for (int m = 0; m < M; m++)
      for (int n = 0; n < N; n++) c[static_cast<size_t>(m) * N + n] = ct[static_cast<size_t>(n) * M + m];
    return;
  }
#if defined(__AVX512F__)
  if (want == DType::kF32 && ta && !trans_b && !bias && M >= 8 * kTransposeBlock && K >= 256) {
    // A weight gradient with many output rows (the LM head's: A = the logits' gradient [K = rows, M = V]):
    // oneDNN 2.6's fp32 kernel multiplies a transposed A 10-15 % slower than an untransposed one, so blocks
    // of A's columns are transposed (in registers, 16 x 16) into an L2/L3-sized block and multiplied as they
    // are.
    float* block = transposed_c_.As<float>(static_cast<size_t>(kTransposeBlock) * K);
    const float* src = static_cast<const float*>(pa);
    const float* fb = static_cast<const float*>(pb);
    bool ok = true;
    for (int m0 = 0; ok && m0 < M; m0 += kTransposeBlock) {
      const int mb = std::min(kTransposeBlock, M - m0);
      TransposeF32Block(block, src, K, M, m0, mb);
      ok =
          dnnl_->Run(c + static_cast<size_t>(m0) * N, block, fb, want, nullptr, mb, N, K, false, false, beta);
    }
    if (ok) return;
  }
#endif
  if (dnnl_->Run(c, pa, pb, want, bias, M, N, K, ta, trans_b, beta)) return;
  if (want == DType::kBF16) {
    // No bf16 kernel on this CPU (no AVX512-BF16 or AMX, e.g. an AVX2-only AMD Zen 3): the same arithmetic
    // in fp32. A product of two bf16 values is exact in fp32, so fp32 accumulation of the widened operands is
    // what a bf16 kernel computes, up to the order of the sums.
    auto widen = [&](const void* src, size_t n, fast::Scratch& scratch) {
      float* dst = scratch.As<float>(n);
      const uint16_t* h = static_cast<const uint16_t*>(src);
      fast::ParallelRange(n, kParallelMin, [&](size_t b, size_t e) {
#pragma omp simd
        for (size_t i = b; i < e; i++) dst[i] = fast::FromBF16(h[i]);
      });
      return dst;
    };
    const float* wa = widen(pa, static_cast<size_t>(M) * K, widened_a_);
    const float* wb = widen(pb, static_cast<size_t>(K) * N, widened_b_);
    if (dnnl_->Run(c, wa, wb, DType::kF32, bias, M, N, K, ta, trans_b, beta)) return;
  }
  CpuReferenceBackend::Matmul(c, a, b, bias, M, N, K, trans_a, trans_b, beta, compute);
}

}  // namespace tern
