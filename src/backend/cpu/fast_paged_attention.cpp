// Fast CPU versions of the ragged-batch inference ops: token embedding with per-row positions, the KV cache
// write, and attention over a paged KV cache (backend.h, "inference ops").
//
// Row independence is the point of the design: the serving engine batches requests together and must decode
// the same tokens as when each runs alone. Every (row, head) of the attention is computed by one thread with
// explicit 16-float vectors in a fixed order: the dot products run over the head dimension in 16-wide
// chunks then a fixed horizontal sum; the softmax and the weighted sum of values walk the positions in
// order. Nothing depends on N, on the thread count or on buffer alignment, so results are bitwise the same
// whichever rows share the batch.
#include <omp.h>

#include <cmath>
#include <cstring>

#include "backend/cpu/fast_ops.h"

namespace tern {
namespace {

typedef float v16 __attribute__((vector_size(64)));  // one AVX-512 register of floats

inline v16 Load16(const float* p) {
  v16 v;
  std::memcpy(&v, p, sizeof(v));  // unaligned load
  return v;
}
inline void Store16(float* p, v16 v) {
  std::memcpy(p, &v, sizeof(v));
}

// Lanes summed in a fixed tree order (halves, then quarters, ...), in registers: a round trip through memory
// would stall on store forwarding once per dot product.
inline float HorizontalSum(v16 v) {
  typedef float v8 __attribute__((vector_size(32)));
  typedef float v4 __attribute__((vector_size(16)));
  v8 a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
         __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  v4 b = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
  return (b[0] + b[2]) + (b[1] + b[3]);
}

inline float Dot(const float* a, const float* b, int n) {
  v16 acc = v16{};
  int j = 0;
  for (; j + 16 <= n; j += 16) acc += Load16(a + j) * Load16(b + j);
  float sum = HorizontalSum(acc);
  for (; j < n; j++) sum += a[j] * b[j];
  return sum;
}

// o[0..n) += a * v[0..n)
inline void Axpy(float* o, float a, const float* v, int n) {
  int j = 0;
  for (; j + 16 <= n; j += 16) Store16(o + j, Load16(o + j) + a * Load16(v + j));
  for (; j < n; j++) o[j] += a * v[j];
}

constexpr size_t kParallelMin = 1 << 14;  // elements below which a fork/join costs more than it saves

}  // namespace

void CpuFastBackend::EmbedTokens(float* out, const int32_t* tokens, const int32_t* positions,
                                 const float* wte, const float* wpe, int N, int C) {
#pragma omp parallel for schedule(static) if (static_cast <size_t>(N) * C >= kParallelMin)
  for (int n = 0; n < N; n++) {
    float* __restrict o = out + static_cast<size_t>(n) * C;
    const float* __restrict e = wte + static_cast<size_t>(tokens[n]) * C;
    const float* __restrict p = wpe + static_cast<size_t>(positions[n]) * C;
#pragma omp simd
    for (int i = 0; i < C; i++) o[i] = e[i] + p[i];
  }
}

void CpuFastBackend::KvCacheWrite(float* k_cache, float* v_cache, const float* qkv, const int32_t* slots,
                                  int N, int C, int NH, int bs) {
  const int hs = C / NH;
#pragma omp parallel for schedule(static) if (static_cast <size_t>(N) * C >= kParallelMin)
  for (int n = 0; n < N; n++) {
    const int block = slots[n] / bs, slot = slots[n] % bs;
    const float* k = qkv + static_cast<size_t>(n) * 3 * C + C;
    const float* v = k + C;
    for (int h = 0; h < NH; h++) {
      const size_t off = ((static_cast<size_t>(block) * NH + h) * bs + slot) * hs;
      std::memcpy(k_cache + off, k + h * hs, hs * sizeof(float));
      std::memcpy(v_cache + off, v + h * hs, hs * sizeof(float));
    }
  }
}

void CpuFastBackend::PagedAttentionForward(float* out, const float* qkv, const float* k_cache,
                                           const float* v_cache, const int32_t* seqs,
                                           const int32_t* block_tables, int S, int max_blocks, int N, int C,
                                           int NH, int bs) {
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  // Work items are (row, head) pairs; seq_of_row finds a row's sequence. Scratch: per-thread scores, then it.
  int max_ctx = 0;
  for (int s = 0; s < S; s++) max_ctx = std::max(max_ctx, static_cast<int>(seqs[3 * s + 2]));
  const size_t per_thread = fast::RoundUp(static_cast<size_t>(max_ctx), 16);
  const int nthreads = omp_get_max_threads();
  float* scores_all = paged_scores_.As<float>(per_thread * nthreads + fast::RoundUp(N, 16));
  int32_t* seq_of_row = reinterpret_cast<int32_t*>(scores_all + per_thread * nthreads);
  for (int s = 0; s < S; s++)
    for (int i = 0; i < seqs[3 * s + 1]; i++) seq_of_row[seqs[3 * s] + i] = s;
  // Skipped for tiny batches (one decode row of a small model): the fork/join would dominate.
  const size_t work = static_cast<size_t>(N) * max_ctx * C;
#pragma omp parallel for schedule(dynamic, 1) if (work >= kParallelMin)
  for (int item = 0; item < N * NH; item++) {
    const int row = item / NH, h = item % NH, s = seq_of_row[row];
    const int q_len = seqs[3 * s + 1], ctx_len = seqs[3 * s + 2];
    const int pos = ctx_len - q_len + (row - seqs[3 * s]);
    const int32_t* table = block_tables + static_cast<size_t>(s) * max_blocks;
    float* att = scores_all + per_thread * omp_get_thread_num();
    const float* q = qkv + static_cast<size_t>(row) * 3 * C + h * hs;
    // scores, block by block (a block's keys for one head are bs*hs contiguous floats)
    for (int p0 = 0; p0 <= pos; p0 += bs) {
      const size_t base = (static_cast<size_t>(table[p0 / bs]) * NH + h) * bs * hs;
      const int p1 = std::min(pos + 1, p0 + bs);
      for (int p = p0; p < p1; p++)
        att[p] = Dot(q, k_cache + base + static_cast<size_t>(p - p0) * hs, hs) * scale;
    }
    const float maxval = fast::Max(att, pos + 1);
    v16 sum16 = v16{};
    int p = 0;
    for (; p + 16 <= pos + 1; p += 16) {
      float e[16];
      for (int j = 0; j < 16; j++) e[j] = fast::Exp(att[p + j] - maxval);
      std::memcpy(att + p, e, sizeof(e));
      sum16 += Load16(e);
    }
    float expsum = HorizontalSum(sum16);
    for (; p <= pos; p++) {
      att[p] = fast::Exp(att[p] - maxval);
      expsum += att[p];
    }
    const float inv = 1.0f / expsum;
    float* o = out + static_cast<size_t>(row) * C + h * hs;
    std::memset(o, 0, hs * sizeof(float));
    for (int p0 = 0; p0 <= pos; p0 += bs) {
      const size_t base = (static_cast<size_t>(table[p0 / bs]) * NH + h) * bs * hs;
      const int p1 = std::min(pos + 1, p0 + bs);
      for (int q2 = p0; q2 < p1; q2++)
        Axpy(o, att[q2] * inv, v_cache + base + static_cast<size_t>(q2 - p0) * hs, hs);
    }
  }
}

}  // namespace tern
