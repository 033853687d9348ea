// GELU (tanh approximation, as GPT-2 and the CPU reference) forward and backward.
#include <cmath>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_common.cuh"

namespace tern {
namespace cuda {
namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)

__device__ __forceinline__ float Gelu(float x) {
  const float cube = 0.044715f * x * x * x;
  return 0.5f * x * (1.0f + tanhf(kGeluScale * (x + cube)));
}

__global__ void GeluForwardKernel(float* __restrict__ out, const float* __restrict__ inp, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = Gelu(inp[i]);
}

// GeluForward rounded to bf16 as CastF32ToBF16Kernel rounds (nearest even).
__global__ void GeluForwardBF16Kernel(uint16_t* __restrict__ out, const float* __restrict__ inp, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = ToBF16Bits(Gelu(inp[i]));
}

// dinp may be dout (MatmulDGelu's unfused path runs it in place): neither is __restrict__.
__global__ void GeluBackwardKernel(float* dinp, const float* __restrict__ inp, const float* dout, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float x = inp[i];
    const float cube = 0.044715f * x * x * x;
    const float tanh_arg = kGeluScale * (x + cube);
    const float tanh_out = tanhf(tanh_arg);
    const float cosh_out = coshf(tanh_arg);
    const float sech_out = 1.0f / (cosh_out * cosh_out);
    const float local_grad =
        0.5f * (1.0f + tanh_out) + x * 0.5f * sech_out * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = local_grad * dout[i];
  }
}

}  // namespace
}  // namespace cuda

void CudaBackend::GeluForward(float* out, const float* inp, size_t n) {
  if (n == 0) return;
  cuda::GeluForwardKernel<<<cuda::GridFor(n, 256), 256, 0, stream_>>>(out, inp, n);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::GeluForwardBF16(uint16_t* out, const float* inp, size_t n) {
  if (n == 0) return;
  cuda::GeluForwardBF16Kernel<<<cuda::GridFor(n, 256), 256, 0, stream_>>>(out, inp, n);
  CUDA_CHECK_LAUNCH();
}

void CudaBackend::GeluBackward(float* dinp, const float* inp, const float* dout, size_t n) {
  if (n == 0) return;
  cuda::GeluBackwardKernel<<<cuda::GridFor(n, 256), 256, 0, stream_>>>(dinp, inp, dout, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tern
