// Casts between fp32, bf16 and fp16 (round-to-nearest-even), used by the model's bf16 weight copy and by
// the matmul / attention operand conversions (fp16 for train.precision=fp16).
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_common.cuh"

namespace tern {
namespace cuda {
namespace {

__global__ void CastF32ToBF16Kernel(uint16_t* __restrict__ dst, const float* __restrict__ src, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = ToBF16Bits(src[i]);
}

__global__ void WidenBF16ToF32Kernel(float* __restrict__ dst, const uint16_t* __restrict__ src, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = FromBF16Bits(src[i]);
}

__global__ void CastF32ToF16Kernel(uint16_t* __restrict__ dst, const float* __restrict__ src, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = ToF16Bits(src[i]);
}

// bf16 -> fp32 is exact, so this is the fp32 -> fp16 rounding of the bf16 value.
__global__ void CastBF16ToF16Kernel(uint16_t* __restrict__ dst, const uint16_t* __restrict__ src, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = ToF16Bits(FromBF16Bits(src[i]));
}

}  // namespace

void LaunchCastF32ToF16(uint16_t* dst, const float* src, size_t n, cudaStream_t s) {
  if (n == 0) return;
  CastF32ToF16Kernel<<<GridFor(n, 256), 256, 0, s>>>(dst, src, n);
  CUDA_CHECK_LAUNCH();
}

void LaunchCastBF16ToF16(uint16_t* dst, const uint16_t* src, size_t n, cudaStream_t s) {
  if (n == 0) return;
  CastBF16ToF16Kernel<<<GridFor(n, 256), 256, 0, s>>>(dst, src, n);
  CUDA_CHECK_LAUNCH();
}

void LaunchCastF32ToBF16(uint16_t* dst, const float* src, size_t n, cudaStream_t s) {
  if (n == 0) return;
  CastF32ToBF16Kernel<<<GridFor(n, 256), 256, 0, s>>>(dst, src, n);
  CUDA_CHECK_LAUNCH();
}

void LaunchWidenBF16ToF32(float* dst, const uint16_t* src, size_t n, cudaStream_t s) {
  if (n == 0) return;
  WidenBF16ToF32Kernel<<<GridFor(n, 256), 256, 0, s>>>(dst, src, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace cuda

void CudaBackend::CastF32ToBF16(uint16_t* dst, const float* src, size_t n) {
  cuda::LaunchCastF32ToBF16(dst, src, n, stream_);
}

}  // namespace tern
