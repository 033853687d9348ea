// Fast CPU versions of the ragged-batch inference ops: token embedding with per-row positions, the KV cache
// write, and attention over a paged KV cache (backend.h, "inference ops").
//
// Decode attention reads the whole KV cache of every sequence once per token, so it is bound by the bytes
// of the cache and by the work per key. Keys are stored transposed within a block ([hs, bs]): the scores
// of 16 positions are then hs vector multiply-adds with the query element broadcast, with no horizontal
// sum per position; the output row stays in registers while the values stream past. bf16 caches halve
// the bytes and widen to fp32 exactly on load (one shift), so all arithmetic is fp32.
//
// Row independence is the point of the design: the serving engine batches requests together and must decode
// the same tokens as when each runs alone. Every (row, head) of the attention is computed by one thread with
// explicit 16-float vectors in a fixed order: the dot products run over the head dimension in 16-wide
// chunks then a fixed horizontal sum; the softmax and the weighted sum of values walk the positions in
// order. Nothing depends on N, on the thread count or on buffer alignment, so results are bitwise the same
// whichever rows share the batch.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
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

// 16 consecutive cache elements as fp32: plain floats, or bf16 widened exactly (the bits shifted up).
inline v16 LoadKv16(const float* p) {
  return Load16(p);
}
inline v16 LoadKv16(const uint16_t* p) {
#if defined(__AVX512F__)
  // GCC 12 splits the generic conversion below into two 256-bit halves; this is one widening load.
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return reinterpret_cast<v16>(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
#else
  typedef uint16_t u16x16 __attribute__((vector_size(32)));
  typedef uint32_t u32x16 __attribute__((vector_size(64)));
  u16x16 h;
  std::memcpy(&h, p, sizeof(h));
  const u32x16 bits = __builtin_convertvector(h, u32x16) << 16;
  v16 v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
#endif
}
inline float LoadKv(const float* p) {
  return *p;
}
inline float LoadKv(const uint16_t* p) {
  return fast::FromBF16(*p);
}
inline void StoreKv(float* p, float x) {
  *p = x;
}
inline void StoreKv(uint16_t* p, float x) {
  *p = fast::ToBF16(x);
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

using fast::kParallelMin;
// Attention work (rows x context x C) below which one thread is faster: a (row, head) pair takes ~0.6 us
// per 64 positions, so this is ~40 us of work, about the cost of waking a sleeping worker.
constexpr size_t kAttentionParallelMin = 1 << 19;

// Rows x C below which the cache write runs on one thread. A row's keys go to a column of the transposed
// block, a cache line per two elements (mostly not in cache yet), so an element costs ~8x an elementwise op.
constexpr size_t kKvWriteParallelMin = kParallelMin / 8;

template <typename T>
void WriteKv(T* k_cache, T* v_cache, const float* qkv, const int32_t* slots, int N, int C, int NH, int bs) {
  const int hs = C / NH;
#pragma omp parallel for schedule(static) if (static_cast <size_t>(N) * C >= kKvWriteParallelMin)
  for (int n = 0; n < N; n++) {
    const int block = slots[n] / bs, slot = slots[n] % bs;
    const float* k = qkv + static_cast<size_t>(n) * 3 * C + C;
    const float* v = k + C;
    for (int h = 0; h < NH; h++) {
      const size_t head = static_cast<size_t>(block) * NH + h;
      T* kt = k_cache + head * hs * bs + slot;  // column `slot` of the block's [hs, bs] keys
      T* vr = v_cache + (head * bs + slot) * hs;
      for (int j = 0; j < hs; j++) StoreKv(kt + static_cast<size_t>(j) * bs, k[h * hs + j]);
      for (int j = 0; j < hs; j++) StoreKv(vr + j, v[h * hs + j]);
    }
  }
}

// One (row, head) of the attention: the query q[hs] at position pos over positions 0..pos of its sequence
// (block table `table`), into o[hs]; att is scratch for RoundUp(pos + 1, 16) scores.
struct AttendArgs {
  const void* k_cache;
  const void* v_cache;
  const int32_t* table;
  int pos, NH, h, bs, hs;
  float scale;
};

// softmax of att[0..n) in place (max subtracted); returns 1 / sum of the exponentials.
float SoftmaxInPlace(float* att, int n) {
  const float maxval = fast::Max(att, n);
  v16 sum16 = v16{};
  int p = 0;
  for (; p + 16 <= n; p += 16) {
    float e[16];
    for (int j = 0; j < 16; j++) e[j] = fast::Exp(att[p + j] - maxval);
    std::memcpy(att + p, e, sizeof(e));
    sum16 += Load16(e);
  }
  float expsum = HorizontalSum(sum16);
  for (; p < n; p++) {
    att[p] = fast::Exp(att[p] - maxval);
    expsum += att[p];
  }
  return 1.0f / expsum;
}

// The vector kernel: bs % 16 == 0 and hs = 16 * HV. Scores 16 positions at a time from the transposed keys
// (four independent accumulators over the head dimension, summed in a fixed order); values accumulate
// into HV registers.
// Asks for the `bytes` at p to be brought into the cache: the blocks of a sequence are scattered, so the
// hardware prefetcher cannot guess the next one; the block table can.
inline void Prefetch(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t i = 0; i < bytes; i += 64) __builtin_prefetch(c + i);
}

template <typename T, int HV>
void AttendVector(float* o, const float* q, const AttendArgs& a, float* att) {
  constexpr int hs = HV * 16;
  const int bs = a.bs, n = a.pos + 1;
  const size_t head_block = static_cast<size_t>(hs) * bs;  // elements of one head in one block
  const T* kc = static_cast<const T*>(a.k_cache);
  const T* vc = static_cast<const T*>(a.v_cache);
  auto key_block = [&](int b) { return kc + (static_cast<size_t>(a.table[b]) * a.NH + a.h) * head_block; };
  auto value_block = [&](int b) { return vc + (static_cast<size_t>(a.table[b]) * a.NH + a.h) * head_block; };
  const int blocks = (n + bs - 1) / bs;
  for (int p0 = 0; p0 < n; p0 += bs) {
    const T* kb = key_block(p0 / bs);
    // While this block's keys are read: the next block's keys, and this block's values for the second pass.
    if (p0 / bs + 1 < blocks) Prefetch(key_block(p0 / bs + 1), head_block * sizeof(T));
    Prefetch(value_block(p0 / bs), head_block * sizeof(T));
    const int in_block = std::min(bs, n - p0);
    for (int c = 0; c < in_block; c += 16) {
      v16 acc[4] = {v16{}, v16{}, v16{}, v16{}};
      for (int j = 0; j < hs; j += 4)
        for (int u = 0; u < 4; u++) acc[u] += q[j + u] * LoadKv16(kb + static_cast<size_t>(j + u) * bs + c);
      Store16(att + p0 + c, ((acc[0] + acc[1]) + (acc[2] + acc[3])) * a.scale);
    }
  }
  const float inv = SoftmaxInPlace(att, n);
  v16 out[HV];
  for (int v = 0; v < HV; v++) out[v] = v16{};
  for (int p0 = 0; p0 < n; p0 += bs) {
    const T* vb = value_block(p0 / bs);
    const int in_block = std::min(bs, n - p0);
    for (int i = 0; i < in_block; i++) {
      const float w = att[p0 + i];
      for (int v = 0; v < HV; v++) out[v] += w * LoadKv16(vb + static_cast<size_t>(i) * hs + 16 * v);
    }
  }
  for (int v = 0; v < HV; v++) Store16(o + 16 * v, out[v] * inv);
}

// Any bs and hs: the same passes with scalar loops.
template <typename T>
void AttendScalar(float* o, const float* q, const AttendArgs& a, float* att) {
  const int bs = a.bs, hs = a.hs, n = a.pos + 1;
  const T* kc = static_cast<const T*>(a.k_cache);
  const T* vc = static_cast<const T*>(a.v_cache);
  for (int p = 0; p < n; p++) {
    const T* kb = kc + (static_cast<size_t>(a.table[p / bs]) * a.NH + a.h) * hs * bs + p % bs;
    float dot = 0.0f;
    for (int j = 0; j < hs; j++) dot += q[j] * LoadKv(kb + static_cast<size_t>(j) * bs);
    att[p] = dot * a.scale;
  }
  const float inv = SoftmaxInPlace(att, n);
  for (int j = 0; j < hs; j++) o[j] = 0.0f;
  for (int p = 0; p < n; p++) {
    const T* vr = vc + ((static_cast<size_t>(a.table[p / bs]) * a.NH + a.h) * bs + p % bs) * hs;
    for (int j = 0; j < hs; j++) o[j] += att[p] * LoadKv(vr + j);
  }
  for (int j = 0; j < hs; j++) o[j] *= inv;
}

using AttendFn = void (*)(float*, const float*, const AttendArgs&, float*);

template <typename T>
AttendFn PickAttend(int bs, int hs) {
  if (bs % 16 != 0 || hs % 16 != 0 || hs > 128) return AttendScalar<T>;
  constexpr AttendFn kVector[8] = {AttendVector<T, 1>, AttendVector<T, 2>, AttendVector<T, 3>,
                                   AttendVector<T, 4>, AttendVector<T, 5>, AttendVector<T, 6>,
                                   AttendVector<T, 7>, AttendVector<T, 8>};
  return kVector[hs / 16 - 1];
}

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

void CpuFastBackend::KvCacheWrite(void* k_cache, void* v_cache, DType kv_dtype, const float* qkv,
                                  const int32_t* slots, int N, int C, int NH, int bs) {
  if (kv_dtype == DType::kBF16) {
    WriteKv(static_cast<uint16_t*>(k_cache), static_cast<uint16_t*>(v_cache), qkv, slots, N, C, NH, bs);
  } else {
    WriteKv(static_cast<float*>(k_cache), static_cast<float*>(v_cache), qkv, slots, N, C, NH, bs);
  }
}

void CpuFastBackend::PagedAttentionForward(float* out, const float* qkv, const void* k_cache,
                                           const void* v_cache, DType kv_dtype, const int32_t* seqs,
                                           const int32_t* block_tables, int S, int max_blocks, int N, int C,
                                           int NH, int bs) {
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const AttendFn attend = kv_dtype == DType::kBF16 ? PickAttend<uint16_t>(bs, hs) : PickAttend<float>(bs, hs);
  // Scratch: per-thread scores, then seq_of_row (a row's sequence) and cost_end.
  int max_ctx = 0;
  for (int s = 0; s < S; s++) max_ctx = std::max(max_ctx, static_cast<int>(seqs[3 * s + 2]));
  const size_t per_thread = fast::RoundUp(static_cast<size_t>(max_ctx), 16);
  const int nthreads = omp_get_max_threads();
  float* scores_all = paged_scores_.As<float>(per_thread * nthreads + 3 * fast::RoundUp(N, 16));
  int32_t* seq_of_row = reinterpret_cast<int32_t*>(scores_all + per_thread * nthreads);
  for (int s = 0; s < S; s++)
    for (int i = 0; i < seqs[3 * s + 1]; i++) seq_of_row[seqs[3 * s] + i] = s;
  // Work items are (row, head) pairs in row-major order; an item costs its row's context length. Each thread
  // takes one contiguous run of items of about equal total cost: the heads of a row lie side by side in every
  // block, so a thread walks memory in order (items interleaved over threads made both cores pull the same
  // cache lines and ran 1.7x slower).
  int64_t* cost_end = reinterpret_cast<int64_t*>(seq_of_row + fast::RoundUp(N, 16));  // [N] through row n
  int64_t total = 0;
  for (int row = 0; row < N; row++) {
    const int s = seq_of_row[row];
    total += static_cast<int64_t>(NH) * (seqs[3 * s + 2] - seqs[3 * s + 1] + (row - seqs[3 * s]) + 1);
    cost_end[row] = total;
  }
  auto attend_items = [&](int begin, int end, float* scores) {
    for (int item = begin; item < end; item++) {
      const int row = item / NH, h = item % NH, s = seq_of_row[row];
      const int q_len = seqs[3 * s + 1], ctx_len = seqs[3 * s + 2];
      const AttendArgs args{k_cache,
                            v_cache,
                            block_tables + static_cast<size_t>(s) * max_blocks,
                            ctx_len - q_len + (row - seqs[3 * s]),
                            NH,
                            h,
                            bs,
                            hs,
                            scale};
      attend(out + static_cast<size_t>(row) * C + h * hs, qkv + static_cast<size_t>(row) * 3 * C + h * hs,
             args, scores);
    }
  };
  // Skipped for tiny batches (one decode row of a small model): the fork/join would dominate.
  if (static_cast<size_t>(N) * max_ctx * C < kAttentionParallelMin || nthreads == 1) {
    attend_items(0, N * NH, scores_all);
    return;
  }
  // The first item whose cost starts at or after `bound`.
  auto first_item = [&](int64_t bound) {
    const int row = static_cast<int>(std::upper_bound(cost_end, cost_end + N, bound) - cost_end);
    if (row == N) return N * NH;
    const int64_t start = row == 0 ? 0 : cost_end[row - 1], per_head = (cost_end[row] - start) / NH;
    return row * NH + static_cast<int>((bound - start + per_head - 1) / per_head);
  };
#pragma omp parallel
  {
    const int t = omp_get_thread_num(), threads = omp_get_num_threads();
    attend_items(first_item(total * t / threads), first_item(total * (t + 1) / threads),
                 scores_all + per_thread * t);
  }
}

}  // namespace tern
