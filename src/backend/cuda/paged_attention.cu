// The paged KV cache of the serving engine (backend.h, "inference ops"): KvCacheWrite stores the k and v
// parts of a ragged batch's rows in their cache slots, PagedAttentionForward attends each row's query over
// its sequence's cached keys and values through the block table. The oracle is
// cpu/reference_inference_ops.cpp.
//
// Layout (backend.h): keys k_cache[num_blocks, NH, hs, bs] (transposed within a block), values
// v_cache[num_blocks, NH, bs, hs], elements fp32 or bf16. bf16 is written rounded to nearest even (as the
// host's F32ToBF16: bitwise the CPU backends' cache, NaN payloads aside) and read back exactly; all math is
// fp32.
//
// PagedAttentionForward: one thread block of kThreads threads per (row, head), grid (N, NH).
//   1. The block finds the sequence that owns its row (a scan over seqs) and loads the query into shared
//   memory.
//   2. Scores: thread t owns positions p = t, t + kThreads, ...; each is a whole dot product over j = 0..hs-1
//   in
//      order, as the reference computes it (adjacent threads read adjacent slots of a key block: coalesced),
//      times 1/sqrt(hs), kept in `att`: shared memory, one float per position the block table can address
//      (max_blocks * bs: 4 KiB for GPT-2's 1024), or global scratch where that exceeds what a block may have.
//   3. Softmax: max and sum of exponentials as per-thread partials in position order, then a fixed tree.
//   4. Output: groups of hs threads (kThreads / hs of them) take every G-th position in order, one value
//   column
//      per thread (adjacent threads read adjacent columns: coalesced); the group partials are added in group
//      order. Head sizes above kThreads / 2 use one group whose threads loop over the columns.
// Row independence (backend.h): what a block computes depends only on its row's query, its sequence's cache
// and ctx_len; the reduction order is fixed per (row, head), so a row gives the same bits alone or in any
// batch.
//
// Faster, not done (a straightforward correct kernel first): split long contexts over several blocks and
// merge their partial softmaxes (flash-decoding) so that a decode step with few rows fills the GPU; one block
// per (sequence, head) for prefill chunks so that the chunk's rows share each key/value load, with tensor
// cores for q.k and p.v; vector loads (float4, bf16x2) and one warp per position's dot product; an online
// softmax instead of the score buffer; KvCacheWrite writing a key block's transposed slots through shared
// memory (its key stores are bs elements apart now).
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_common.cuh"

namespace tern {
namespace cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / kWarp;

// One thread per element of the k (and v) part of the rows: key j of head h goes to
// k_cache[block, h, j, slot], value j to v_cache[block, h, slot, j].
template <typename T>
__global__ void KvCacheWriteKernel(T* __restrict__ k_cache, T* __restrict__ v_cache,
                                   const float* __restrict__ qkv, const int32_t* __restrict__ slots, int N,
                                   int C, int NH, int bs) {
  const int hs = C / NH;
  const size_t n = static_cast<size_t>(N) * C;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const size_t row = i / C;
    const int c = static_cast<int>(i % C), h = c / hs, j = c % hs;
    const int block = slots[row] / bs, slot = slots[row] % bs;
    const float* x = qkv + row * 3 * C;
    const size_t head = static_cast<size_t>(block) * NH + h;
    StoreRounded(k_cache + (head * hs + j) * bs + slot, x[C + c]);
    StoreRounded(v_cache + (head * bs + slot) * hs + j, x[2 * C + c]);
  }
}

// Max (kMax) or sum over the block, combined in a fixed order; every thread gets the result. `red` holds
// kWarps floats; the leading barrier lets a previous call's readers finish first.
template <bool kMax>
__device__ float BlockReduce(float v, float* red) {
  v = kMax ? WarpMax(v) : WarpSum(v);
  __syncthreads();
  if (threadIdx.x % kWarp == 0) red[threadIdx.x / kWarp] = v;
  __syncthreads();
  float r = red[0];
  for (int w = 1; w < kWarps; w++) r = kMax ? fmaxf(r, red[w]) : r + red[w];
  return r;
}

struct PagedGeometry {
  int C, NH, hs, bs, S, max_blocks;
  float scale;  // 1 / sqrt(hs)
};

// grid (N, NH), kThreads threads. Dynamic shared memory: q[hs], partials[kThreads], red[kWarps], then
// att[max_blocks * bs] unless att_global is given ([N, NH, max_blocks * bs] floats).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    PagedAttentionKernel(float* __restrict__ out, const float* __restrict__ qkv,
                         const T* __restrict__ k_cache, const T* __restrict__ v_cache,
                         const int32_t* __restrict__ seqs, const int32_t* __restrict__ block_tables,
                         float* __restrict__ att_global, PagedGeometry g) {
  extern __shared__ float smem[];
  __shared__ int owner;
  const int row = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, hs = g.hs, bs = g.bs;
  const size_t max_ctx = static_cast<size_t>(g.max_blocks) * bs;
  float* q = smem;
  float* part = q + hs;
  float* red = part + kThreads;
  float* att = att_global ? att_global + (static_cast<size_t>(row) * g.NH + h) * max_ctx : red + kWarps;

  // 1. the sequence that owns this row (rows of different sequences do not overlap), and the query
  if (tid == 0) owner = -1;
  __syncthreads();
  for (int s = tid; s < g.S; s += kThreads) {
    const int q_start = seqs[3 * s], q_len = seqs[3 * s + 1];
    if (row >= q_start && row < q_start + q_len) owner = s;
  }
  __syncthreads();
  const int s = owner;
  if (s < 0) return;  // a row no sequence owns: left as it is, like the reference
  const int q_len = seqs[3 * s + 1], ctx = seqs[3 * s + 2];
  const int pos = ctx - q_len + (row - seqs[3 * s]);  // attends to positions 0..pos
  const int32_t* table = block_tables + static_cast<size_t>(s) * g.max_blocks;
  const float* qrow = qkv + static_cast<size_t>(row) * 3 * g.C + h * hs;
  for (int j = tid; j < hs; j += kThreads) q[j] = qrow[j];
  __syncthreads();

  // 2. scores, each a dot product in j order
  float m = -INFINITY;
  for (int p = tid; p <= pos; p += kThreads) {
    const T* k = k_cache + (static_cast<size_t>(table[p / bs]) * g.NH + h) * hs * bs + p % bs;
    float dot = 0.0f;
    for (int j = 0; j < hs; j++) dot += q[j] * Widen(k[static_cast<size_t>(j) * bs]);
    dot *= g.scale;
    att[p] = dot;
    m = fmaxf(m, dot);
  }
  m = BlockReduce<true>(m, red);

  // 3. exponentials and their sum (each thread rewrites only its own positions)
  float sum = 0.0f;
  for (int p = tid; p <= pos; p += kThreads) {
    const float e = expf(att[p] - m);
    att[p] = e;
    sum += e;
  }
  sum = BlockReduce<false>(sum, red);  // its barriers also publish every thread's att[] to the block
  const float inv = 1.0f / sum;

  // 4. out = sum_p (att[p] * inv) v_p
  float* o = out + static_cast<size_t>(row) * g.C + h * hs;
  auto value = [&](int p, int j) {
    return Widen(v_cache[((static_cast<size_t>(table[p / bs]) * g.NH + h) * bs + p % bs) * hs + j]);
  };
  if (2 * hs > kThreads) {  // one group: each thread sums whole columns
    for (int j = tid; j < hs; j += kThreads) {
      float acc = 0.0f;
      for (int p = 0; p <= pos; p++) acc += (att[p] * inv) * value(p, j);
      o[j] = acc;
    }
    return;
  }
  const int groups = kThreads / hs, grp = tid / hs, j = tid % hs;
  if (grp < groups) {
    float acc = 0.0f;
    for (int p = grp; p <= pos; p += groups) acc += (att[p] * inv) * value(p, j);
    part[tid] = acc;
  }
  __syncthreads();
  if (tid < hs) {
    float acc = part[tid];
    for (int gi = 1; gi < groups; gi++) acc += part[gi * hs + tid];
    o[tid] = acc;
  }
}

void CheckGeometry(const char* op, int C, int NH, int bs) {
  if (NH <= 0 || C % NH != 0 || bs <= 0) {
    std::fprintf(stderr, "[tern cuda] %s: C = %d must be a multiple of NH = %d, and bs = %d positive\n", op,
                 C, NH, bs);
    std::abort();
  }
}

void CheckKvDtype(const char* op, DType kv_dtype) {
  if (kv_dtype != DType::kF32 && kv_dtype != DType::kBF16) {
    std::fprintf(stderr, "[tern cuda] %s: the KV cache holds fp32 or bf16, not %s\n", op,
                 DTypeName(kv_dtype));
    std::abort();
  }
}

template <typename T>
void LaunchPagedAttention(float* out, const float* qkv, const void* k_cache, const void* v_cache,
                          const int32_t* seqs, const int32_t* block_tables, float* att_global,
                          const PagedGeometry& g, int N, size_t smem, cudaStream_t stream) {
  auto kernel = PagedAttentionKernel<T>;
  if (smem > (48u << 10))
    CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  kernel<<<dim3(N, g.NH), kThreads, smem, stream>>>(out, qkv, static_cast<const T*>(k_cache),
                                                    static_cast<const T*>(v_cache), seqs, block_tables,
                                                    att_global, g);
  CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace cuda

void CudaBackend::KvCacheWrite(void* k_cache, void* v_cache, DType kv_dtype, const float* qkv,
                               const int32_t* slots, int N, int C, int NH, int bs) {
  cuda::CheckGeometry("KvCacheWrite", C, NH, bs);
  cuda::CheckKvDtype("KvCacheWrite", kv_dtype);
  const size_t n = static_cast<size_t>(N) * C;
  if (n == 0) return;
  const unsigned grid = cuda::GridFor(n, 256);
  if (kv_dtype == DType::kBF16) {
    cuda::KvCacheWriteKernel<<<grid, 256, 0, stream_>>>(
        static_cast<uint16_t*>(k_cache), static_cast<uint16_t*>(v_cache), qkv, slots, N, C, NH, bs);
  } else {
    cuda::KvCacheWriteKernel<<<grid, 256, 0, stream_>>>(
        static_cast<float*>(k_cache), static_cast<float*>(v_cache), qkv, slots, N, C, NH, bs);
  }
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::PagedAttentionForward(float* out, const float* qkv, const void* k_cache,
                                        const void* v_cache, DType kv_dtype, const int32_t* seqs,
                                        const int32_t* block_tables, int S, int max_blocks, int N, int C,
                                        int NH, int bs) {
  cuda::CheckGeometry("PagedAttentionForward", C, NH, bs);
  cuda::CheckKvDtype("PagedAttentionForward", kv_dtype);
  if (N <= 0 || S <= 0) return;
  const int hs = C / NH;
  const cuda::PagedGeometry g{C, NH, hs, bs, S, max_blocks, 1.0f / std::sqrt(static_cast<float>(hs))};
  // The scores of the longest context a block table addresses go in shared memory when they fit (the device's
  // opt-in limit: 99-227 KiB, 25k-58k positions); beyond that in scratch, one row of max_ctx per (row, head).
  // The choice depends on max_blocks only, and both give the same bits.
  const size_t max_ctx = static_cast<size_t>(max_blocks) * bs;
  size_t smem = (hs + cuda::kThreads + cuda::kWarps) * sizeof(float);
  float* att_global = nullptr;
  const size_t smem_limit =
      smem_optin_ - 256;  // what the kernel's static shared memory leaves, with room to spare
  if (smem + max_ctx * sizeof(float) <= smem_limit) {
    smem += max_ctx * sizeof(float);
  } else {
    att_global = static_cast<float*>(
        ScratchBuffer(cuda::Scratch::kPagedScores, static_cast<size_t>(N) * NH * max_ctx * sizeof(float)));
  }
  if (smem > smem_limit) {
    std::fprintf(
        stderr,
        "[tern cuda] PagedAttentionForward: head size %d needs more shared memory than this GPU has\n", hs);
    std::abort();
  }
  if (kv_dtype == DType::kBF16) {
    cuda::LaunchPagedAttention<uint16_t>(out, qkv, k_cache, v_cache, seqs, block_tables, att_global, g, N,
                                         smem, stream_);
  } else {
    cuda::LaunchPagedAttention<float>(out, qkv, k_cache, v_cache, seqs, block_tables, att_global, g, N, smem,
                                      stream_);
  }
}

}  // namespace tern
