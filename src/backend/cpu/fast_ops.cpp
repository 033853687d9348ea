// The fast CPU backend: elementwise ops, normalisation, embedding, loss and optimizer. The matmul glue lives
// in fast_matmul.cpp (oneDNN itself in dnnl_matmul.cpp), attention in fast_attention.cpp.
//
// Every loop over elements is `omp parallel for` with a static schedule (each element is computed by one
// thread, in one fixed way) and `omp simd` inside; reductions use per-thread or per-chunk partials that are
// combined in a fixed order. Small inputs stay on the calling thread (the `if` clauses).
#include "backend/cpu/fast_ops.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/dnnl_matmul.h"

namespace tern {
namespace {

constexpr float kLayerNormEps = 1e-5f;
using fast::kParallelMin;
constexpr size_t kSumChunk =
    1 << 15;  // Sum/SumSquares partial size: fixed, so results ignore the thread count
const float kGeluScale = std::sqrt(2.0f / static_cast<float>(M_PI));

// [begin, end) of part `i` of `n` items split into `parts` contiguous ranges of whole `align`-sized blocks.
void SplitRange(size_t n, size_t align, int i, int parts, size_t* begin, size_t* end) {
  size_t blocks = (n + align - 1) / align;
  size_t b0 = blocks * i / parts, b1 = blocks * (i + 1) / parts;
  *begin = std::min(n, b0 * align);
  *end = std::min(n, b1 * align);
}

}  // namespace

// Subnormal floats take a microcode assist on every operation that touches them. As training goes on, AdamW's
// second moments and the smallest gradients drift into that range and a step slows down by tens of percent;
// flushing them to zero (FTZ/DAZ, as GPUs do by default) costs no accuracy that fp32 training relies on.
// MXCSR is per thread: set it on the caller and on every OpenMP worker (the pool's threads persist).
void FlushSubnormalsOnAllThreads() {
  if (std::getenv("TERN_KEEP_SUBNORMALS")) return;
#pragma omp parallel
  _mm_setcsr(_mm_getcsr() | 0x8040);  // FTZ (bit 15) | DAZ (bit 6)
  _mm_setcsr(_mm_getcsr() | 0x8040);
}

CpuFastBackend::CpuFastBackend() : dnnl_(std::make_unique<DnnlMatmul>()) {
  FlushSubnormalsOnAllThreads();
}
void CpuFastBackend::PrepareThread() {
  FlushSubnormalsOnAllThreads();
}
CpuFastBackend::~CpuFastBackend() = default;
Capabilities CpuFastBackend::capabilities() const {
  Capabilities c;
  c.host_addressable_memory = true;
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  c.int4_weights = true;  // int4_matmul.cpp; without VNNI its fallback is the (slow) reference
#endif
  c.kv_dtypes = {DType::kF32, DType::kBF16, DType::kI8};  // fast_paged_attention.cpp
  c.attention_kinds = {"naive", "flash"};                 // fast_attention.cpp
  return c;
}
bool CpuFastBackend::SetAttentionKernel(const std::string& kind) {
  if (kind != "naive" && kind != "flash") return false;
  attention_kind_ = kind == "flash" ? AttentionKind::kFlash : AttentionKind::kNaive;
  return true;
}

// ---- embedding ---------------------------------------------------------------------------------------

void CpuFastBackend::EncoderForward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B,
                                    int T, int C) {
  const int rows = B * T;
#pragma omp parallel for schedule(static) if (static_cast <size_t>(rows) * C >= kParallelMin)
  for (int bt = 0; bt < rows; bt++) {
    float* __restrict o = out + static_cast<size_t>(bt) * C;
    const float* __restrict e = wte + static_cast<size_t>(inp[bt]) * C;
    const float* __restrict p = wpe + static_cast<size_t>(bt % T) * C;
#pragma omp simd
    for (int i = 0; i < C; i++) o[i] = e[i] + p[i];
  }
}

// Each thread owns a range of channels and walks all (b,t) in order, so every element of dwte/dwpe sums its
// contributions in the reference's order: deterministic, race-free, and identical for any thread count.
void CpuFastBackend::EncoderBackward(float* dwte, float* dwpe, const float* dout, const int32_t* inp,
                                     const int32_t* /*host_inp*/, int B, int T, int C) {
  const int rows = B * T;
#pragma omp parallel if (static_cast <size_t>(rows) * C >= kParallelMin)
  {
    size_t c0, c1;
    SplitRange(C, 16, omp_get_thread_num(), omp_get_num_threads(), &c0, &c1);
    for (int bt = 0; bt < rows && c0 < c1; bt++) {
      const float* __restrict d = dout + static_cast<size_t>(bt) * C;
      float* __restrict we = dwte + static_cast<size_t>(inp[bt]) * C;
      float* __restrict wp = dwpe + static_cast<size_t>(bt % T) * C;
#pragma omp simd
      for (size_t i = c0; i < c1; i++) {
        we[i] += d[i];
        wp[i] += d[i];
      }
    }
  }
}

// ---- layernorm ---------------------------------------------------------------------------------------

namespace {

// y = fp32, or uint16_t: the fp32 value rounded to bf16 as fast::ToBF16 rounds.
inline void PutLn(float* y, float v) {
  *y = v;
}
inline void PutLn(uint16_t* y, float v) {
  *y = fast::ToBF16(v);
}

// Layer norm of each row of inp, or (add non-null) of inp + add, written to residual first.
template <typename Out>
void LayerNormRows(Out* out, float* mean, float* rstd, const float* inp, const float* add, float* residual,
                   const float* weight, const float* bias, int N, int C) {
#pragma omp parallel for schedule(static) if (static_cast <size_t>(N) * C >= kParallelMin)
  for (int n = 0; n < N; n++) {
    const size_t row = static_cast<size_t>(n) * C;
    const float* __restrict x = inp + row;
    if (add) {
      float* __restrict r = residual + row;
      const float* __restrict y = add + row;
#pragma omp simd
      for (int i = 0; i < C; i++) r[i] = x[i] + y[i];
      x = r;
    }
    Out* __restrict y = out + row;
    float m = 0.0f;
#pragma omp simd reduction(+ : m)
    for (int i = 0; i < C; i++) m += x[i];
    m /= C;
    float v = 0.0f;
#pragma omp simd reduction(+ : v)
    for (int i = 0; i < C; i++) v += (x[i] - m) * (x[i] - m);
    v /= C;
    const float s = 1.0f / std::sqrt(v + kLayerNormEps);
#pragma omp simd
    for (int i = 0; i < C; i++) PutLn(y + i, (s * (x[i] - m)) * weight[i] + bias[i]);
    mean[n] = m;
    rstd[n] = s;
  }
}

}  // namespace

void CpuFastBackend::LayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                                      const float* weight, const float* bias, int N, int C) {
  LayerNormRows(out, mean, rstd, inp, nullptr, nullptr, weight, bias, N, C);
}

void CpuFastBackend::LayerNormForwardBF16(uint16_t* out, float* mean, float* rstd, const float* inp,
                                          const float* weight, const float* bias, int N, int C) {
  LayerNormRows(out, mean, rstd, inp, nullptr, nullptr, weight, bias, N, C);
}

void CpuFastBackend::ResidualLayerNormForward(float* residual, float* out, float* mean, float* rstd,
                                              const float* a, const float* b, const float* weight,
                                              const float* bias, int N, int C) {
  LayerNormRows(out, mean, rstd, a, b, residual, weight, bias, N, C);
}

void CpuFastBackend::ResidualLayerNormForwardBF16(float* residual, uint16_t* out, float* mean, float* rstd,
                                                  const float* a, const float* b, const float* weight,
                                                  const float* bias, int N, int C) {
  LayerNormRows(out, mean, rstd, a, b, residual, weight, bias, N, C);
}

// Rows are split statically over threads; each thread sums dweight/dbias into its own partial row, and the
// partials are added to the outputs in thread order.
void CpuFastBackend::LayerNormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                                       const float* inp, const float* weight, const float* mean,
                                       const float* rstd, int N, int C) {
  const size_t cp = fast::RoundUp(C, 16);  // partial rows on separate cache lines
  float* partials = partials_.As<float>(2 * cp * omp_get_max_threads());
#pragma omp parallel if (static_cast <size_t>(N) * C >= kParallelMin)
  {
    const int nthr = omp_get_num_threads();
    float* __restrict dw = partials + 2 * cp * omp_get_thread_num();
    float* __restrict db = dw + cp;
    std::memset(dw, 0, 2 * cp * sizeof(float));
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
      const float* __restrict dy = dout + static_cast<size_t>(n) * C;
      const float* __restrict x = inp + static_cast<size_t>(n) * C;
      float* __restrict dx = dinp + static_cast<size_t>(n) * C;
      const float m = mean[n], s = rstd[n];
      float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
      for (int i = 0; i < C; i++) {
        float dnorm = weight[i] * dy[i];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * ((x[i] - m) * s);
      }
      dnorm_mean /= C;
      dnorm_norm_mean /= C;
#pragma omp simd
      for (int i = 0; i < C; i++) {
        float norm = (x[i] - m) * s;
        float dnorm = weight[i] * dy[i];
        db[i] += dy[i];
        dw[i] += norm * dy[i];
        dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
      }
    }
#pragma omp for schedule(static)
    for (int i = 0; i < C; i++) {
      float w = 0.0f, b = 0.0f;
      for (int t = 0; t < nthr; t++) {
        w += partials[2 * cp * t + i];
        b += partials[2 * cp * t + cp + i];
      }
      dweight[i] += w;
      dbias[i] += b;
    }
  }
}

// Columns are split into blocks of 32; each block sums all rows in order in double (as the reference does),
// so the result does not depend on the thread count.
void CpuFastBackend::BiasBackward(float* dbias, const float* dout, int N, int OC) {
  constexpr int kBlock = 32;
  const int blocks = (OC + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (static_cast <size_t>(N) * OC >= kParallelMin)
  for (int blk = 0; blk < blocks; blk++) {
    const int o0 = blk * kBlock, width = std::min(kBlock, OC - o0);
    double acc[kBlock] = {};
    for (int n = 0; n < N; n++) {
      const float* __restrict row = dout + static_cast<size_t>(n) * OC + o0;
#pragma omp simd
      for (int j = 0; j < width; j++) acc[j] += row[j];
    }
    for (int j = 0; j < width; j++) dbias[o0 + j] += static_cast<float>(acc[j]);
  }
}

// ---- elementwise -------------------------------------------------------------------------------------

namespace {
// gelu(x) = 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3). The sigmoid form
// needs only one exp and has no cancellation for negative x.
inline float Gelu(float x) {
  const float u = kGeluScale * (x + 0.044715f * x * x * x);
  return x / (1.0f + fast::Exp(-2.0f * u));
}
}  // namespace

void CpuFastBackend::GeluForward(float* out, const float* inp, size_t n) {
  fast::ParallelRange(n, kParallelMin, [&](size_t b, size_t e) {
#pragma omp simd
    for (size_t i = b; i < e; i++) out[i] = Gelu(inp[i]);
  });
}

void CpuFastBackend::GeluForwardBF16(uint16_t* out, const float* inp, size_t n) {
  fast::ParallelRange(n, kParallelMin, [&](size_t b, size_t e) {
#pragma omp simd
    for (size_t i = b; i < e; i++) out[i] = fast::ToBF16(Gelu(inp[i]));
  });
}

// d/dx [x s(2u)] = s + 2 x s (1 - s) u'  with s = sigmoid(2u) (so 1 + tanh = 2s and sech^2 = 4 s (1 - s)).
void CpuFastBackend::GeluBackward(float* dinp, const float* inp, const float* dout, size_t n) {
  fast::ParallelRange(n, kParallelMin, [&](size_t b, size_t end) {
#pragma omp simd
    for (size_t i = b; i < end; i++) {
      float x = inp[i];
      float u = kGeluScale * (x + 0.044715f * x * x * x);
      float e = fast::Exp(-2.0f * u);
      float s = 1.0f / (1.0f + e);
      float du = kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
      dinp[i] = (s + 2.0f * x * s * (e * s) * du) * dout[i];
    }
  });
}

void CpuFastBackend::Add(float* out, const float* a, const float* b, size_t n) {
  fast::ParallelRange(n, kParallelMin, [&](size_t begin, size_t end) {
#pragma omp simd
    for (size_t i = begin; i < end; i++) out[i] = a[i] + b[i];
  });
}

void CpuFastBackend::CastF32ToBF16(uint16_t* dst, const float* src, size_t n) {
  fast::ParallelRange(n, kParallelMin, [&](size_t b, size_t e) {
#pragma omp simd
    for (size_t i = b; i < e; i++) dst[i] = fast::ToBF16(src[i]);
  });
}

// ---- loss --------------------------------------------------------------------------------------------

namespace {

// One row per task: max; the sum of exp in double, keeping each exp in the row when a gradient follows (so
// it is computed once); then (if dloss) the gradient written by `store(n, i, g)`, the target's after its
// -dloss. `row_of(n)` gives row n's fp32 logits (the row itself, or its bf16 widened into a per-thread
// buffer); the row (V floats, 200 KB for GPT-2) stays in L2 across the passes.
template <typename RowOf, typename Store>
void CrossEntropyRows(float* losses, const int32_t* targets, int N, int V, float dloss, RowOf row_of,
                      Store store) {
#pragma omp parallel for schedule(static) if (N > 1 && static_cast <size_t>(N) * V >= kParallelMin)
  for (int n = 0; n < N; n++) {
    float* __restrict row = row_of(n);
    const int target = targets[n];
    const float maxval = fast::Max(row, V);
    const float target_logit = target < 0 ? 0.0f : row[target];
    double sum = 0.0;
    if (dloss == 0.0f) {
#pragma omp simd reduction(+ : sum)
      for (int i = 0; i < V; i++) sum += fast::Exp(row[i] - maxval);
    } else {
#pragma omp simd reduction(+ : sum)
      for (int i = 0; i < V; i++) {
        const float e = fast::Exp(row[i] - maxval);
        row[i] = e;
        sum += e;
      }
    }
    const float logsum = static_cast<float>(std::log(sum));
    losses[n] = target < 0 ? 0.0f : -(target_logit - maxval - logsum);
    if (dloss == 0.0f) continue;
    if (target < 0) {
      for (int i = 0; i < V; i++) store(n, i, 0.0f);
      continue;
    }
    const float scale = static_cast<float>(dloss / sum);
    // p * scale rounded, then - dloss: as the fp32 op always did (written, then decremented in place).
    float target_grad = row[target] * scale;
    asm("" : "+x"(target_grad));  // no contraction into one FMA
    target_grad -= dloss;
#pragma omp simd
    for (int i = 0; i < V; i++) store(n, i, row[i] * scale);
    store(n, target, target_grad);
  }
}

}  // namespace

void CpuFastBackend::CrossEntropyForwardBackward(float* losses, float* logits, const int32_t* targets, int N,
                                                 int V, float dloss) {
  CrossEntropyRows(
      losses, targets, N, V, dloss, [=](int n) { return logits + static_cast<size_t>(n) * V; },
      [=](int n, int i, float g) { logits[static_cast<size_t>(n) * V + i] = g; });
}

// bf16 logits (the LM head's under bf16 compute): each row widened into its thread's fp32 buffer, the fp32
// op's arithmetic on it, the gradient rounded back over the bf16 row.
void CpuFastBackend::CrossEntropyForwardBackwardBF16(float* losses, uint16_t* logits, const int32_t* targets,
                                                     int N, int V, float dloss) {
  const size_t stride = (static_cast<size_t>(V) + 15) / 16 * 16;
  float* rows = loss_rows_.As<float>(stride * std::max(1, omp_get_max_threads()));
  CrossEntropyRows(
      losses, targets, N, V, dloss,
      [=](int n) {
        float* __restrict row = rows + stride * omp_get_thread_num();
        const uint16_t* __restrict h = logits + static_cast<size_t>(n) * V;
#pragma omp simd
        for (int i = 0; i < V; i++) row[i] = fast::FromBF16(h[i]);
        return row;
      },
      [=](int n, int i, float g) { logits[static_cast<size_t>(n) * V + i] = fast::ToBF16(g); });
}

// ---- reductions --------------------------------------------------------------------------------------

// Partials over fixed chunks of kSumChunk elements, added in chunk order: the same result for any thread
// count.
double CpuFastBackend::SumSquares(const float* x, size_t n) {
  const size_t chunks = (n + kSumChunk - 1) / kSumChunk;
  double* partial = partials_.As<double>(chunks + 1);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (size_t ch = 0; ch < chunks; ch++) {
    const size_t i0 = ch * kSumChunk, i1 = std::min(n, i0 + kSumChunk);
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (size_t i = i0; i < i1; i++) s += static_cast<double>(x[i]) * x[i];
    partial[ch] = s;
  }
  double total = 0.0;
  for (size_t ch = 0; ch < chunks; ch++) total += partial[ch];
  return total;
}

double CpuFastBackend::Sum(const float* x, size_t n) {
  const size_t chunks = (n + kSumChunk - 1) / kSumChunk;
  double* partial = partials_.As<double>(chunks + 1);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (size_t ch = 0; ch < chunks; ch++) {
    const size_t i0 = ch * kSumChunk, i1 = std::min(n, i0 + kSumChunk);
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (size_t i = i0; i < i1; i++) s += x[i];
    partial[ch] = s;
  }
  double total = 0.0;
  for (size_t ch = 0; ch < chunks; ch++) total += partial[ch];
  return total;
}

// ---- optimizer ---------------------------------------------------------------------------------------

namespace {

// One AdamW update of [0, n): a plain loop over __restrict pointers so that it vectorises with contiguous
// loads and stores (written as a lambda under `omp parallel for simd`, GCC 12 emitted gathers and scatters
// and the update ran several times slower than memory allows).
template <bool kWriteBF16>
void AdamWSpan(float* __restrict param, uint16_t* __restrict param_bf16, const float* __restrict grad,
               float* __restrict m, float* __restrict v, size_t n, float lr, float beta1, float beta2,
               float eps, float weight_decay, float grad_scale, float bc1, float bc2) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) {
    const float g = grad[i] * grad_scale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float p = param[i];
    p -= lr * ((mi / bc1) / (std::sqrt(vi / bc2) + eps) + weight_decay * p);
    param[i] = p;
    if constexpr (kWriteBF16) param_bf16[i] = fast::ToBF16(p);
  }
}

}  // namespace

// One pass over param, grad, m, v (and the bf16 copy): the update is memory-bound, so it is read once.
void CpuFastBackend::AdamW(float* param, uint16_t* param_bf16, const float* grad, float* m, float* v,
                           size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                           float grad_scale, int t) {
  const float bc1 = 1.0f - std::pow(beta1, static_cast<float>(t));
  const float bc2 = 1.0f - std::pow(beta2, static_cast<float>(t));
  constexpr size_t kChunk = 1 << 14;
  const size_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (size_t ch = 0; ch < chunks; ch++) {
    const size_t i0 = ch * kChunk, len = std::min(n, i0 + kChunk) - i0;
    if (param_bf16)
      AdamWSpan<true>(param + i0, param_bf16 + i0, grad + i0, m + i0, v + i0, len, lr, beta1, beta2, eps,
                      weight_decay, grad_scale, bc1, bc2);
    else
      AdamWSpan<false>(param + i0, nullptr, grad + i0, m + i0, v + i0, len, lr, beta1, beta2, eps,
                       weight_decay, grad_scale, bc1, bc2);
  }
}

std::unique_ptr<Backend> MakeCpuFastBackend() {
  return std::make_unique<CpuFastBackend>();
}

}  // namespace tern
