// Causal self-attention for the fast CPU backend, parallel over (batch, head).
//
// Each (b, h) is a handful of small matmuls over T×hs tiles, done by one register-blocked kernel (4 rows ×
// up to 64 columns of accumulators, 16-float vectors that the compiler maps to AVX-512 registers). Operands
// are packed per (b, h) into per-thread scratch: row-major [T][hsp] or transposed [hs][Tp], zero-padded to
// multiples of 16 so that every vector load is whole. The causal structure is used to skip work:
// scores are computed only up to the diagonal block, and products with the (zero) upper triangle of the
// probabilities are skipped.
//
//   forward   S = Q·Kᵀ (scaled) → row softmax → att;  out = att·V
//   backward  dP = dO·Vᵀ;  dS = att ⊙ (dP − rowsum(att ⊙ dP)) · scale → datt
//             dQ = dS·K;  dK = dSᵀ·Q;  dV = attᵀ·dO
//
// Kernel families (SetAttentionKernel): "naive" keeps att[B,NH,T,T] as the interface's state; "flash" keeps
// only each score row's maximum and 1/sum ([B,NH,T,2]) and recomputes the probabilities in the backward
// from the same scores with the same instructions, so both give the same bits (fast_ops_test checks it).
// flash trades O(B·NH·T²) saved floats per layer for one more Q·Kᵀ in the backward.
#include <omp.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "backend/cpu/fast_ops.h"

namespace tern {
namespace {

using fast::RoundUp;
typedef float v16 __attribute__((vector_size(64)));  // one AVX-512 register of floats

// c[r][16j..16j+15] = sum over k in [k0,k1) of A(r,k) * b[k][16j..], A(r,k) = a[r*a_rs + k*a_ks],
// for r < MR, j < NV. b and c are 64-byte aligned with row strides that are multiples of 16 floats.
template <int MR, int NV>
void Tile(int k0, int k1, const float* a, ptrdiff_t a_rs, ptrdiff_t a_ks, const float* b, ptrdiff_t ldb,
          float* c, ptrdiff_t ldc) {
  v16 acc[MR][NV];
  for (int r = 0; r < MR; r++)
    for (int j = 0; j < NV; j++) acc[r][j] = v16{};
  for (int k = k0; k < k1; k++) {
    const v16* bk = reinterpret_cast<const v16*>(b + k * ldb);
    v16 bv[NV];
    for (int j = 0; j < NV; j++) bv[j] = bk[j];
    for (int r = 0; r < MR; r++) {
      const float av = a[r * a_rs + k * a_ks];
      for (int j = 0; j < NV; j++) acc[r][j] += av * bv[j];
    }
  }
  for (int r = 0; r < MR; r++)
    for (int j = 0; j < NV; j++) *reinterpret_cast<v16*>(c + r * ldc + 16 * j) = acc[r][j];
}

using TileFn = void (*)(int, int, const float*, ptrdiff_t, ptrdiff_t, const float*, ptrdiff_t, float*,
                        ptrdiff_t);
constexpr TileFn kTiles[4][4] = {{Tile<1, 1>, Tile<1, 2>, Tile<1, 3>, Tile<1, 4>},
                                 {Tile<2, 1>, Tile<2, 2>, Tile<2, 3>, Tile<2, 4>},
                                 {Tile<3, 1>, Tile<3, 2>, Tile<3, 3>, Tile<3, 4>},
                                 {Tile<4, 1>, Tile<4, 2>, Tile<4, 3>, Tile<4, 4>}};
constexpr int kRows = 4;  // rows per tile

// How the causal mask limits a product for the rows [r0, r1) of the output:
enum class Causal {
  kColsToDiagonal,  // only columns < r1 are needed (scores): computes columns [0, RoundUp(r1, 16))
  kKToDiagonal,     // A(r, k) = 0 for k > r (A = probabilities): k in [0, r1)
  kKFromDiagonal,   // A(r, k) = 0 for k < r (A = transposed probabilities): k in [r0, K)
};

// Rows [r0, r0 + mr) of C = A·B, mr <= kRows, n a multiple of 16. `a` points at row 0 of A, `c` at row r0 of
// C.
void RowBlock(Causal causal, int r0, int mr, int n, int K, const float* a, ptrdiff_t a_rs, ptrdiff_t a_ks,
              const float* b, ptrdiff_t ldb, float* c, ptrdiff_t ldc) {
  const int r1 = r0 + mr;
  int k0 = 0, k1 = K;
  if (causal == Causal::kColsToDiagonal) n = std::min<int>(n, RoundUp(r1, 16));
  if (causal == Causal::kKToDiagonal) k1 = std::min(K, r1);
  if (causal == Causal::kKFromDiagonal) k0 = r0;
  for (int j0 = 0; j0 < n; j0 += 64) {
    const int nv = std::min(4, (n - j0) / 16);
    kTiles[mr - 1][nv - 1](k0, k1, a + r0 * a_rs, a_rs, a_ks, b + j0, ldb, c + j0, ldc);
  }
}

// An element of q, k or v as fp32: itself, or a bf16 one widened (exact).
inline float Widen(float x) {
  return x;
}
inline float Widen(uint16_t x) {
  return fast::FromBF16(x);
}

// dst[t][0..hsp) = src[t*stride + i] for i < hs (widened), zero-padded.
template <typename In>
void PackRows(float* dst, const In* src, ptrdiff_t stride, int T, int hs, int hsp) {
  for (int t = 0; t < T; t++) {
    float* d = dst + static_cast<size_t>(t) * hsp;
    if constexpr (std::is_same_v<In, float>) {
      std::memcpy(d, src + t * stride, sizeof(float) * hs);
    } else {
      const In* r = src + t * stride;
#pragma omp simd
      for (int i = 0; i < hs; i++) d[i] = Widen(r[i]);
    }
    std::memset(d + hs, 0, sizeof(float) * (hsp - hs));
  }
}

// Row `o[0..hs)` of the output into dst: copied, or rounded to bf16.
inline void StoreRow(float* dst, const float* o, int hs) {
  std::memcpy(dst, o, sizeof(float) * hs);
}
inline void StoreRow(uint16_t* dst, const float* o, int hs) {
#pragma omp simd
  for (int i = 0; i < hs; i++) dst[i] = fast::ToBF16(o[i]);
}

// dst[i][t] = src[t*stride + i] (ld tp, widened), columns [T, tp) zero. In 16x16 tiles, so that both sides
// stay in L1.
template <typename In>
void PackTransposed(float* dst, const In* src, ptrdiff_t stride, int T, int hs, int tp) {
  for (int i = 0; i < hs; i++)
    std::memset(dst + static_cast<size_t>(i) * tp + T, 0, sizeof(float) * (tp - T));
  for (int t0 = 0; t0 < T; t0 += 16) {
    const int t1 = std::min(T, t0 + 16);
    for (int i0 = 0; i0 < hs; i0 += 16) {
      const int i1 = std::min(hs, i0 + 16);
      for (int i = i0; i < i1; i++) {
        float* __restrict d = dst + static_cast<size_t>(i) * tp;
        for (int t = t0; t < t1; t++) d[t] = Widen(src[t * stride + i]);
      }
    }
  }
}

// One score row's softmax statistics: the naive kernel's maximum and 1/sum, which "flash" keeps as its state.
struct RowStats {
  float max, inv;
};

// srow[i] = exp((srow[i] - maxval) * scale) for i < n. Not inlined, so that the forward and the flash
// backward's recomputation run the same instructions and get the same bits.
__attribute__((noinline)) void ExpRow(float* __restrict srow, int n, float maxval, float scale) {
#pragma omp simd
  for (int i = 0; i < n; i++) srow[i] = fast::Exp((srow[i] - maxval) * scale);
}

// arow[i] = srow[i] * inv for i <= t, zeros up to T. Not inlined, for the same reason.
__attribute__((noinline)) void ScaleRow(const float* __restrict srow, float* __restrict arow, int t, int T,
                                        float inv) {
#pragma omp simd
  for (int i = 0; i <= t; i++) arow[i] = srow[i] * inv;
  std::memset(arow + t + 1, 0, sizeof(float) * (T - t - 1));
}

// Row t of the probabilities from its scores srow[0..t] (overwritten); returns the statistics.
RowStats SoftmaxRow(float* srow, float* arow, int t, int T, float scale) {
  const float maxval = fast::Max(srow, t + 1);
  ExpRow(srow, t + 1, maxval, scale);
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int i = 0; i <= t; i++) sum += srow[i];
  const float inv = 1.0f / sum;
  ScaleRow(srow, arow, t, T, inv);
  return {maxval, inv};
}

// The same row again from the same scores and the statistics SoftmaxRow returned: the same bits.
void RecomputeRow(float* srow, float* arow, int t, int T, float scale, RowStats st) {
  ExpRow(srow, t + 1, st.max, scale);
  ScaleRow(srow, arow, t, T, st.inv);
}

}  // namespace

// Per (batch, head) the scores of kRows rows at a time, their softmax into the probabilities, and out = P·V.
// naive: the probabilities go to the state (att[B,NH,T,T]). flash: to a per-thread [T,T] buffer, and the
// state keeps each row's statistics (RowStats, [B,NH,T]).
// bf16 q, k, v (In = uint16_t) are widened as they are packed (Q too: fp32 reads it in place), and a bf16
// output is rounded as it is stored; the products and the softmax are the fp32 ones.
namespace {

template <typename In, typename Out>
void AttentionForwardImpl(fast::Scratch& scratch_buf, bool flash, Out* out, void* state, const In* qkv, int B,
                          int T, int C, int NH) {
  constexpr bool kPackQ = !std::is_same_v<In, float>;
  const int C3 = 3 * C, hs = C / NH, tp = RoundUp(T, 16), hsp = RoundUp(hs, 16);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  // Multiples of 16 floats, so that every thread's tiles stay 64-byte aligned.
  const size_t probs = flash ? RoundUp(static_cast<size_t>(T) * T, size_t{16}) : 0;
  const size_t qpack = kPackQ ? static_cast<size_t>(T) * hsp : 0;
  const size_t per_thread =
      static_cast<size_t>(hs) * tp + static_cast<size_t>(T) * hsp + kRows * (tp + hsp) + probs + qpack;
  float* scratch = scratch_buf.As<float>(per_thread * omp_get_max_threads());
  float* att = flash ? nullptr : static_cast<float*>(state);
  RowStats* stats = flash ? static_cast<RowStats*>(state) : nullptr;
#pragma omp parallel for schedule(static) if (B * NH > 1)
  for (int bh = 0; bh < B * NH; bh++) {
    const int b = bh / NH, h = bh % NH;
    float* kt = scratch + per_thread * omp_get_thread_num();  // [hs][tp]
    float* vp = kt + static_cast<size_t>(hs) * tp;            // [T][hsp]
    float* s = vp + static_cast<size_t>(T) * hsp;             // [kRows][tp] scores
    float* o = s + kRows * tp;                                // [kRows][hsp] outputs
    float* local = o + kRows * hsp;                           // [T][T] probabilities (flash)
    float* qp = local + probs;                                // [T][hsp] Q widened (bf16 input)
    const In* q = qkv + static_cast<size_t>(b) * T * C3 + h * hs;
    PackTransposed(kt, q + C, C3, T, hs, tp);
    PackRows(vp, q + 2 * C, C3, T, hs, hsp);
    const float* qa = reinterpret_cast<const float*>(q);  // Q as the scores' A operand (fp32 input: in place)
    ptrdiff_t q_rs = C3;
    if constexpr (kPackQ) {
      PackRows(qp, q, C3, T, hs, hsp);
      qa = qp;
      q_rs = hsp;
    }
    float* att_bh = flash ? local : att + static_cast<size_t>(bh) * T * T;
    for (int r0 = 0; r0 < T; r0 += kRows) {
      const int mr = std::min(kRows, T - r0);
      RowBlock(Causal::kColsToDiagonal, r0, mr, tp, hs, qa, q_rs, 1, kt, tp, s, tp);
      for (int i = 0; i < mr; i++) {
        const int t = r0 + i;
        const RowStats st = SoftmaxRow(s + i * tp, att_bh + static_cast<size_t>(t) * T, t, T, scale);
        if (flash) stats[static_cast<size_t>(bh) * T + t] = st;
      }
      RowBlock(Causal::kKToDiagonal, r0, mr, hsp, T, att_bh, T, 1, vp, hsp, o, hsp);
      for (int i = 0; i < mr; i++)
        StoreRow(out + (static_cast<size_t>(b) * T + r0 + i) * C + h * hs, o + i * hsp, hs);
    }
  }
}

}  // namespace

void CpuFastBackend::AttentionForward(float* out, void* state, const float* qkv, int B, int T, int C, int NH,
                                      Compute /*compute: fp32 on the CPU*/) {
  AttentionForwardImpl(attention_, attention_kind_ == AttentionKind::kFlash, out, state, qkv, B, T, C, NH);
}

void CpuFastBackend::AttentionForwardBF16(uint16_t* out, void* state, const uint16_t* qkv, int B, int T,
                                          int C, int NH, Compute /*compute*/) {
  AttentionForwardImpl(attention_, attention_kind_ == AttentionKind::kFlash, out, state, qkv, B, T, C, NH);
}

// flash: the probabilities of one (batch, head) are recomputed first, from the same scores and statistics,
// into a per-thread [T,T] buffer, and dS goes to another; then the products run as for naive.
// bf16 q, k, v (In = uint16_t): the flash recompute reads the packed (widened) Q; the gradients stay fp32.
namespace {

template <typename In>
void AttentionBackwardImpl(fast::Scratch& scratch_buf, bool flash, float* dqkv, void* scratch_in,
                           const float* dout, const In* qkv, const void* state, int B, int T, int C, int NH) {
  const int C3 = 3 * C, hs = C / NH, tp = RoundUp(T, 16), hsp = RoundUp(hs, 16);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const size_t tt = RoundUp(static_cast<size_t>(T) * T, size_t{16});  // keeps every thread's tiles aligned
  const size_t own = flash ? static_cast<size_t>(hs) * tp + 2 * tt : 0;
  const size_t per_thread =
      static_cast<size_t>(hs) * tp + 3 * static_cast<size_t>(T) * hsp + kRows * (tp + hsp) + own;
  float* scratch = scratch_buf.As<float>(per_thread * omp_get_max_threads());
  const float* att = flash ? nullptr : static_cast<const float*>(state);
  float* datt = flash ? nullptr : static_cast<float*>(scratch_in);
  const RowStats* stats = flash ? static_cast<const RowStats*>(state) : nullptr;
#pragma omp parallel for schedule(static) if (B * NH > 1)
  for (int bh = 0; bh < B * NH; bh++) {
    const int b = bh / NH, h = bh % NH;
    float* vt = scratch + per_thread * omp_get_thread_num();  // [hs][tp]
    float* qp = vt + static_cast<size_t>(hs) * tp;            // [T][hsp]
    float* kp = qp + static_cast<size_t>(T) * hsp;            // [T][hsp]
    float* dop = kp + static_cast<size_t>(T) * hsp;           // [T][hsp]
    float* s = dop + static_cast<size_t>(T) * hsp;            // [kRows][tp] dP rows (flash: scores first)
    float* o = s + kRows * tp;                                // [kRows][hsp] gradient rows
    float* kt = o + kRows * hsp;                              // flash: [hs][tp] K transposed
    float* local_att = kt + static_cast<size_t>(hs) * tp;     // flash: [T][T] probabilities
    float* local_datt = local_att + tt;                       // flash: [T][T] dS
    const In* q = qkv + static_cast<size_t>(b) * T * C3 + h * hs;
    const float* dy = dout + static_cast<size_t>(b) * T * C + h * hs;
    float* dq = dqkv + static_cast<size_t>(b) * T * C3 + h * hs;
    const float* att_bh = flash ? local_att : att + static_cast<size_t>(bh) * T * T;
    float* datt_bh = flash ? local_datt : datt + static_cast<size_t>(bh) * T * T;
    PackRows(qp, q, C3, T, hs, hsp);
    if (flash) {
      PackTransposed(kt, q + C, C3, T, hs, tp);
      // The forward's scores again from the same operands: Q in place (fp32), or widened (bf16), as there.
      const float* qa = std::is_same_v<In, float> ? reinterpret_cast<const float*>(q) : qp;
      const ptrdiff_t q_rs = std::is_same_v<In, float> ? C3 : hsp;
      for (int r0 = 0; r0 < T; r0 += kRows) {
        const int mr = std::min(kRows, T - r0);
        RowBlock(Causal::kColsToDiagonal, r0, mr, tp, hs, qa, q_rs, 1, kt, tp, s, tp);
        for (int i = 0; i < mr; i++) {
          const int t = r0 + i;
          RecomputeRow(s + i * tp, local_att + static_cast<size_t>(t) * T, t, T, scale,
                       stats[static_cast<size_t>(bh) * T + t]);
        }
      }
    }
    PackTransposed(vt, q + 2 * C, C3, T, hs, tp);
    PackRows(kp, q + C, C3, T, hs, hsp);
    PackRows(dop, dy, C, T, hs, hsp);
    // dS = att ⊙ (dP − rowsum(att ⊙ dP)) · scale, zero above the diagonal
    for (int r0 = 0; r0 < T; r0 += kRows) {
      const int mr = std::min(kRows, T - r0);
      RowBlock(Causal::kColsToDiagonal, r0, mr, tp, hs, dy, C, 1, vt, tp, s, tp);
      for (int i = 0; i < mr; i++) {
        const int t = r0 + i;
        const float* __restrict dp = s + i * tp;
        const float* __restrict p = att_bh + static_cast<size_t>(t) * T;
        float* __restrict ds = datt_bh + static_cast<size_t>(t) * T;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int t2 = 0; t2 <= t; t2++) dot += p[t2] * dp[t2];
#pragma omp simd
        for (int t2 = 0; t2 <= t; t2++) ds[t2] = p[t2] * (dp[t2] - dot) * scale;
        // The products below read at most kRows - 1 entries right of the diagonal; the rest stays unwritten.
        std::memset(ds + t + 1, 0, sizeof(float) * std::min(T - t - 1, kRows - 1));
      }
    }
    // dQ = dS·K, dK = dSᵀ·Q, dV = attᵀ·dO, each written to its third of dqkv
    struct Product {
      Causal causal;
      const float* a;
      ptrdiff_t a_rs, a_ks;
      const float* b;
      int offset;
    };
    const Product products[3] = {{Causal::kKToDiagonal, datt_bh, T, 1, kp, 0},
                                 {Causal::kKFromDiagonal, datt_bh, 1, T, qp, C},
                                 {Causal::kKFromDiagonal, att_bh, 1, T, dop, 2 * C}};
    for (const Product& pr : products) {
      for (int r0 = 0; r0 < T; r0 += kRows) {
        const int mr = std::min(kRows, T - r0);
        RowBlock(pr.causal, r0, mr, hsp, T, pr.a, pr.a_rs, pr.a_ks, pr.b, hsp, o, hsp);
        for (int i = 0; i < mr; i++) {
          std::memcpy(dq + static_cast<size_t>(r0 + i) * C3 + pr.offset, o + i * hsp, sizeof(float) * hs);
        }
      }
    }
  }
}

}  // namespace

void CpuFastBackend::AttentionBackward(float* dqkv, void* scratch, const float* dout, const float* qkv,
                                       const float* /*out*/, const void* state, int B, int T, int C, int NH,
                                       Compute /*compute*/) {
  AttentionBackwardImpl(attention_, attention_kind_ == AttentionKind::kFlash, dqkv, scratch, dout, qkv, state,
                        B, T, C, NH);
}

void CpuFastBackend::AttentionBackwardBF16(float* dqkv, void* scratch, const float* dout, const uint16_t* qkv,
                                           const uint16_t* /*out*/, const void* state, int B, int T, int C,
                                           int NH, Compute /*compute*/) {
  AttentionBackwardImpl(attention_, attention_kind_ == AttentionKind::kFlash, dqkv, scratch, dout, qkv, state,
                        B, T, C, NH);
}

}  // namespace tern
