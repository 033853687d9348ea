// LayerNorm forward (one warp per row: mean, then variance about the mean, eps 1e-5, as the reference; fused
// with the residual add before it, or not) and
// backward (one warp per row for dinp; a deterministic column reduction for dweight and dbias).
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_common.cuh"

namespace tern {
namespace cuda {
namespace {

constexpr float kEps = 1e-5f;
constexpr int kRowsPerBlock = 8;  // 8 warps of 32 threads

__device__ __forceinline__ void PutLn(float* y, float v) {
  *y = v;
}
__device__ __forceinline__ void PutLn(uint16_t* y, float v) {
  *y = ToBF16Bits(v);
}

// Out: float, or uint16_t (bf16: the fp32 value rounded to nearest even). kAdd: the row is inp + add, written
// to residual first (each lane reads back only what it wrote itself).
template <typename Out, bool kAdd>
__global__ void LayerNormForwardKernel(Out* __restrict__ out, float* __restrict__ mean,
                                       float* __restrict__ rstd, const float* inp, const float* add,
                                       float* residual, const float* __restrict__ weight,
                                       const float* __restrict__ bias, int N, int C) {
  const int lane = threadIdx.x % kWarp;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= N) return;
  const size_t off = static_cast<size_t>(row) * C;
  const float* x = inp + off;
  if (kAdd) {
    for (int i = lane; i < C; i += kWarp) residual[off + i] = x[i] + add[off + i];
    x = residual + off;
  }
  float sum = 0.0f;
  for (int i = lane; i < C; i += kWarp) sum += x[i];
  const float m = WarpSum(sum) / C;
  float var = 0.0f;
  for (int i = lane; i < C; i += kWarp) {
    const float d = x[i] - m;
    var += d * d;
  }
  const float s = 1.0f / sqrtf(WarpSum(var) / C + kEps);
  Out* y = out + off;
  for (int i = lane; i < C; i += kWarp) PutLn(y + i, (s * (x[i] - m)) * weight[i] + bias[i]);
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

__global__ void LayerNormBackwardInputKernel(float* __restrict__ dinp, const float* __restrict__ dout,
                                             const float* __restrict__ inp, const float* __restrict__ weight,
                                             const float* __restrict__ mean, const float* __restrict__ rstd,
                                             int N, int C) {
  const int lane = threadIdx.x % kWarp;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= N) return;
  const size_t off = static_cast<size_t>(row) * C;
  const float* dy = dout + off;
  const float* x = inp + off;
  const float m = mean[row], s = rstd[row];
  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
  for (int i = lane; i < C; i += kWarp) {
    const float norm = (x[i] - m) * s;
    const float dnorm = weight[i] * dy[i];
    dnorm_sum += dnorm;
    dnorm_norm_sum += dnorm * norm;
  }
  const float dnorm_mean = WarpSum(dnorm_sum) / C;
  const float dnorm_norm_mean = WarpSum(dnorm_norm_sum) / C;
  float* dx = dinp + off;
  for (int i = lane; i < C; i += kWarp) {
    const float norm = (x[i] - m) * s;
    const float dnorm = weight[i] * dy[i];
    dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
  }
}

// grid (ceil(C/32), chunks), block (32, 8). partials: [chunks, C] for dweight, then [chunks, C] for dbias.
__global__ void LayerNormParamPartialsKernel(float* __restrict__ partials, const float* __restrict__ dout,
                                             const float* __restrict__ inp, const float* __restrict__ mean,
                                             const float* __restrict__ rstd, int N, int C, int chunks,
                                             int rows_per_chunk) {
  __shared__ float sw[8][33], sb[8][33];
  const int col = blockIdx.x * 32 + threadIdx.x, chunk = blockIdx.y;
  const int r0 = chunk * rows_per_chunk, r1 = min(N, r0 + rows_per_chunk);
  float dw = 0.0f, db = 0.0f;
  if (col < C) {
    for (int r = r0 + threadIdx.y; r < r1; r += 8) {
      const size_t i = static_cast<size_t>(r) * C + col;
      const float norm = (inp[i] - mean[r]) * rstd[r];
      dw += norm * dout[i];
      db += dout[i];
    }
  }
  sw[threadIdx.y][threadIdx.x] = dw;
  sb[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0 && col < C) {
    float w = 0.0f, b = 0.0f;
    for (int j = 0; j < 8; j++) {
      w += sw[j][threadIdx.x];
      b += sb[j][threadIdx.x];
    }
    partials[static_cast<size_t>(chunk) * C + col] = w;
    partials[static_cast<size_t>(chunks + chunk) * C + col] = b;
  }
}

template <typename Out>
void LaunchLayerNormForward(Out* out, float* mean, float* rstd, const float* inp, const float* add,
                            float* residual, const float* weight, const float* bias, int N, int C,
                            cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  const int blocks = CeilDiv(N, kRowsPerBlock), threads = kRowsPerBlock * kWarp;
  if (add) {
    LayerNormForwardKernel<Out, true>
        <<<blocks, threads, 0, stream>>>(out, mean, rstd, inp, add, residual, weight, bias, N, C);
  } else {
    LayerNormForwardKernel<Out, false>
        <<<blocks, threads, 0, stream>>>(out, mean, rstd, inp, nullptr, nullptr, weight, bias, N, C);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace cuda

void CudaBackend::LayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                                   const float* weight, const float* bias, int N, int C) {
  cuda::LaunchLayerNormForward(out, mean, rstd, inp, nullptr, nullptr, weight, bias, N, C, stream_);
}

void CudaBackend::LayerNormForwardBF16(uint16_t* out, float* mean, float* rstd, const float* inp,
                                       const float* weight, const float* bias, int N, int C) {
  cuda::LaunchLayerNormForward(out, mean, rstd, inp, nullptr, nullptr, weight, bias, N, C, stream_);
}

void CudaBackend::ResidualLayerNormForward(float* residual, float* out, float* mean, float* rstd,
                                           const float* a, const float* b, const float* weight,
                                           const float* bias, int N, int C) {
  cuda::LaunchLayerNormForward(out, mean, rstd, a, b, residual, weight, bias, N, C, stream_);
}

void CudaBackend::ResidualLayerNormForwardBF16(float* residual, uint16_t* out, float* mean, float* rstd,
                                               const float* a, const float* b, const float* weight,
                                               const float* bias, int N, int C) {
  cuda::LaunchLayerNormForward(out, mean, rstd, a, b, residual, weight, bias, N, C, stream_);
}

void CudaBackend::LayerNormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                                    const float* inp, const float* weight, const float* mean,
                                    const float* rstd, int N, int C) {
  if (N <= 0 || C <= 0) return;
  const int chunks = cuda::ColumnChunks(N), rows_per_chunk = cuda::CeilDiv(N, chunks);
  auto* partials = static_cast<float*>(
      ScratchBuffer(cuda::Scratch::kPartials, 2 * static_cast<size_t>(chunks) * C * sizeof(float)));
  dim3 grid(cuda::CeilDiv(C, 32), chunks), block(32, 8);
  cuda::LayerNormParamPartialsKernel<<<grid, block, 0, stream_>>>(partials, dout, inp, mean, rstd, N, C,
                                                                  chunks, rows_per_chunk);
  CUDA_CHECK_LAUNCH();
  cuda::LaunchAddColumnPartials(dweight, partials, chunks, C, stream_);
  cuda::LaunchAddColumnPartials(dbias, partials + static_cast<size_t>(chunks) * C, chunks, C, stream_);
  const int blocks = cuda::CeilDiv(N, cuda::kRowsPerBlock);
  cuda::LayerNormBackwardInputKernel<<<blocks, cuda::kRowsPerBlock * cuda::kWarp, 0, stream_>>>(
      dinp, dout, inp, weight, mean, rstd, N, C);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tern
