// Deterministic reductions: Sum / SumSquares to the host (two passes: fixed block partials in double, then
// one block in a fixed order), and column sums for bias gradients (row-chunk partials, then an in-order
// sum over chunks). No floating-point atomics anywhere, so results are bitwise reproducible.
#include <algorithm>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_common.cuh"

namespace tern {
namespace cuda {
namespace {

constexpr int kReduceThreads = 256;
constexpr int kMaxReduceBlocks = 1024;  // fixed by n only: the same n reduces the same way on any GPU

// Block-wide sum of one double per thread; the result is valid in thread 0.
__device__ double BlockSum(double v) {
  __shared__ double warp_sums[32];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, nwarps = (blockDim.x + kWarp - 1) / kWarp;
  v = WarpSum(v);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  v = 0.0;
  if (warp == 0) {
    v = lane < nwarps ? warp_sums[lane] : 0.0;
    v = WarpSum(v);
  }
  return v;
}

__global__ void BlockPartialsKernel(double* __restrict__ partials, const float* __restrict__ x, size_t n,
                                    bool squares) {
  double acc = 0.0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const double v = x[i];
    acc += squares ? v * v : v;
  }
  acc = BlockSum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void FinalSumKernel(double* __restrict__ out, const double* __restrict__ partials, int count) {
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  acc = BlockSum(acc);
  if (threadIdx.x == 0) *out = acc;
}

// acc += float(sum / divisor), as the host adds a micro-batch's mean loss (sum null: 0).
__global__ void AddMeanKernel(double* acc, const double* sum, double divisor) {
  *acc += static_cast<double>(static_cast<float>((sum ? *sum : 0.0) / divisor));
}

// grid (ceil(cols/32), chunks), block (32, 8): partials[chunk, col] = sum of x[rows of chunk, col].
__global__ void ColumnPartialsKernel(float* __restrict__ partials, const float* __restrict__ x, int rows,
                                     int cols, int rows_per_chunk) {
  __shared__ float sh[8][33];
  const int col = blockIdx.x * 32 + threadIdx.x, chunk = blockIdx.y;
  const int r0 = chunk * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
  float acc = 0.0f;
  if (col < cols)
    for (int r = r0 + threadIdx.y; r < r1; r += 8) acc += x[static_cast<size_t>(r) * cols + col];
  sh[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float s = 0.0f;
    for (int j = 0; j < 8; j++) s += sh[j][threadIdx.x];
    partials[static_cast<size_t>(chunk) * cols + col] = s;
  }
}

__global__ void AddColumnPartialsKernel(float* __restrict__ dst, const float* __restrict__ partials,
                                        int chunks, int cols) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= cols) return;
  float s = 0.0f;
  for (int c = 0; c < chunks; c++) s += partials[static_cast<size_t>(c) * cols + col];
  dst[col] += s;
}

}  // namespace

void LaunchAddColumnPartials(float* dst, const float* partials, int chunks, int cols, cudaStream_t s) {
  AddColumnPartialsKernel<<<CeilDiv(cols, 256), 256, 0, s>>>(dst, partials, chunks, cols);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda

double* CudaBackend::ReduceOnDevice(const float* x, size_t n, bool squares) {
  const int blocks = static_cast<int>(cuda::GridFor(n, cuda::kReduceThreads, cuda::kMaxReduceBlocks));
  auto* partials = static_cast<double*>(
      ScratchBuffer(cuda::Scratch::kReduce, (cuda::kMaxReduceBlocks + 1) * sizeof(double)));
  cuda::BlockPartialsKernel<<<blocks, cuda::kReduceThreads, 0, stream_>>>(partials + 1, x, n, squares);
  CUDA_CHECK_LAUNCH();
  cuda::FinalSumKernel<<<1, 1024, 0, stream_>>>(partials, partials + 1, blocks);
  CUDA_CHECK_LAUNCH();
  return partials;
}

void CudaBackend::AccumulateMean(double* acc, const float* x, size_t n, double divisor) {
  if (n == 0) {
    // Sum is 0: the host arithmetic adds float(0 / divisor).
    cuda::AddMeanKernel<<<1, 1, 0, stream_>>>(acc, nullptr, divisor);
  } else {
    cuda::AddMeanKernel<<<1, 1, 0, stream_>>>(acc, ReduceOnDevice(x, n, false), divisor);
  }
  CUDA_CHECK_LAUNCH();
}

double CudaBackend::ReduceToHost(const float* x, size_t n, bool squares) {
  if (n == 0) return 0.0;
  double* partials = ReduceOnDevice(x, n, squares);
  auto* host = static_cast<double*>(PinnedForWrite(cuda::PinnedSlot::kReduce, sizeof(double)));
  CUDA_CHECK(cudaMemcpyAsync(host, partials, sizeof(double), cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return *host;
}

double CudaBackend::SumSquares(const float* x, size_t n) {
  return ReduceToHost(x, n, true);
}

double CudaBackend::Sum(const float* x, size_t n) {
  return ReduceToHost(x, n, false);
}

void CudaBackend::BiasBackward(float* dbias, const float* dout, int N, int OC) {
  if (N <= 0 || OC <= 0) return;
  const int chunks = cuda::ColumnChunks(N), rows_per_chunk = cuda::CeilDiv(N, chunks);
  auto* partials = static_cast<float*>(
      ScratchBuffer(cuda::Scratch::kPartials, static_cast<size_t>(chunks) * OC * sizeof(float)));
  dim3 grid(cuda::CeilDiv(OC, 32), chunks), block(32, 8);
  cuda::ColumnPartialsKernel<<<grid, block, 0, stream_>>>(partials, dout, N, OC, rows_per_chunk);
  CUDA_CHECK_LAUNCH();
  cuda::LaunchAddColumnPartials(dbias, partials, chunks, OC, stream_);
}

}  // namespace tern
