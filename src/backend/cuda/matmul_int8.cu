// MatmulInt8 (backend.h, "inference ops"): out[N,OC] = inp[N,K] * W[OC,K]^T + bias with int8 weights (the
// packed layout infer/quantize.h writes) and int8 activations quantised per row. The oracle is
// cpu/reference_inference_ops.cpp.
//
// Two kernels:
//   1. QuantizeRowsKernel, one block per row: m = max_k |x[k]| (a max is exact in any order), then
//      a[k] = __float2int_rn(x[k] * (127 / m)) (round half to even, as nearbyint; IEEE division and a plain
//      multiply, as the reference) into int8 scratch [N, K], and the row's scale m / 127.
//   2. Int8MatmulKernel, a 16 x 16 thread block: threadIdx.x = output o within one packed group of 16
//   outputs,
//      threadIdx.y = row. The packed layout keeps w(o, 4g .. 4g+3) in the 4 bytes of one int32 (byte k % 4 at
//      address k % 4: little-endian, the byte order __dp4a multiplies), int32 ((o / 16) * (K / 4) + g) * 16 +
//      o % 16, so the 16 threads of a warp half read 64 contiguous bytes per k-group. The activations are
//      row-major: their k-group g is int32 g of the row. One __dp4a per k-group into an int32 accumulator:
//      the sum is exact (no overflow for K < 133,000), so it does not depend on the order, the other rows or
//      N. The float scaling is the reference's, operation for operation: out = float(acc) * (row_scale *
//      w_scale[o])
//      (+ bias[o]), each step rounded on its own (__fmul_rn, __fadd_rn: no fused multiply-add). The host
//      compiler may fuse the reference's last multiply and add (GCC's default -ffp-contract=fast in gnu++
//      mode), so the outputs agree with it to an ulp of the sum or so, not necessarily bit for bit.
//
// Faster, not done (a straightforward correct kernel first): int8 tensor cores (mma.sync m16n8k32 s8 -> s32,
// or cuBLASLt's int8 GEMM) for prefill-sized N; tiles of weights and activations staged in shared memory
// (cp.async) with several outputs per thread; for decode (N of a few rows) a split over K across blocks with
// the int32 partials added in a fixed order (exact either way) so that small OC fills every SM; fusing the
// quantisation into the producer of inp (layernorm, GELU).
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_common.cuh"

namespace tern {
namespace cuda {
namespace {

constexpr int kQuantThreads = 256;
constexpr int kGroup = 16;  // outputs per packed group (backend.h)
constexpr int kRowsPerBlock = 16;

// grid N, kQuantThreads threads: a[n, :] and row_scale[n] from inp[n, :].
__global__ void __launch_bounds__(kQuantThreads)
    QuantizeRowsKernel(int8_t* __restrict__ a, float* __restrict__ row_scale, const float* __restrict__ inp,
                       int K) {
  __shared__ float red[kQuantThreads / kWarp];
  const int n = blockIdx.x, tid = threadIdx.x;
  const float* x = inp + static_cast<size_t>(n) * K;
  float m = 0.0f;
  for (int k = tid; k < K; k += kQuantThreads) m = fmaxf(m, fabsf(x[k]));
  m = WarpMax(m);
  if (tid % kWarp == 0) red[tid / kWarp] = m;
  __syncthreads();
  m = red[0];
  for (int w = 1; w < kQuantThreads / kWarp; w++) m = fmaxf(m, red[w]);
  const float inv = m > 0.0f ? 127.0f / m : 0.0f;
  int8_t* q = a + static_cast<size_t>(n) * K;
  for (int k = tid; k < K; k += kQuantThreads)
    q[k] = static_cast<int8_t>(__float2int_rn(__fmul_rn(x[k], inv)));
  if (tid == 0) row_scale[n] = m / 127.0f;
}

// grid (OC padded / 16, ceil(N / 16)), block (16, 16). a4[N, K/4] and w4 (packed, K/4 int32 per output of a
// group, interleaved by 16) hold 4 int8 values per int32.
__global__ void __launch_bounds__(kGroup* kRowsPerBlock)
    Int8MatmulKernel(float* __restrict__ out, const int32_t* __restrict__ a4,
                     const float* __restrict__ row_scale, const int32_t* __restrict__ w4,
                     const float* __restrict__ w_scale, const float* __restrict__ bias, int N, int OC,
                     int K4) {
  const int o = blockIdx.x * kGroup + threadIdx.x, n = blockIdx.y * kRowsPerBlock + threadIdx.y;
  if (n >= N || o >= OC) return;  // no barriers below: threads may leave early
  const int32_t* w = w4 + static_cast<size_t>(blockIdx.x) * K4 * kGroup + threadIdx.x;
  const int32_t* x = a4 + static_cast<size_t>(n) * K4;
  int32_t acc = 0;
  for (int g = 0; g < K4; g++) acc = __dp4a(x[g], w[static_cast<size_t>(g) * kGroup], acc);
  const float y = __fmul_rn(__int2float_rn(acc), __fmul_rn(row_scale[n], w_scale[o]));
  out[static_cast<size_t>(n) * OC + o] = bias ? __fadd_rn(y, bias[o]) : y;
}

}  // namespace
}  // namespace cuda

void CudaBackend::MatmulInt8(float* out, const float* inp, const int8_t* w, const float* w_scale,
                             const float* bias, int N, int OC, int K) {
  if (K % 4 != 0 || reinterpret_cast<uintptr_t>(w) % 4 != 0) {
    std::fprintf(
        stderr,
        "[tern cuda] MatmulInt8: K (%d) must be a multiple of 4 and the packed weights 4-byte aligned\n", K);
    std::abort();
  }
  if (N <= 0 || OC <= 0) return;
  // Scratch: the row scales [N] floats, then the int8 activations [N, K] (16-byte aligned).
  const size_t scales_bytes = (static_cast<size_t>(N) * sizeof(float) + 15) / 16 * 16;
  char* scratch =
      static_cast<char*>(ScratchBuffer(cuda::Scratch::kInt8Act, scales_bytes + static_cast<size_t>(N) * K));
  auto* row_scale = reinterpret_cast<float*>(scratch);
  auto* a = reinterpret_cast<int8_t*>(scratch + scales_bytes);
  cuda::QuantizeRowsKernel<<<N, cuda::kQuantThreads, 0, stream_>>>(a, row_scale, inp, K);
  CUDA_CHECK_LAUNCH();
  const dim3 grid(cuda::CeilDiv(OC, cuda::kGroup), cuda::CeilDiv(N, cuda::kRowsPerBlock));
  const dim3 block(cuda::kGroup, cuda::kRowsPerBlock);
  cuda::Int8MatmulKernel<<<grid, block, 0, stream_>>>(out, reinterpret_cast<const int32_t*>(a), row_scale,
                                                      reinterpret_cast<const int32_t*>(w), w_scale, bias, N,
                                                      OC, K / 4);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tern
