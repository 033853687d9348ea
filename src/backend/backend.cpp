#include "backend/backend.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend/bf16.h"

namespace tern {

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
      return 2;
    case DType::kI32:
      return 4;
    case DType::kI8:
      return 1;
  }
  return 0;
}

size_t KvBlockBytes(DType kv_dtype, int C, int NH, int bs) {
  const size_t elements = static_cast<size_t>(bs) * C * DTypeSize(kv_dtype);
  return kv_dtype == DType::kI8 ? elements + static_cast<size_t>(NH) * bs * sizeof(float) : elements;
}

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kI32:
      return "i32";
    case DType::kI8:
      return "i8";
  }
  return "?";
}

const char* ComputeName(Compute c) {
  switch (c) {
    case Compute::kF32:
      return "fp32";
    case Compute::kBF16:
      return "bf16";
    case Compute::kF16:
      return "fp16";
  }
  return "?";
}

void Backend::MatmulGelu(float* out, float* pre, Operand a, Operand b, const float* bias, int M, int N, int K,
                         bool trans_a, bool trans_b, Compute compute) {
  Matmul(pre, a, b, bias, M, N, K, trans_a, trans_b, 0.0f, compute);
  GeluForward(out, pre, static_cast<size_t>(M) * N);
}

void Backend::MatmulGeluBF16(uint16_t* out, float* pre, Operand a, Operand b, const float* bias, int M, int N,
                             int K, bool trans_a, bool trans_b, Compute compute) {
  Matmul(pre, a, b, bias, M, N, K, trans_a, trans_b, 0.0f, compute);
  GeluForwardBF16(out, pre, static_cast<size_t>(M) * N);
}

void Backend::MatmulDGelu(float* dinp, const float* pre, Operand a, Operand b, int M, int N, int K,
                          bool trans_a, bool trans_b, Compute compute) {
  Matmul(dinp, a, b, nullptr, M, N, K, trans_a, trans_b, 0.0f, compute);
  GeluBackward(dinp, pre, dinp, static_cast<size_t>(M) * N);
}

void Backend::ResidualLayerNormForward(float* residual, float* out, float* mean, float* rstd, const float* a,
                                       const float* b, const float* weight, const float* bias, int N, int C) {
  Add(residual, a, b, static_cast<size_t>(N) * C);
  LayerNormForward(out, mean, rstd, residual, weight, bias, N, C);
}

void Backend::ResidualLayerNormForwardBF16(float* residual, uint16_t* out, float* mean, float* rstd,
                                           const float* a, const float* b, const float* weight,
                                           const float* bias, int N, int C) {
  Add(residual, a, b, static_cast<size_t>(N) * C);
  LayerNormForwardBF16(out, mean, rstd, residual, weight, bias, N, C);
}

void Backend::AccumulateMean(double* acc, const float* x, size_t n, double divisor) {
  const float mean = static_cast<float>(Sum(x, n) / divisor);
  double a = 0;
  Download(&a, acc, sizeof a);
  a += mean;
  Upload(acc, &a, sizeof a);
}

void Backend::MatmulToBF16(uint16_t* c, Operand a, Operand b, const float* bias, int M, int N, int K,
                           bool trans_a, bool trans_b, Compute compute) {
  const size_t n = static_cast<size_t>(M) * N;
  if (n == 0) return;
  float* tmp = static_cast<float*>(Alloc(n * sizeof(float)));
  Matmul(tmp, a, b, bias, M, N, K, trans_a, trans_b, 0.0f, compute);
  CastF32ToBF16(c, tmp, n);
  Free(tmp);
}

namespace {
// A device copy of bf16 x[n] widened to fp32 (exact), through the host: the defaults' oracle path only.
float* WidenedCopy(Backend& be, const uint16_t* x, size_t n) {
  std::vector<uint16_t> h(n);
  be.Download(h.data(), x, n * sizeof(uint16_t));
  std::vector<float> w(n);
  for (size_t i = 0; i < n; i++) w[i] = BF16ToF32(h[i]);
  float* d = static_cast<float*>(be.Alloc(n * sizeof(float)));
  be.Upload(d, w.data(), n * sizeof(float));
  return d;
}
}  // namespace

void Backend::AttentionForwardBF16(uint16_t* out, void* state, const uint16_t* qkv, int B, int T, int C,
                                   int NH, Compute compute) {
  const size_t n = static_cast<size_t>(B) * T * C;
  if (n == 0) return;
  float* wide = WidenedCopy(*this, qkv, 3 * n);
  float* tmp = static_cast<float*>(Alloc(n * sizeof(float)));
  AttentionForward(tmp, state, wide, B, T, C, NH, compute);
  CastF32ToBF16(out, tmp, n);
  Free(tmp);
  Free(wide);
}

void Backend::AttentionBackwardBF16(float* dqkv, void* scratch, const float* dout, const uint16_t* qkv,
                                    const uint16_t* out, const void* state, int B, int T, int C, int NH,
                                    Compute compute) {
  const size_t n = static_cast<size_t>(B) * T * C;
  if (n == 0) return;
  float* wide = WidenedCopy(*this, qkv, 3 * n);
  float* wide_out = WidenedCopy(*this, out, n);
  AttentionBackward(dqkv, scratch, dout, wide, wide_out, state, B, T, C, NH, compute);
  Free(wide_out);
  Free(wide);
}

const char* AttentionKindName(AttentionKind k) {
  switch (k) {
    case AttentionKind::kFlash:
      return "flash";
    case AttentionKind::kCudnn:
      return "cudnn";
    case AttentionKind::kNaive:
      break;
  }
  return "naive";
}

AttentionMemory AttentionStateBytes(AttentionKind kind, int B, int T, int C, int NH, Compute compute) {
  const size_t rows = static_cast<size_t>(B) * NH * T;  // score rows
  const size_t n = static_cast<size_t>(B) * T * C;      // elements of the output
  AttentionMemory m;
  if (kind == AttentionKind::kCudnn && compute == Compute::kBF16) {
    m.state = rows * 2 * sizeof(float);
    m.scratch = 4 * n * sizeof(uint16_t) + rows * sizeof(float);  // bf16 dout and dqkv, one float per row
  } else if (kind == AttentionKind::kFlash || kind == AttentionKind::kCudnn) {
    m.state = rows * 2 * sizeof(float);
  } else {
    m.state = rows * T * sizeof(float);
    m.scratch = rows * T * sizeof(float);
  }
  return m;
}

// The inference ops are optional: a backend that lacks one fails loudly at the first call (a missing
// kernel is a bug in the build, not an input error).
namespace {
[[noreturn]] void NotImplemented(const char* op, const Backend& b) {
  std::fprintf(stderr, "tern: op %s not implemented on backend %s\n", op, b.name().c_str());
  std::abort();
}
}  // namespace

void Backend::EmbedTokens(float*, const int32_t*, const int32_t*, const float*, const float*, int, int) {
  NotImplemented("EmbedTokens", *this);
}
void Backend::EmbedTokensBF16(float*, const int32_t*, const int32_t*, const uint16_t*, const float*, int,
                              int) {
  NotImplemented("EmbedTokensBF16", *this);
}
void Backend::KvCacheWrite(void*, void*, DType, const float*, const int32_t*, int, int, int, int) {
  NotImplemented("KvCacheWrite", *this);
}
void Backend::PagedAttentionForward(float*, const float*, const void*, const void*, DType, const int32_t*,
                                    const int32_t*, int, int, int, int, int, int) {
  NotImplemented("PagedAttentionForward", *this);
}
void Backend::MatmulBF16(float* out, const float* inp, const uint16_t* w, const float* bias, int N, int OC,
                         int K, bool /*row_independent*/) {
  Matmul(out, F32(inp), BF16(w), bias, N, OC, K, false, true, 0.0f, Compute::kBF16);
}
void Backend::MatmulF32Weights(float* out, const float* inp, const float* w, const float* bias, int N, int OC,
                               int K) {
  Matmul(out, F32(inp), F32(w), bias, N, OC, K, false, true, 0.0f, Compute::kF32);
}

void Backend::MatmulInt8(float*, const float*, const int8_t*, const float*, const float*, int, int, int) {
  NotImplemented("MatmulInt8", *this);
}
void Backend::MatmulInt4(float*, const float*, const uint8_t*, const float*, const float*, int, int, int) {
  NotImplemented("MatmulInt4", *this);
}

}  // namespace tern
