// Fused softmax + cross-entropy over the vocabulary: one block per row, an online (max, sum of exp) per
// thread combined in a fixed order, then the loss and, if dloss != 0, the gradient written over the logits.
// Reads the row twice and writes it once; no [N, V] probabilities buffer. Logits in fp32 or bf16.
#include <cfloat>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_common.cuh"

namespace tern {
namespace cuda {
namespace {

constexpr int kThreads = 512;

__device__ __forceinline__ void Combine(float& m, float& s, float m2, float s2) {
  const float nm = fmaxf(m, m2);
  s = s * expf(m - nm) + s2 * expf(m2 - nm);
  m = nm;
}

// T: float, or uint16_t for bf16 logits (read widened, the gradient rounded to nearest even).
template <typename T>
__global__ void CrossEntropyKernel(float* __restrict__ losses, T* __restrict__ logits,
                                   const int32_t* __restrict__ targets, int V, float dloss) {
  __shared__ float sh_m[kThreads / kWarp], sh_s[kThreads / kWarp];
  __shared__ float sh_lse;
  T* x = logits + static_cast<size_t>(blockIdx.x) * V;
  float m = -FLT_MAX, s = 0.0f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    const float v = Widen(x[i]);
    if (v > m) {
      s = s * expf(m - v) + 1.0f;
      m = v;
    } else {
      s += expf(v - m);
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    Combine(m, s, m2, s2);
  }
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) {
    sh_m[warp] = m;
    sh_s[warp] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float bm = sh_m[0], bs = sh_s[0];
    for (int w = 1; w < kThreads / kWarp; w++) Combine(bm, bs, sh_m[w], sh_s[w]);
    sh_lse = bm + logf(bs);
  }
  __syncthreads();
  const float lse = sh_lse;
  const int target = targets[blockIdx.x];
  if (threadIdx.x == 0) losses[blockIdx.x] = target < 0 ? 0.0f : lse - Widen(x[target]);
  if (dloss == 0.0f) return;
  __syncthreads();  // x[target] is read before any thread overwrites the row
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    const float p = expf(Widen(x[i]) - lse);
    StoreRounded(x + i, target < 0 ? 0.0f : (p - (i == target ? 1.0f : 0.0f)) * dloss);
  }
}

}  // namespace
}  // namespace cuda

void CudaBackend::CrossEntropyForwardBackward(float* losses, float* logits, const int32_t* targets, int N,
                                              int V, float dloss) {
  if (N <= 0) return;
  cuda::CrossEntropyKernel<<<N, cuda::kThreads, 0, stream_>>>(losses, logits, targets, V, dloss);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::CrossEntropyForwardBackwardBF16(float* losses, uint16_t* logits, const int32_t* targets,
                                                  int N, int V, float dloss) {
  if (N <= 0) return;
  cuda::CrossEntropyKernel<<<N, cuda::kThreads, 0, stream_>>>(losses, logits, targets, V, dloss);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tern
