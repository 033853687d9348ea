// Device helpers shared by the kernel files: warp reductions, launch sizes, bf16 conversions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace tern::cuda {

constexpr int kWarp = 32;

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double WarpSum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ uint16_t ToBF16Bits(float x) {
  __nv_bfloat16 h = __float2bfloat16_rn(x);
  return *reinterpret_cast<uint16_t*>(&h);
}
__device__ __forceinline__ float FromBF16Bits(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}
// An element of fp32 or bf16 (uint16_t) storage as fp32, and fp32 stored into either (bf16: rounded to
// nearest even): the kernels templated on their storage type read and write through these.
__device__ __forceinline__ float Widen(float x) {
  return x;
}
__device__ __forceinline__ float Widen(uint16_t x) {
  return FromBF16Bits(x);
}
__device__ __forceinline__ void StoreRounded(float* p, float x) {
  *p = x;
}
__device__ __forceinline__ void StoreRounded(uint16_t* p, float x) {
  *p = ToBF16Bits(x);
}
// IEEE fp16, round-to-nearest-even; above 65504 -> inf (what the fp16 loss scaler detects).
__device__ __forceinline__ uint16_t ToF16Bits(float x) {
  return __half_as_ushort(__float2half_rn(x));
}
// The 16-bit pattern of x in the half type of a GEMM: fp16 when f16, else bf16.
__device__ __forceinline__ uint16_t ToHalfBits(float x, bool f16) {
  return f16 ? ToF16Bits(x) : ToBF16Bits(x);
}

// Blocks for a grid-stride loop over n elements (the loop covers whatever the grid does not).
inline unsigned GridFor(size_t n, int threads, size_t max_blocks = 1u << 20) {
  size_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::max<size_t>(1, std::min(blocks, max_blocks)));
}

inline int CeilDiv(int a, int b) {
  return (a + b - 1) / b;
}

// Launch-side helpers defined in cast.cu and reduce.cu, shared across kernel files.
void LaunchCastF32ToBF16(uint16_t* dst, const float* src, size_t n, cudaStream_t s);
void LaunchWidenBF16ToF32(float* dst, const uint16_t* src, size_t n, cudaStream_t s);
void LaunchCastF32ToF16(uint16_t* dst, const float* src, size_t n, cudaStream_t s);
void LaunchCastBF16ToF16(uint16_t* dst, const uint16_t* src, size_t n, cudaStream_t s);
// dst[col] += sum over chunks of partials[chunk * cols + col], in chunk order (deterministic).
void LaunchAddColumnPartials(float* dst, const float* partials, int chunks, int cols, cudaStream_t s);
// out[r, :] += bias[:] for a row-major [rows, cols] matrix.
void LaunchAddBiasRows(float* out, const float* bias, int rows, int cols, cudaStream_t s);

// Row chunking for column reductions: chunks of at least 32 rows, at most 256 chunks.
inline int ColumnChunks(int rows) {
  return std::max(1, std::min(256, (rows + 31) / 32));
}

}  // namespace tern::cuda
