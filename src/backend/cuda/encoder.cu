// Token + position embedding forward, and a deterministic backward without float atomics; and EmbedTokens,
// the serving engine's embedding of a ragged batch (each row names its own token and position).
//
// Backward: dwpe[t, c] sums over the batch in a fixed order (one thread per (t, c)). For dwte, rows with
// the same token must be summed by one owner: the token ids are brought to the host (B*T ints; the
// encoder backward is the last op of the backward pass, so this wait drains an already finishing queue),
// sorted into buckets there (as llm.c's encoder_backward does), and one thread per (bucket, channel)
// sums its rows in position order and adds once into dwte. Bitwise reproducible run to run.
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_common.cuh"

namespace tern {
namespace cuda {
namespace {

__global__ void EncoderForwardKernel(float* __restrict__ out, const int32_t* __restrict__ inp,
                                     const float* __restrict__ wte, const float* __restrict__ wpe, int B,
                                     int T, int C) {
  const size_t n = static_cast<size_t>(B) * T * C;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const size_t bt = i / C;
    const int c = static_cast<int>(i % C), t = static_cast<int>(bt % T);
    out[i] = wte[static_cast<size_t>(inp[bt]) * C + c] + wpe[static_cast<size_t>(t) * C + c];
  }
}

// out[n, c] = wte[tokens[n], c] + wpe[positions[n], c]: one float add per element, bitwise the reference's.
__global__ void EmbedTokensKernel(float* __restrict__ out, const int32_t* __restrict__ tokens,
                                  const int32_t* __restrict__ positions, const float* __restrict__ wte,
                                  const float* __restrict__ wpe, int N, int C) {
  const size_t n = static_cast<size_t>(N) * C;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const size_t row = i / C;
    const int c = static_cast<int>(i % C);
    out[i] = wte[static_cast<size_t>(tokens[row]) * C + c] + wpe[static_cast<size_t>(positions[row]) * C + c];
  }
}

// The same with a bf16 token table (serving with bf16 weights): widened exactly, then the one float add.
__global__ void EmbedTokensBF16Kernel(float* __restrict__ out, const int32_t* __restrict__ tokens,
                                      const int32_t* __restrict__ positions, const uint16_t* __restrict__ wte,
                                      const float* __restrict__ wpe, int N, int C) {
  const size_t n = static_cast<size_t>(N) * C;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const size_t row = i / C;
    const int c = static_cast<int>(i % C);
    out[i] = FromBF16Bits(wte[static_cast<size_t>(tokens[row]) * C + c]) +
             wpe[static_cast<size_t>(positions[row]) * C + c];
  }
}

__global__ void WpeBackwardKernel(float* __restrict__ dwpe, const float* __restrict__ dout, int B, int T,
                                  int C) {
  const size_t n = static_cast<size_t>(T) * C;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int b = 0; b < B; b++) s += dout[static_cast<size_t>(b) * T * C + i];
    dwpe[i] += s;
  }
}

// grid (buckets, ceil(C / blockDim.x)): bucket k owns token tokens[k] and rows order[starts[k] ..
// starts[k+1]).
__global__ void WteBackwardKernel(float* __restrict__ dwte, const float* __restrict__ dout,
                                  const int32_t* __restrict__ order, const int32_t* __restrict__ starts,
                                  const int32_t* __restrict__ tokens, int C) {
  const int k = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0.0f;
  for (int i = starts[k]; i < starts[k + 1]; i++) s += dout[static_cast<size_t>(order[i]) * C + c];
  dwte[static_cast<size_t>(tokens[k]) * C + c] += s;
}

}  // namespace
}  // namespace cuda

void CudaBackend::EncoderForward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B,
                                 int T, int C) {
  const size_t n = static_cast<size_t>(B) * T * C;
  if (n == 0) return;
  cuda::EncoderForwardKernel<<<cuda::GridFor(n, 256), 256, 0, stream_>>>(out, inp, wte, wpe, B, T, C);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::EmbedTokens(float* out, const int32_t* tokens, const int32_t* positions, const float* wte,
                              const float* wpe, int N, int C) {
  const size_t n = static_cast<size_t>(N) * C;
  if (n == 0) return;
  cuda::EmbedTokensKernel<<<cuda::GridFor(n, 256), 256, 0, stream_>>>(out, tokens, positions, wte, wpe, N, C);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::EmbedTokensBF16(float* out, const int32_t* tokens, const int32_t* positions,
                                  const uint16_t* wte, const float* wpe, int N, int C) {
  const size_t n = static_cast<size_t>(N) * C;
  if (n == 0) return;
  cuda::EmbedTokensBF16Kernel<<<cuda::GridFor(n, 256), 256, 0, stream_>>>(out, tokens, positions, wte, wpe, N,
                                                                          C);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::EncoderBackward(float* dwte, float* dwpe, const float* dout, const int32_t* inp,
                                  const int32_t* host_inp, int B, int T, int C) {
  const int N = B * T;
  if (N <= 0 || C <= 0) return;
  const size_t tc = static_cast<size_t>(T) * C;
  cuda::WpeBackwardKernel<<<cuda::GridFor(tc, 256), 256, 0, stream_>>>(dwpe, dout, B, T, C);
  CUDA_CHECK_LAUNCH();

  // Pinned layout: [order N][starts N+1][tokens N], then the downloaded ids N (without host_inp). The
  // previous call's uploads from it have run before the host writes (PinnedForWrite).
  auto* pinned = static_cast<int32_t*>(
      PinnedForWrite(cuda::PinnedSlot::kEncoder, sizeof(int32_t) * (4 * static_cast<size_t>(N) + 1)));
  int32_t* order = pinned;
  int32_t* starts = order + N;
  int32_t* tokens = starts + N + 1;
  const int32_t* ids = host_inp;
  if (!ids) {
    int32_t* downloaded = tokens + N;
    CUDA_CHECK(cudaMemcpyAsync(downloaded, inp, sizeof(int32_t) * N, cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    ids = downloaded;
  }
  // Sort (token, position) keys: buckets by token, rows in position order inside each.
  std::vector<uint64_t> keys(N);
  for (int i = 0; i < N; i++)
    keys[i] = (static_cast<uint64_t>(static_cast<uint32_t>(ids[i])) << 32) | static_cast<uint32_t>(i);
  std::sort(keys.begin(), keys.end());
  int buckets = 0;
  for (int i = 0; i < N; i++) {
    const int32_t tok = static_cast<int32_t>(keys[i] >> 32);
    if (i == 0 || tok != static_cast<int32_t>(keys[i - 1] >> 32)) {
      starts[buckets] = i;
      tokens[buckets] = tok;
      buckets++;
    }
    order[i] = static_cast<int32_t>(keys[i] & 0xffffffffu);
  }
  starts[buckets] = N;
  // Device copy: [order N][starts buckets+1][tokens buckets]; the next call waits for these uploads before it
  // writes the pinned buffer again (PinnedQueued).
  auto* dev = static_cast<int32_t*>(
      ScratchBuffer(cuda::Scratch::kEncoder, sizeof(int32_t) * (3 * static_cast<size_t>(N) + 1)));
  CUDA_CHECK(cudaMemcpyAsync(dev, order, sizeof(int32_t) * N, cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(
      cudaMemcpyAsync(dev + N, starts, sizeof(int32_t) * (buckets + 1), cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(
      cudaMemcpyAsync(dev + 2 * N + 1, tokens, sizeof(int32_t) * buckets, cudaMemcpyHostToDevice, stream_));
  PinnedQueued(cuda::PinnedSlot::kEncoder);
  const int threads = std::min(256, cuda::CeilDiv(C, 32) * 32);
  dim3 grid(buckets, cuda::CeilDiv(C, threads));
  cuda::WteBackwardKernel<<<grid, threads, 0, stream_>>>(dwte, dout, dev, dev + N, dev + 2 * N + 1, C);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tern
