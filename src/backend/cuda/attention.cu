// Causal self-attention as llm.c's pre-cuDNN trainer does it: Q.K^T and att.V as strided-batched cuBLAS
// GEMMs, with a causal softmax kernel in between; the backward mirrors it (four GEMMs and a softmax
// backward kernel). The probabilities att[B, NH, T, T] are saved in fp32 as the interface asks.
//
// No permute: for one batch row b, head h's q/k/v are [T, hs] matrices with row stride 3C starting at
// column h*hs, so the heads of one batch row are a strided batch (stride hs). We loop over b.
//
// Precision: with bf16 (fp16) compute (the caller's compute argument, see cuda_backend.h) q, k, v,
// dout and the probabilities are rounded to bf16 (fp16) for the GEMMs (fp32 accumulate); with fp32 compute
// every GEMM is true fp32. The softmax and its backward are fp32 either way. In fp16, dout carries the loss
// scale, so an overflow shows up as inf in the gradients, which the loss scaler then skips.
//
// SetAttentionKernel("flash") routes both ops to attention_flash.cu instead (no att[B,NH,T,T]: the state is
// the logsumexp of each row, AttentionStateBytes(kFlash, ...)); SetAttentionKernel("cudnn") to cuDNN's fused
// attention (attention_cudnn.cu), with the flash kernels for the calls cuDNN does not take.
//
// bf16 q, k, v (AttentionForwardBF16 / AttentionBackwardBF16, the model's layout under bf16 compute) go to
// the GEMMs and the flash kernels as they are, without a widened copy: at bf16 compute the fp32 interface
// rounds them to these very bits first, so both entry points compute the same thing. Only when attention's
// compute is not bf16 (TERN_CUDA_ATTENTION=fp32) are they widened into scratch first.
#include <cmath>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_common.cuh"

namespace tern {
namespace cuda {
namespace {

constexpr int kRowsPerBlock = 8;

// rows = NH * T rows of one batch row; row r is query t = r % T. In place: scores -> probabilities.
__global__ void CausalSoftmaxKernel(float* __restrict__ att, uint16_t* __restrict__ p16, int rows, int T,
                                    bool f16) {
  const int lane = threadIdx.x % kWarp;
  const int r = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  if (r >= rows) return;
  const int t = r % T;
  float* x = att + static_cast<size_t>(r) * T;
  float m = -INFINITY;
  for (int j = lane; j <= t; j += kWarp) m = fmaxf(m, x[j]);
  m = WarpMax(m);
  float s = 0.0f;
  for (int j = lane; j <= t; j += kWarp) s += expf(x[j] - m);
  const float inv = 1.0f / WarpSum(s);
  for (int j = lane; j < T; j += kWarp) {
    const float p = j <= t ? expf(x[j] - m) * inv : 0.0f;
    x[j] = p;
    if (p16) p16[static_cast<size_t>(r) * T + j] = ToHalfBits(p, f16);
  }
}

// In place: datt -> dpreatt * scale = att * (datt - sum(att * datt)) * scale on the causal part, 0 above.
// With 16-bit GEMMs also writes the 16-bit probabilities (p16) and the 16-bit result (dp16).
__global__ void CausalSoftmaxBackwardKernel(float* __restrict__ datt, const float* __restrict__ att,
                                            uint16_t* __restrict__ p16, uint16_t* __restrict__ dp16, int rows,
                                            int T, float scale, bool f16) {
  const int lane = threadIdx.x % kWarp;
  const int r = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  if (r >= rows) return;
  const int t = r % T;
  const size_t off = static_cast<size_t>(r) * T;
  float dot = 0.0f;
  for (int j = lane; j <= t; j += kWarp) dot += att[off + j] * datt[off + j];
  dot = WarpSum(dot);
  for (int j = lane; j < T; j += kWarp) {
    const float a = att[off + j];
    const float d = j <= t ? a * (datt[off + j] - dot) * scale : 0.0f;
    datt[off + j] = d;
    if (dp16) {
      dp16[off + j] = ToHalfBits(d, f16);
      p16[off + j] = ToHalfBits(a, f16);
    }
  }
}

}  // namespace
}  // namespace cuda

void CudaBackend::CastToHalf(uint16_t* dst, const float* src, size_t n, bool f16) {
  if (f16) {
    cuda::LaunchCastF32ToF16(dst, src, n, stream_);
  } else {
    cuda::LaunchCastF32ToBF16(dst, src, n, stream_);
  }
}

void CudaBackend::AttentionForward(float* out, void* state, const float* qkv, int B, int T, int C, int NH,
                                   Compute requested) {
  AttentionForwardAny(out, false, state, qkv, false, B, T, C, NH, requested);
}

void CudaBackend::AttentionForwardAny(void* out, bool out_bf16, void* state, const void* qkv, bool qkv_bf16,
                                      int B, int T, int C, int NH, Compute requested) {
  if (B <= 0 || T <= 0) return;
  if (cudnn_attention_ && CudnnAttentionForward(out, out_bf16, state, qkv, qkv_bf16, B, T, C, NH, requested))
    return;
  if (flash_attention_ || cudnn_attention_) {  // cuDNN's state starts with the flash kernels' (lse)
    FlashAttentionForward(out, out_bf16, static_cast<float*>(state), qkv, qkv_bf16, B, T, C, NH, requested);
    return;
  }
  float* att = static_cast<float*>(state);
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const Compute compute = attention_compute(requested);
  const bool half = compute != Compute::kF32, f16 = compute == Compute::kF16;  // half: 16-bit GEMMs
  const cudaDataType_t type = cuda::GemmType(compute);
  const size_t esize = half ? 2 : 4, tt = static_cast<size_t>(T) * T, rows = static_cast<size_t>(NH) * T;
  const char* base =
      static_cast<const char*>(GemmQkv(qkv, qkv_bf16, static_cast<size_t>(B) * T * C3, compute));
  uint16_t* p16 = nullptr;
  if (half) p16 = static_cast<uint16_t*>(ScratchBuffer(cuda::Scratch::kAttnP, NH * tt * sizeof(uint16_t)));
  // A bf16 output is the fp32 GEMM result rounded once at the end (what the fp32 interface then a cast
  // gives).
  const size_t nout = static_cast<size_t>(B) * T * C;
  float* y = out_bf16 ? static_cast<float*>(ScratchBuffer(cuda::Scratch::kAttnOut, nout * sizeof(float)))
                      : static_cast<float*>(out);
  const unsigned blocks = static_cast<unsigned>((rows + cuda::kRowsPerBlock - 1) / cuda::kRowsPerBlock);
  for (int b = 0; b < B; b++) {
    const char* qb = base + static_cast<size_t>(b) * T * C3 * esize;
    const void *q = qb, *k = qb + C * esize, *v = qb + 2 * C * esize;
    float* att_b = att + static_cast<size_t>(b) * NH * tt;
    // scores[h][t][t2] = scale * q_t . k_t2   (column-major: [t2, t] = K^T-as-stored^T * Q)
    GemmStridedBatched(true, false, T, T, hs, scale, k, C3, hs, q, C3, hs, 0.0f, att_b, T, tt, NH, type);
    cuda::CausalSoftmaxKernel<<<blocks, cuda::kRowsPerBlock * cuda::kWarp, 0, stream_>>>(
        att_b, p16, static_cast<int>(rows), T, f16);
    CUDA_CHECK_LAUNCH();
    // out[t, h*hs + d] = sum_t2 att[h][t][t2] v[t2, h*hs + d]
    const void* p = half ? static_cast<const void*>(p16) : static_cast<const void*>(att_b);
    GemmStridedBatched(false, false, hs, T, T, 1.0f, v, C3, hs, p, T, tt, 0.0f,
                       y + static_cast<size_t>(b) * T * C, C, hs, NH, type);
  }
  if (out_bf16) cuda::LaunchCastF32ToBF16(static_cast<uint16_t*>(out), y, nout, stream_);
}

void CudaBackend::AttentionBackward(float* dqkv, void* scratch, const float* dout, const float* qkv,
                                    const float* out, const void* state, int B, int T, int C, int NH,
                                    Compute requested) {
  AttentionBackwardAny(dqkv, scratch, dout, qkv, out, false, state, B, T, C, NH, requested);
}

void CudaBackend::AttentionBackwardAny(float* dqkv, void* scratch, const float* dout, const void* qkv,
                                       const void* out, bool bf16, const void* state, int B, int T, int C,
                                       int NH, Compute requested) {
  if (B <= 0 || T <= 0) return;
  if (cudnn_attention_ &&
      CudnnAttentionBackward(dqkv, scratch, dout, qkv, out, bf16, state, B, T, C, NH, requested))
    return;
  if (flash_attention_ || cudnn_attention_) {
    FlashAttentionBackward(dqkv, dout, qkv, bf16, static_cast<const float*>(state), B, T, C, NH, requested);
    return;
  }
  const float* att = static_cast<const float*>(state);
  float* datt = static_cast<float*>(scratch);
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const Compute compute = attention_compute(requested);
  const bool half = compute != Compute::kF32, f16 = compute == Compute::kF16;
  const cudaDataType_t type = cuda::GemmType(compute);
  const size_t esize = half ? 2 : 4, tt = static_cast<size_t>(T) * T, rows = static_cast<size_t>(NH) * T;
  const char* base = static_cast<const char*>(GemmQkv(qkv, bf16, static_cast<size_t>(B) * T * C3, compute));
  const char* dbase = reinterpret_cast<const char*>(dout);
  uint16_t *p16 = nullptr, *dp16 = nullptr;
  if (half) {
    const size_t nd = static_cast<size_t>(B) * T * C;
    auto* d16 = static_cast<uint16_t*>(ScratchBuffer(cuda::Scratch::kAttnDout, nd * sizeof(uint16_t)));
    CastToHalf(d16, dout, nd, f16);
    dbase = reinterpret_cast<const char*>(d16);
    p16 = static_cast<uint16_t*>(ScratchBuffer(cuda::Scratch::kAttnP, NH * tt * sizeof(uint16_t)));
    dp16 = static_cast<uint16_t*>(ScratchBuffer(cuda::Scratch::kAttnDp, NH * tt * sizeof(uint16_t)));
  }
  const unsigned blocks = static_cast<unsigned>((rows + cuda::kRowsPerBlock - 1) / cuda::kRowsPerBlock);
  for (int b = 0; b < B; b++) {
    const char* qb = base + static_cast<size_t>(b) * T * C3 * esize;
    const void *q = qb, *k = qb + C * esize, *v = qb + 2 * C * esize;
    const void* dy = dbase + static_cast<size_t>(b) * T * C * esize;
    const float* att_b = att + static_cast<size_t>(b) * NH * tt;
    float* datt_b = datt + static_cast<size_t>(b) * NH * tt;
    float* dq = dqkv + static_cast<size_t>(b) * T * C3;
    float *dk = dq + C, *dv = dq + 2 * C;
    // datt[h][t][t2] = dy_t . v_t2
    GemmStridedBatched(true, false, T, T, hs, 1.0f, v, C3, hs, dy, C, hs, 0.0f, datt_b, T, tt, NH, type);
    cuda::CausalSoftmaxBackwardKernel<<<blocks, cuda::kRowsPerBlock * cuda::kWarp, 0, stream_>>>(
        datt_b, att_b, p16, dp16, static_cast<int>(rows), T, scale, f16);
    CUDA_CHECK_LAUNCH();
    const void* p = half ? static_cast<const void*>(p16) : static_cast<const void*>(att_b);
    const void* dp = half ? static_cast<const void*>(dp16) : static_cast<const void*>(datt_b);
    // dv[t2, :] = sum_t att[t][t2] dy[t, :]
    GemmStridedBatched(false, true, hs, T, T, 1.0f, dy, C, hs, p, T, tt, 0.0f, dv, C3, hs, NH, type);
    // dq[t, :] = sum_t2 dpre[t][t2] k[t2, :]
    GemmStridedBatched(false, false, hs, T, T, 1.0f, k, C3, hs, dp, T, tt, 0.0f, dq, C3, hs, NH, type);
    // dk[t2, :] = sum_t dpre[t][t2] q[t, :]
    GemmStridedBatched(false, true, hs, T, T, 1.0f, q, C3, hs, dp, T, tt, 0.0f, dk, C3, hs, NH, type);
  }
}

void CudaBackend::AttentionForwardBF16(uint16_t* out, void* state, const uint16_t* qkv, int B, int T, int C,
                                       int NH, Compute compute) {
  AttentionForwardAny(out, true, state, qkv, true, B, T, C, NH, compute);
}

void CudaBackend::AttentionBackwardBF16(float* dqkv, void* scratch, const float* dout, const uint16_t* qkv,
                                        const uint16_t* out, const void* state, int B, int T, int C, int NH,
                                        Compute compute) {
  AttentionBackwardAny(dqkv, scratch, dout, qkv, out, true, state, B, T, C, NH, compute);
}

const void* CudaBackend::GemmQkv(const void* qkv, bool qkv_bf16, size_t n, Compute compute) {
  if (qkv_bf16 && compute == Compute::kBF16) return qkv;  // the caller's bf16 q, k, v as they are
  if (qkv_bf16) {  // attention computing in fp32 (or fp16): widened first
    auto* wide = static_cast<float*>(ScratchBuffer(cuda::Scratch::kAttnWide, n * sizeof(float)));
    cuda::LaunchWidenBF16ToF32(wide, static_cast<const uint16_t*>(qkv), n, stream_);
    qkv = wide;
  }
  if (compute == Compute::kF32) return qkv;
  auto* q16 = static_cast<uint16_t*>(ScratchBuffer(cuda::Scratch::kAttnQkv, n * sizeof(uint16_t)));
  CastToHalf(q16, static_cast<const float*>(qkv), n, compute == Compute::kF16);
  return q16;
}

}  // namespace tern
