// The fast CPU backend's Matmul: operands brought to the compute type (bf16 casts, transposing casts), the
// product by oneDNN (dnnl_matmul.cpp), reshaped where oneDNN 2.6 runs another layout faster, and the fp32
// fallback for bf16 on CPUs without a bf16 kernel.

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cpu/dnnl_matmul.h"
#include "backend/cpu/fast_ops.h"

namespace tern {
namespace {

using fast::kParallelMin;

inline void Put(float* d, float x) {
  *d = x;
}
inline void Put(uint16_t* d, float x) {
  *d = fast::ToBF16(x);
}
inline void Put(uint16_t* d, uint16_t x) {  // bf16 to bf16: the bits as they are
  *d = x;
}

#if defined(__AVX512F__)
// The 16 x 16 floats of r[] transposed in registers (r[i] becomes column i): the unpack / shuffle_ps /
// shuffle_f32x4 network, written as GCC vector shuffles (GCC 12's intrinsics warn -Wmaybe-uninitialized
// about their undefined pass-through operand).
typedef float V16 __attribute__((vector_size(64)));
inline V16 UnpackLo(V16 a, V16 b) {
  return __builtin_shufflevector(a, b, 0, 16, 1, 17, 4, 20, 5, 21, 8, 24, 9, 25, 12, 28, 13, 29);
}
inline V16 UnpackHi(V16 a, V16 b) {
  return __builtin_shufflevector(a, b, 2, 18, 3, 19, 6, 22, 7, 23, 10, 26, 11, 27, 14, 30, 15, 31);
}
inline V16 PairsLo(V16 a, V16 b) {  // shuffle_ps 0x44
  return __builtin_shufflevector(a, b, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
}
inline V16 PairsHi(V16 a, V16 b) {  // shuffle_ps 0xee
  return __builtin_shufflevector(a, b, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
}
inline V16 LanesEven(V16 a, V16 b) {  // shuffle_f32x4 0x88
  return __builtin_shufflevector(a, b, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
}
inline V16 LanesOdd(V16 a, V16 b) {  // shuffle_f32x4 0xdd
  return __builtin_shufflevector(a, b, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
}
inline void Transpose16(V16 r[16]) {
  V16 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = UnpackLo(r[i], r[i + 1]);
    t[i + 1] = UnpackHi(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = PairsLo(t[i], t[i + 2]);
    r[i + 1] = PairsHi(t[i], t[i + 2]);
    r[i + 2] = PairsLo(t[i + 1], t[i + 3]);
    r[i + 3] = PairsHi(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 4; i++) {
    t[i] = LanesEven(r[i], r[i + 4]);
    t[i + 4] = LanesOdd(r[i], r[i + 4]);
    t[i + 8] = LanesEven(r[i + 8], r[i + 12]);
    t[i + 12] = LanesOdd(r[i + 8], r[i + 12]);
  }
  for (int i = 0; i < 4; i++) {
    r[i] = LanesEven(t[i], t[i + 8]);
    r[i + 8] = LanesOdd(t[i], t[i + 8]);
    r[i + 4] = LanesEven(t[i + 4], t[i + 12]);
    r[i + 12] = LanesOdd(t[i + 4], t[i + 12]);
  }
}

typedef uint32_t U16 __attribute__((vector_size(64)));
typedef uint16_t H16 __attribute__((vector_size(32)));

// 16 elements from s as floats (bf16 widened: its bits in the high half of each lane).
inline V16 Load16(const float* s) {
  V16 v;
  __builtin_memcpy(&v, s, sizeof v);
  return v;
}
inline V16 Load16(const uint16_t* s) {
  H16 h;
  __builtin_memcpy(&h, s, sizeof h);
  const U16 u = __builtin_convertvector(h, U16) << 16;
  V16 v;
  __builtin_memcpy(&v, &u, sizeof v);
  return v;
}

// 16 floats to d: as they are, or rounded to bf16 as fast::ToBF16 rounds (its BF16Bits on the whole vector);
// from a bf16 source (S = uint16_t) the high halves as they are, so a bf16 transpose moves bits exactly.
template <typename S>
inline void Put16(float* d, V16 v) {
  __builtin_memcpy(d, &v, sizeof v);
}
template <typename S>
inline void Put16(uint16_t* d, V16 v) {
  U16 u;
  __builtin_memcpy(&u, &v, sizeof u);
  const H16 h = __builtin_convertvector(std::is_same_v<S, uint16_t> ? u >> 16 : fast::BF16Bits(u), H16);
  __builtin_memcpy(d, &h, sizeof h);
}
#endif

// dst[j][r] = src[r][c0 + j] for j < cb, src [rows, cols] of fp32 or bf16 (S), as fp32 or bf16 (T; fp32 to
// bf16 rounds, bf16 to bf16 copies the bits): blocks of 64
// columns in parallel, 16 x 16 tiles transposed in AVX-512 registers, scalar elsewhere. The rows of a weight
// gradient's A operand lie far apart (the LM head's: 1024 rows of 50257 floats), so a block reads 256
// contiguous bytes of each row and asks for the next 16 rows' while it converts these: a 16-column strip
// alone waited on one miss per row.
template <typename T, typename S>
void TransposeColumns(T* dst, const S* src, int rows, int cols, int c0, int cb) {
  constexpr int kTile = 16, kBlock = 64;
  const S* s = src + c0;
  const int blocks = (cb + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (static_cast <size_t>(rows) * cb >= kParallelMin)
  for (int blk = 0; blk < blocks; blk++) {
    const int j0 = blk * kBlock, j1 = std::min(cb, j0 + kBlock);
    int r0 = 0;
#if defined(__AVX512F__)
    const int full_end = j0 + (j1 - j0) / kTile * kTile;  // columns [j0, full_end) in whole tiles
    for (; r0 + kTile <= rows; r0 += kTile) {
      if (r0 + 2 * kTile <= rows) {
        for (int i = 0; i < kTile; i++)
          for (int j = j0; j < j1; j += kTile)
            __builtin_prefetch(s + static_cast<size_t>(r0 + kTile + i) * cols + j);
      }
      for (int j = j0; j < full_end; j += kTile) {
        V16 r[kTile];
        for (int i = 0; i < kTile; i++) r[i] = Load16(s + static_cast<size_t>(r0 + i) * cols + j);
        Transpose16(r);
        for (int i = 0; i < kTile; i++) Put16<S>(dst + static_cast<size_t>(j + i) * rows + r0, r[i]);
      }
      for (int j = full_end; j < j1; j++)
        for (int r = r0; r < r0 + kTile; r++)
          Put(dst + static_cast<size_t>(j) * rows + r, s[static_cast<size_t>(r) * cols + j]);
    }
#endif
    for (; r0 < rows; r0 += kTile) {  // the rows past the last whole tile (every row without AVX-512)
      const int r1 = std::min(rows, r0 + kTile);
      for (int j = j0; j < j1; j++)
        for (int r = r0; r < r1; r++)
          Put(dst + static_cast<size_t>(j) * rows + r, s[static_cast<size_t>(r) * cols + j]);
    }
  }
}

// C[M, N] = beta C + A^T B for A stored [K, M] (a weight gradient with many output rows): blocks of `cols`
// columns of A copied transposed into scratch (TransposeColumns) and multiplied untransposed, for oneDNN
// kernels that run a transposed A slower (see the callers). False if oneDNN has no kernel for the case.
template <typename T>
bool TransposedBlocks(DnnlMatmul& dnnl, fast::Scratch& scratch, int cols, float* c, const T* a, const void* b,
                      DType dtype, int M, int N, int K, float beta) {
  T* block = scratch.As<T>(static_cast<size_t>(cols) * K);
  for (int m0 = 0; m0 < M; m0 += cols) {
    const int mb = std::min(cols, M - m0);
    TransposeColumns(block, a, K, M, m0, mb);
    if (!dnnl.Run(c + static_cast<size_t>(m0) * N, block, b, dtype, nullptr, mb, N, K, false, false, beta))
      return false;
  }
  return true;
}

// An operand brought to the compute type: bf16 compute casts fp32 into scratch; fp32 compute widens bf16.
const void* ToCompute(CpuFastBackend& be, Operand op, size_t n, DType want, fast::Scratch& scratch) {
  if (op.dtype == want) return op.ptr;
  if (want == DType::kBF16) {
    uint16_t* dst = scratch.As<uint16_t>(n);
    be.CastF32ToBF16(dst, static_cast<const float*>(op.ptr), n);
    return dst;
  }
  float* dst = scratch.As<float>(n);
  const uint16_t* src = static_cast<const uint16_t*>(op.ptr);
  fast::ParallelRange(n, kParallelMin, [&](size_t b, size_t e) {
#pragma omp simd
    for (size_t i = b; i < e; i++) dst[i] = fast::FromBF16(src[i]);
  });
  return dst;
}

#if defined(__AVX512F__)
constexpr int kTransposeBlock = 2048;    // columns of A per transposed block (8 MB at K = 1024)
constexpr int kTransposeBlock16 = 8192;  // the same for bf16 (16 MB at K = 1024)
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
  auto convert = [&](Operand op, size_t n, fast::Scratch& scratch) {
    return ToCompute(*this, op, n, want, scratch);
  };
  const void* pa;
  bool ta = trans_a;
  if (want == DType::kBF16 && trans_a && a.dtype == DType::kF32) {
    // The cast has to copy A anyway: it writes A back untransposed, which oneDNN multiplies faster.
    uint16_t* dst = operand_a_.As<uint16_t>(static_cast<size_t>(M) * K);
    TransposeColumns(dst, static_cast<const float*>(a.ptr), K, M, 0, M);
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
    if (TransposedBlocks(*dnnl_, transposed_c_, kTransposeBlock, c, static_cast<const float*>(pa), pb, want,
                         M, N, K, beta))
      return;
  }
  if (want == DType::kBF16 && ta && !trans_b && !bias && M >= 2 * kTransposeBlock16 && K >= 512) {
    // The same for bf16 (the LM head's weight gradient under bf16 compute: A = the bf16 logits' gradient,
    // K = 1024 rows): on a Zen 5, oneDNN 2.6's avx512_core_bf16 kernel ran the transposed A of 50257 x 384 x
    // 1024 at 425-489 GFLOP/s, untransposed blocks of 2048 / 8192 columns at 611 / 750, the whole at 800
    // (blocks of 8192: 16 MB, a fraction of the whole's 100 MB copy). At K = 256 (124M B4 T64) the transposed
    // kernel is as fast as blocks plus the copy, so short reductions keep it. The copy moves bits: same
    // product.
    if (TransposedBlocks(*dnnl_, transposed_a16_, kTransposeBlock16, c, static_cast<const uint16_t*>(pa), pb,
                         want, M, N, K, beta))
      return;
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

// bf16 compute: oneDNN rounds the product to bf16 as it stores it (the LM head's logits: half the bytes of
// an fp32 product, 42 vs 65 ms at 1024 x 50257 x 384 on the AMX Xeon). Otherwise the product in fp32 scratch,
// then cast.
void CpuFastBackend::MatmulToBF16(uint16_t* c, Operand a, Operand b, const float* bias, int M, int N, int K,
                                  bool trans_a, bool trans_b, Compute compute) {
  if (M <= 0 || N <= 0) return;
  const size_t n = static_cast<size_t>(M) * N;
  if (compute == Compute::kBF16 && K > 0 && a.dtype != DType::kI32 && b.dtype != DType::kI32) {
    const void* pa = ToCompute(*this, a, static_cast<size_t>(M) * K, DType::kBF16, operand_a_);
    const void* pb = ToCompute(*this, b, static_cast<size_t>(K) * N, DType::kBF16, operand_b_);
    if (dnnl_->RunToBF16(c, pa, pb, DType::kBF16, bias, M, N, K, trans_a, trans_b)) return;
  }
  float* product = product_.As<float>(n);
  Matmul(product, a, b, bias, M, N, K, trans_a, trans_b, 0.0f, compute);
  CastF32ToBF16(c, product, n);
}

}  // namespace tern
