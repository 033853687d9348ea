// Fused AdamW over one tensor: gradient scale (clipping / loss-scale unscaling), moment updates, bias
// corrections, decoupled weight decay, and the bf16 copy of the updated parameters, in one pass.
// The arithmetic follows the CPU reference step by step (no fast-math), so results agree to rounding.
#include <cmath>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_common.cuh"

namespace tern {
namespace cuda {
namespace {

__global__ void AdamWKernel(float* __restrict__ param, uint16_t* __restrict__ param_bf16,
                            const float* __restrict__ grad, float* __restrict__ m, float* __restrict__ v,
                            size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                            float grad_scale, float bc1, float bc2) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float g = grad[i] * grad_scale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float m_hat = mi / bc1, v_hat = vi / bc2;
    float p = param[i];
    p -= lr * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * p);
    param[i] = p;
    if (param_bf16) param_bf16[i] = ToBF16Bits(p);
  }
}

}  // namespace
}  // namespace cuda

void CudaBackend::AdamW(float* param, uint16_t* param_bf16, const float* grad, float* m, float* v, size_t n,
                        float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                        int t) {
  if (n == 0) return;
  // Bias corrections on the host in float, exactly as the reference computes them.
  const float bc1 = 1.0f - std::pow(beta1, static_cast<float>(t));
  const float bc2 = 1.0f - std::pow(beta2, static_cast<float>(t));
  cuda::AdamWKernel<<<cuda::GridFor(n, 256), 256, 0, stream_>>>(
      param, param_bf16, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, bc1, bc2);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tern
