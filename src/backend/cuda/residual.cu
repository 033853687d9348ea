// Elementwise sums: the residual connection (Add) and the row-broadcast bias add used when a matmul
// cannot take the bias as a cuBLASLt epilogue.
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_common.cuh"

namespace tern {
namespace cuda {
namespace {

__global__ void AddKernel(float* out, const float* a, const float* b, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = a[i] + b[i];
}

__global__ void AddBiasRowsKernel(float* __restrict__ out, const float* __restrict__ bias, size_t rows,
                                  int cols) {
  const size_t n = rows * cols;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] += bias[i % cols];
}

}  // namespace

void LaunchAddBiasRows(float* out, const float* bias, int rows, int cols, cudaStream_t s) {
  const size_t n = static_cast<size_t>(rows) * cols;
  if (n == 0) return;
  AddBiasRowsKernel<<<GridFor(n, 256), 256, 0, s>>>(out, bias, rows, cols);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda

void CudaBackend::Add(float* out, const float* a, const float* b, size_t n) {
  if (n == 0) return;
  cuda::AddKernel<<<cuda::GridFor(n, 256), 256, 0, stream_>>>(out, a, b, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tern
