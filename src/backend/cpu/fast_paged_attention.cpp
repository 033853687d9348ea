// Fast CPU versions of the ragged-batch inference ops: token embedding with per-row positions, the KV cache
// write, and attention over a paged KV cache (backend.h, "inference ops").
//
// Decode attention reads the whole KV cache of every sequence once per token, so it is bound by the bytes
// of the cache and by the work per key. Keys are stored transposed within a block ([hs, bs]): the scores
// of 16 positions are then hs vector multiply-adds with the query element broadcast, with no horizontal
// sum per position; the output row stays in registers while the values stream past. bf16 caches halve
// the bytes and widen to fp32 exactly on load (one shift); int8 caches convert on load and apply their
// per-(head, slot) scales to the 16 scores of a chunk and to each value's softmax weight. All arithmetic is
// fp32.
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
#include <type_traits>

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
  // GCC 12 splits the generic conversion below into two 256-bit halves; this is one widening load. (The
  // maskz forms with a full mask compile to the same instructions; the plain ones warn -Wmaybe-uninitialized
  // about their undefined pass-through operand under GCC 12.)
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return reinterpret_cast<v16>(_mm512_maskz_slli_epi32(0xFFFF, _mm512_maskz_cvtepu16_epi32(0xFFFF, h), 16));
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
inline v16 LoadKv16(const int8_t* p) {
#if defined(__AVX512F__)
  return reinterpret_cast<v16>(_mm512_maskz_cvtepi32_ps(
      0xFFFF, _mm512_maskz_cvtepi8_epi32(0xFFFF, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))));
#else
  typedef int8_t i8x16 __attribute__((vector_size(16)));
  i8x16 b;
  std::memcpy(&b, p, sizeof(b));
  return __builtin_convertvector(b, v16);
#endif
}
inline float LoadKv(const float* p) {
  return *p;
}
inline float LoadKv(const int8_t* p) {
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

// Where one layer's cache keeps a head's keys [hs, bs] or values [bs, hs] of a block (blocks KvBlockBytes
// apart), and for int8 the scales of its bs slots (scale[NH, bs] after the elements of the block).
struct KvLayout {
  int NH, bs, hs;
  size_t block_bytes;
  KvLayout(DType t, int C, int NH_, int bs_)
      : NH(NH_), bs(bs_), hs(C / NH_), block_bytes(KvBlockBytes(t, C, NH_, bs_)) {}
  template <typename T>
  T* Head(const void* cache, int block, int h) const {
    return reinterpret_cast<T*>(const_cast<char*>(static_cast<const char*>(cache)) + block * block_bytes) +
           static_cast<size_t>(h) * hs * bs;
  }
  float* Scales(const void* cache, int block, int h) const {
    char* elements_end = reinterpret_cast<char*>(Head<int8_t>(cache, block, NH));
    return reinterpret_cast<float*>(elements_end) + static_cast<size_t>(h) * bs;
  }
};

// Stores x[hs] (one head's key or value) at element `at` with `stride` between elements: int8 as
// backend.h states, with the same arithmetic as the reference (so both caches hold the same bytes).
template <typename T>
void StoreHead(T* at, size_t stride, const float* x, int hs, float* scale) {
  if constexpr (std::is_same_v<T, int8_t>) {
    float m = 0.0f;
    for (int j = 0; j < hs; j++) m = std::max(m, std::fabs(x[j]));
    const float inv = m > 0.0f ? 127.0f / m : 0.0f;
    *scale = m / 127.0f;
    for (int j = 0; j < hs; j++) at[j * stride] = static_cast<int8_t>(std::nearbyint(x[j] * inv));
  } else {
    for (int j = 0; j < hs; j++) StoreKv(at + j * stride, x[j]);
  }
}

// Rows x C below which the cache write runs on one thread. A row's keys go to a column of the transposed
// block, a cache line per two elements (mostly not in cache yet), so an element costs ~8x an elementwise op.
constexpr size_t kKvWriteParallelMin = kParallelMin / 8;

template <typename T>
void WriteKv(const KvLayout& kv, void* k_cache, void* v_cache, const float* qkv, const int32_t* slots,
             int N) {
  const int NH = kv.NH, bs = kv.bs, hs = kv.hs, C = NH * hs;
#pragma omp parallel for schedule(static) if (static_cast <size_t>(N) * C >= kKvWriteParallelMin)
  for (int n = 0; n < N; n++) {
    const int block = slots[n] / bs, slot = slots[n] % bs;
    const float* k = qkv + static_cast<size_t>(n) * 3 * C + C;
    const float* v = k + C;
    for (int h = 0; h < NH; h++) {
      // key column `slot` of the block's [hs, bs] keys; value row `slot` of its [bs, hs] values
      StoreHead(kv.Head<T>(k_cache, block, h) + slot, bs, k + h * hs, hs,
                kv.Scales(k_cache, block, h) + slot);
      StoreHead(kv.Head<T>(v_cache, block, h) + static_cast<size_t>(slot) * hs, 1, v + h * hs, hs,
                kv.Scales(v_cache, block, h) + slot);
    }
  }
}

// One (row, head) of the attention: the query q[hs] at position pos over positions 0..pos of its sequence
// (block table `table`), into o[hs]; att is scratch for RoundUp(pos + 1, 16) scores.
struct AttendArgs {
  const void* k_cache;
  const void* v_cache;
  const KvLayout* kv;
  const int32_t* table;
  int pos, h;
  float scale;
  // head h's keys (or values) in the sequence's b-th block, and (int8) their scales
  template <typename T>
  const T* Head(const void* cache, int b) const {
    return kv->Head<T>(cache, table[b], h);
  }
  const float* Scales(const void* cache, int b) const { return kv->Scales(cache, table[b], h); }
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
  constexpr bool kScaled = std::is_same_v<T, int8_t>;
  const int bs = a.kv->bs, n = a.pos + 1;
  const size_t head_bytes = static_cast<size_t>(hs) * bs * sizeof(T);  // one head in one block
  const int blocks = (n + bs - 1) / bs;
  for (int p0 = 0; p0 < n; p0 += bs) {
    const int b = p0 / bs;
    const T* kb = a.Head<T>(a.k_cache, b);
    // While this block's keys are read: the next block's keys, and this block's values for the second pass.
    if (b + 1 < blocks) Prefetch(a.Head<T>(a.k_cache, b + 1), head_bytes);
    Prefetch(a.Head<T>(a.v_cache, b), head_bytes);
    const int in_block = std::min(bs, n - p0);
    for (int c = 0; c < in_block; c += 16) {
      v16 acc[4] = {v16{}, v16{}, v16{}, v16{}};
      for (int j = 0; j < hs; j += 4)
        for (int u = 0; u < 4; u++) acc[u] += q[j + u] * LoadKv16(kb + static_cast<size_t>(j + u) * bs + c);
      v16 score = ((acc[0] + acc[1]) + (acc[2] + acc[3])) * a.scale;
      if constexpr (kScaled) score *= Load16(a.Scales(a.k_cache, b) + c);  // each position's key scale
      Store16(att + p0 + c, score);
    }
  }
  const float inv = SoftmaxInPlace(att, n);
  v16 out[HV];
  for (int v = 0; v < HV; v++) out[v] = v16{};
  for (int p0 = 0; p0 < n; p0 += bs) {
    const T* vb = a.Head<T>(a.v_cache, p0 / bs);
    const float* vscale = kScaled ? a.Scales(a.v_cache, p0 / bs) : nullptr;
    const int in_block = std::min(bs, n - p0);
    for (int i = 0; i < in_block; i++) {
      const float w = kScaled ? att[p0 + i] * vscale[i] : att[p0 + i];
      for (int v = 0; v < HV; v++) out[v] += w * LoadKv16(vb + static_cast<size_t>(i) * hs + 16 * v);
    }
  }
  for (int v = 0; v < HV; v++) Store16(o + 16 * v, out[v] * inv);
}

// Any bs and hs: the same passes with scalar loops.
template <typename T>
void AttendScalar(float* o, const float* q, const AttendArgs& a, float* att) {
  constexpr bool kScaled = std::is_same_v<T, int8_t>;
  const int bs = a.kv->bs, hs = a.kv->hs, n = a.pos + 1;
  for (int p = 0; p < n; p++) {
    const T* kb = a.Head<T>(a.k_cache, p / bs) + p % bs;
    float dot = 0.0f;
    for (int j = 0; j < hs; j++) dot += q[j] * LoadKv(kb + static_cast<size_t>(j) * bs);
    att[p] = dot * a.scale;
    if constexpr (kScaled) att[p] *= a.Scales(a.k_cache, p / bs)[p % bs];
  }
  const float inv = SoftmaxInPlace(att, n);
  for (int j = 0; j < hs; j++) o[j] = 0.0f;
  for (int p = 0; p < n; p++) {
    const T* vr = a.Head<T>(a.v_cache, p / bs) + static_cast<size_t>(p % bs) * hs;
    const float w = kScaled ? att[p] * a.Scales(a.v_cache, p / bs)[p % bs] : att[p];
    for (int j = 0; j < hs; j++) o[j] += w * LoadKv(vr + j);
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

void CpuFastBackend::EmbedTokensBF16(float* out, const int32_t* tokens, const int32_t* positions,
                                     const uint16_t* wte, const float* wpe, int N, int C) {
#pragma omp parallel for schedule(static) if (static_cast <size_t>(N) * C >= kParallelMin)
  for (int n = 0; n < N; n++) {
    float* __restrict o = out + static_cast<size_t>(n) * C;
    const uint16_t* __restrict e = wte + static_cast<size_t>(tokens[n]) * C;
    const float* __restrict p = wpe + static_cast<size_t>(positions[n]) * C;
#pragma omp simd
    for (int i = 0; i < C; i++) o[i] = fast::FromBF16(e[i]) + p[i];
  }
}

void CpuFastBackend::KvCacheWrite(void* k_cache, void* v_cache, DType kv_dtype, const float* qkv,
                                  const int32_t* slots, int N, int C, int NH, int bs) {
  const KvLayout kv(kv_dtype, C, NH, bs);
  if (kv_dtype == DType::kBF16) {
    WriteKv<uint16_t>(kv, k_cache, v_cache, qkv, slots, N);
  } else if (kv_dtype == DType::kI8) {
    WriteKv<int8_t>(kv, k_cache, v_cache, qkv, slots, N);
  } else {
    WriteKv<float>(kv, k_cache, v_cache, qkv, slots, N);
  }
}

void CpuFastBackend::PagedAttentionForward(float* out, const float* qkv, const void* k_cache,
                                           const void* v_cache, DType kv_dtype, const int32_t* seqs,
                                           const int32_t* block_tables, int S, int max_blocks, int N, int C,
                                           int NH, int bs) {
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const AttendFn attend = kv_dtype == DType::kBF16 ? PickAttend<uint16_t>(bs, hs)
                          : kv_dtype == DType::kI8 ? PickAttend<int8_t>(bs, hs)
                                                   : PickAttend<float>(bs, hs);
  const KvLayout kv(kv_dtype, C, NH, bs);
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
                            &kv,
                            block_tables + static_cast<size_t>(s) * max_blocks,
                            ctx_len - q_len + (row - seqs[3 * s]),
                            h,
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
