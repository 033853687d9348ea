// Fused causal attention, flash-attention style (cuda.attention=flash): online softmax over key tiles held
// in shared memory, so no [T, T] matrix is ever written. The forward keeps one float per query row, the
// logsumexp of its scores (lse = m + log l), in the first B*NH*T floats of the attention state
// (AttentionStateBytes); the backward recomputes the probabilities from it (p = exp(s - lse)).
//
// Layout: one warp per query row (forward, dQ) or key row (dK, dV), 8 rows per block sharing 32-row tiles of
// the other side in shared memory; in a tile, lane l owns row l of the tile for the dot products, and head
// dimension d = lane + 32 i for the accumulators (hs <= 128). Precision: q, k, v and dout are rounded to
// bf16 (fp16) as they are loaded when the attention compute is bf16 (fp16), like the naive path's GEMM
// operands; every product and sum is fp32 (the probabilities are not rounded).
//
// Determinism: no atomics. The backward is three sweeps: (1) D_i = sum_j p_ij (dout_i . v_j) per query row,
// (2) dq_i = scale * sum_j ds_ij k_j with ds_ij = p_ij (dout_i . v_j - D_i) in the same kernel, and (3) per
// key row dk_j = scale * sum_i ds_ij q_i, dv_j = sum_i p_ij dout_i.
//
// Types: qkv is fp32 or bf16 (the model's layout under bf16 compute), read as it is and widened in registers;
// the forward's output is fp32 or bf16 (rounded once, as the fp32 result then a cast); dout and dqkv are
// fp32. Correct first: the FLOPs are scalar fp32 (no tensor cores yet), so it is not expected to beat the
// cuBLAS path before it is tuned on a GPU.
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_common.cuh"

namespace tern {
namespace cuda {
namespace {

constexpr int kRows = 8;   // warps per block: query (or key) rows per block
constexpr int kTile = 32;  // rows of the other side per shared-memory tile: one per lane
constexpr int kMaxHs = 128;
constexpr int kPerLane = kMaxHs / kWarp;

struct Geometry {
  int T, C, NH, hs;
  float scale;
  int mode;  // operand rounding: 0 none (fp32), 1 bf16, 2 fp16
};

__device__ __forceinline__ float RoundIn(float x, int mode) {
  if (mode == 1) return FromBF16Bits(ToBF16Bits(x));
  if (mode == 2) return __half2float(__float2half_rn(x));
  return x;
}

// rows [row0, row0 + count) of one head (column offset `col` in a row of `stride` elements) into
// dst[count][ld], widened and rounded; rows at or past T are zero.
template <typename In>
__device__ void LoadRows(float* dst, int ld, const In* src, size_t stride, int col, int row0, int count,
                         int T, int hs, int mode) {
  for (int i = threadIdx.x; i < count * hs; i += blockDim.x) {
    const int r = i / hs, d = i % hs, t = row0 + r;
    dst[r * ld + d] = t < T ? RoundIn(Widen(src[static_cast<size_t>(t) * stride + col + d]), mode) : 0.0f;
  }
}

__device__ __forceinline__ float Dot(const float* a, const float* b, int n) {
  float acc = 0.0f;
  for (int d = 0; d < n; d++) acc += a[d] * b[d];
  return acc;
}

// acc[i] += sum over the first n lanes l of w_l * rows[l][lane + 32 i] (w_l lives in lane l's register).
__device__ __forceinline__ void AccumulateRows(float (&acc)[kPerLane], float w, const float* rows, int ld,
                                               int n, int hs, int lane) {
  for (int l = 0; l < n; l++) {
    const float wl = __shfl_sync(0xffffffffu, w, l);
#pragma unroll
    for (int i = 0; i < kPerLane; i++) {
      const int d = lane + i * kWarp;
      if (d < hs) acc[i] += wl * rows[l * ld + d];
    }
  }
}

template <typename In, typename Out>
__global__ void FlashForwardKernel(Out* __restrict__ out, float* __restrict__ lse, const In* __restrict__ qkv,
                                   Geometry g) {
  extern __shared__ float smem[];
  const int hs = g.hs, ld = hs + 1;  // +1: lanes reading row l of a tile hit different banks
  float* ks = smem;
  float* vs = ks + kTile * ld;
  float* qs = vs + kTile * ld;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH;
  const int row0 = blockIdx.x * kRows, t = row0 + warp;
  const size_t C3 = 3 * static_cast<size_t>(g.C);
  const In* base = qkv + static_cast<size_t>(b) * g.T * C3;
  LoadRows(qs, hs, base, C3, h * hs, row0, kRows, g.T, hs, g.mode);
  float m = -INFINITY, l = 0.0f, o[kPerLane] = {};
  const int last =
      min(g.T - 1, row0 + kRows - 1);  // keys after the block's last row are masked for all its rows
  for (int j0 = 0; j0 <= last; j0 += kTile) {
    __syncthreads();  // the previous tile is consumed
    LoadRows(ks, ld, base, C3, g.C + h * hs, j0, kTile, g.T, hs, g.mode);
    LoadRows(vs, ld, base, C3, 2 * g.C + h * hs, j0, kTile, g.T, hs, g.mode);
    __syncthreads();
    if (t >= g.T) continue;  // warp-uniform
    const int j = j0 + lane;
    const float s = j <= t ? Dot(qs + warp * hs, ks + lane * ld, hs) * g.scale : -INFINITY;
    // Key 0 is in the first tile of every row, so m is finite from then on and a fully masked later tile
    // leaves everything as it is (p = 0, corr = 1).
    const float m_new = fmaxf(m, WarpMax(s));
    const float p = j <= t ? expf(s - m_new) : 0.0f;
    const float corr = expf(m - m_new);
    l = l * corr + WarpSum(p);
#pragma unroll
    for (int i = 0; i < kPerLane; i++) o[i] *= corr;
    AccumulateRows(o, p, vs, ld, min(kTile, t - j0 + 1), hs, lane);
    m = m_new;
  }
  if (t >= g.T) return;
  const float inv = 1.0f / l;
  Out* y = out + (static_cast<size_t>(b) * g.T + t) * g.C + h * hs;
#pragma unroll
  for (int i = 0; i < kPerLane; i++) {
    const int d = lane + i * kWarp;
    if (d < hs) StoreRounded(y + d, o[i] * inv);
  }
  if (lane == 0) lse[static_cast<size_t>(bh) * g.T + t] = m + logf(l);
}

// Sweeps (1) and (2): D per query row, then dq. Writes dq into dqkv and D into dsum[B, NH, T].
template <typename In>
__global__ void FlashBackwardDqKernel(float* __restrict__ dqkv, float* __restrict__ dsum,
                                      const float* __restrict__ dout, const In* __restrict__ qkv,
                                      const float* __restrict__ lse, Geometry g) {
  extern __shared__ float smem[];
  const int hs = g.hs, ld = hs + 1;
  float* ks = smem;
  float* vs = ks + kTile * ld;
  float* qs = vs + kTile * ld;
  float* dos = qs + kRows * hs;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH;
  const int row0 = blockIdx.x * kRows, t = row0 + warp;
  const size_t C3 = 3 * static_cast<size_t>(g.C);
  const In* base = qkv + static_cast<size_t>(b) * g.T * C3;
  const float* dbase = dout + static_cast<size_t>(b) * g.T * g.C;
  LoadRows(qs, hs, base, C3, h * hs, row0, kRows, g.T, hs, g.mode);
  LoadRows(dos, hs, dbase, g.C, h * hs, row0, kRows, g.T, hs, g.mode);
  const float lse_t = t < g.T ? lse[static_cast<size_t>(bh) * g.T + t] : 0.0f;
  const int last = min(g.T - 1, row0 + kRows - 1);
  float D = 0.0f, dq[kPerLane] = {};
  for (int sweep = 0; sweep < 2; sweep++) {
    float part = 0.0f;
    for (int j0 = 0; j0 <= last; j0 += kTile) {
      __syncthreads();
      LoadRows(ks, ld, base, C3, g.C + h * hs, j0, kTile, g.T, hs, g.mode);
      LoadRows(vs, ld, base, C3, 2 * g.C + h * hs, j0, kTile, g.T, hs, g.mode);
      __syncthreads();
      if (t >= g.T) continue;
      const int j = j0 + lane;
      float p = 0.0f, dp = 0.0f;
      if (j <= t) {
        p = expf(Dot(qs + warp * hs, ks + lane * ld, hs) * g.scale - lse_t);
        dp = Dot(dos + warp * hs, vs + lane * ld, hs);
      }
      if (sweep == 0) {
        part += p * dp;
      } else {
        AccumulateRows(dq, p * (dp - D), ks, ld, min(kTile, t - j0 + 1), hs, lane);
      }
    }
    if (sweep == 0 && t < g.T) D = WarpSum(part);
  }
  if (t >= g.T) return;
  float* dst = dqkv + (static_cast<size_t>(b) * g.T + t) * C3 + h * hs;
#pragma unroll
  for (int i = 0; i < kPerLane; i++) {
    const int d = lane + i * kWarp;
    if (d < hs) dst[d] = dq[i] * g.scale;
  }
  if (lane == 0) dsum[static_cast<size_t>(bh) * g.T + t] = D;
}

// Sweep (3): one warp per key row j over the query tiles at or after it.
template <typename In>
__global__ void FlashBackwardDkvKernel(float* __restrict__ dqkv, const float* __restrict__ dsum,
                                       const float* __restrict__ dout, const In* __restrict__ qkv,
                                       const float* __restrict__ lse, Geometry g) {
  extern __shared__ float smem[];
  const int hs = g.hs, ld = hs + 1;
  float* qs = smem;
  float* dos = qs + kTile * ld;
  float* kr = dos + kTile * ld;
  float* vr = kr + kRows * hs;
  float* lses = vr + kRows * hs;
  float* ds_ = lses + kTile;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH;
  const int row0 = blockIdx.x * kRows, j = row0 + warp;
  const size_t C3 = 3 * static_cast<size_t>(g.C);
  const In* base = qkv + static_cast<size_t>(b) * g.T * C3;
  const float* dbase = dout + static_cast<size_t>(b) * g.T * g.C;
  LoadRows(kr, hs, base, C3, g.C + h * hs, row0, kRows, g.T, hs, g.mode);
  LoadRows(vr, hs, base, C3, 2 * g.C + h * hs, row0, kRows, g.T, hs, g.mode);
  float dk[kPerLane] = {}, dv[kPerLane] = {};
  for (int i0 = (row0 / kTile) * kTile; i0 < g.T; i0 += kTile) {
    __syncthreads();
    LoadRows(qs, ld, base, C3, h * hs, i0, kTile, g.T, hs, g.mode);
    LoadRows(dos, ld, dbase, g.C, h * hs, i0, kTile, g.T, hs, g.mode);
    if (threadIdx.x < kTile) {
      const int i = i0 + threadIdx.x;
      lses[threadIdx.x] = i < g.T ? lse[static_cast<size_t>(bh) * g.T + i] : 0.0f;
      ds_[threadIdx.x] = i < g.T ? dsum[static_cast<size_t>(bh) * g.T + i] : 0.0f;
    }
    __syncthreads();
    if (j >= g.T) continue;
    const int i = i0 + lane;
    float p = 0.0f, ds = 0.0f;
    if (i >= j && i < g.T) {
      p = expf(Dot(qs + lane * ld, kr + warp * hs, hs) * g.scale - lses[lane]);
      ds = p * (Dot(dos + lane * ld, vr + warp * hs, hs) - ds_[lane]);
    }
    const int n = min(kTile, g.T - i0);  // masked lanes contribute zeros
    AccumulateRows(dv, p, dos, ld, n, hs, lane);
    AccumulateRows(dk, ds, qs, ld, n, hs, lane);
  }
  if (j >= g.T) return;
  float* dst = dqkv + (static_cast<size_t>(b) * g.T + j) * C3 + h * hs;
#pragma unroll
  for (int i = 0; i < kPerLane; i++) {
    const int d = lane + i * kWarp;
    if (d < hs) {
      dst[g.C + d] = dk[i] * g.scale;
      dst[2 * g.C + d] = dv[i];
    }
  }
}

}  // namespace
}  // namespace cuda

namespace {

cuda::Geometry FlashGeometry(int T, int C, int NH, Compute compute) {
  const int hs = C / NH;
  if (hs > cuda::kMaxHs) {
    std::fprintf(
        stderr,
        "[tern cuda] cuda.attention=flash handles head sizes up to %d; this model has %d (n_embd / n_head). "
        "Use cuda.attention=naive.\n",
        cuda::kMaxHs, hs);
    std::abort();
  }
  const int mode = compute == Compute::kBF16 ? 1 : compute == Compute::kF16 ? 2 : 0;
  return {T, C, NH, hs, 1.0f / std::sqrt(static_cast<float>(hs)), mode};
}

}  // namespace

namespace cuda {
namespace {

template <typename In, typename Out>
void LaunchFlashForward(Out* out, float* lse, const In* qkv, int B, const Geometry& g, cudaStream_t stream) {
  const size_t smem = (2 * kTile * (g.hs + 1) + kRows * g.hs) * sizeof(float);
  const dim3 grid(CeilDiv(g.T, kRows), B * g.NH);
  FlashForwardKernel<In, Out><<<grid, kRows * kWarp, smem, stream>>>(out, lse, qkv, g);
  CUDA_CHECK_LAUNCH();
}

template <typename In>
void LaunchFlashBackward(float* dqkv, float* dsum, const float* dout, const In* qkv, const float* lse, int B,
                         const Geometry& g, cudaStream_t stream) {
  const dim3 grid(CeilDiv(g.T, kRows), B * g.NH);
  const size_t smem_dq = (2 * kTile * (g.hs + 1) + 2 * kRows * g.hs) * sizeof(float);
  FlashBackwardDqKernel<In><<<grid, kRows * kWarp, smem_dq, stream>>>(dqkv, dsum, dout, qkv, lse, g);
  CUDA_CHECK_LAUNCH();
  const size_t smem_dkv = (2 * kTile * (g.hs + 1) + 2 * kRows * g.hs + 2 * kTile) * sizeof(float);
  FlashBackwardDkvKernel<In><<<grid, kRows * kWarp, smem_dkv, stream>>>(dqkv, dsum, dout, qkv, lse, g);
  CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace cuda

void CudaBackend::FlashAttentionForward(void* out, bool out_bf16, float* lse, const void* qkv, bool qkv_bf16,
                                        int B, int T, int C, int NH, Compute compute) {
  const cuda::Geometry g = FlashGeometry(T, C, NH, attention_compute(compute));
  auto* q16 = static_cast<const uint16_t*>(qkv);
  auto* q32 = static_cast<const float*>(qkv);
  auto* o16 = static_cast<uint16_t*>(out);
  auto* o32 = static_cast<float*>(out);
  if (qkv_bf16 && out_bf16) cuda::LaunchFlashForward(o16, lse, q16, B, g, stream_);
  if (qkv_bf16 && !out_bf16) cuda::LaunchFlashForward(o32, lse, q16, B, g, stream_);
  if (!qkv_bf16 && out_bf16) cuda::LaunchFlashForward(o16, lse, q32, B, g, stream_);
  if (!qkv_bf16 && !out_bf16) cuda::LaunchFlashForward(o32, lse, q32, B, g, stream_);
}

void CudaBackend::FlashAttentionBackward(float* dqkv, const float* dout, const void* qkv, bool qkv_bf16,
                                         const float* lse, int B, int T, int C, int NH, Compute compute) {
  const cuda::Geometry g = FlashGeometry(T, C, NH, attention_compute(compute));
  auto* dsum = static_cast<float*>(
      ScratchBuffer(cuda::Scratch::kAttnP, static_cast<size_t>(B) * NH * T * sizeof(float)));
  if (qkv_bf16) {
    cuda::LaunchFlashBackward(dqkv, dsum, dout, static_cast<const uint16_t*>(qkv), lse, B, g, stream_);
  } else {
    cuda::LaunchFlashBackward(dqkv, dsum, dout, static_cast<const float*>(qkv), lse, B, g, stream_);
  }
}

}  // namespace tern
