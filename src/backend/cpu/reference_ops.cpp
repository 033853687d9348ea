#include "backend/cpu/reference_ops.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/bf16.h"
#include "backend/fp16.h"

namespace tern {
namespace {

constexpr float kLayerNormEps = 1e-5f;
const float kGeluScale = std::sqrt(2.0f / static_cast<float>(M_PI));

// Reads element i of an operand as the value the matmul multiplies: bf16 operands are widened,
// fp32 operands are rounded to bf16 (fp16) first when the compute type is bf16 (fp16).
float OperandAt(Operand op, size_t i, Compute compute) {
  float x = op.dtype == DType::kBF16 ? BF16ToF32(static_cast<const uint16_t*>(op.ptr)[i])
                                     : static_cast<const float*>(op.ptr)[i];
  if (compute == Compute::kF16) return RoundToF16(x);
  return compute == Compute::kBF16 && op.dtype == DType::kF32 ? RoundToBF16(x) : x;
}

}  // namespace

void CpuReferenceBackend::EncoderForward(float* out, const int32_t* inp, const float* wte, const float* wpe,
                                         int B, int T, int C) {
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      float* out_bt = out + (static_cast<size_t>(b) * T + t) * C;
      const float* wte_ix = wte + static_cast<size_t>(inp[b * T + t]) * C;
      const float* wpe_t = wpe + static_cast<size_t>(t) * C;
      for (int i = 0; i < C; i++) out_bt[i] = wte_ix[i] + wpe_t[i];
    }
  }
}

void CpuReferenceBackend::EncoderBackward(float* dwte, float* dwpe, const float* dout, const int32_t* inp,
                                          const int32_t* /*host_inp*/, int B, int T, int C) {
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      const float* dout_bt = dout + (static_cast<size_t>(b) * T + t) * C;
      float* dwte_ix = dwte + static_cast<size_t>(inp[b * T + t]) * C;
      float* dwpe_t = dwpe + static_cast<size_t>(t) * C;
      for (int i = 0; i < C; i++) {
        dwte_ix[i] += dout_bt[i];
        dwpe_t[i] += dout_bt[i];
      }
    }
  }
}

void CpuReferenceBackend::LayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                                           const float* weight, const float* bias, int N, int C) {
  for (int n = 0; n < N; n++) {
    const float* x = inp + static_cast<size_t>(n) * C;
    float m = 0.0f;
    for (int i = 0; i < C; i++) m += x[i];
    m /= C;
    float v = 0.0f;
    for (int i = 0; i < C; i++) v += (x[i] - m) * (x[i] - m);
    v /= C;
    float s = 1.0f / std::sqrt(v + kLayerNormEps);
    float* y = out + static_cast<size_t>(n) * C;
    for (int i = 0; i < C; i++) y[i] = (s * (x[i] - m)) * weight[i] + bias[i];
    mean[n] = m;
    rstd[n] = s;
  }
}

void CpuReferenceBackend::LayerNormForwardBF16(uint16_t* out, float* mean, float* rstd, const float* inp,
                                               const float* weight, const float* bias, int N, int C) {
  std::vector<float> row(static_cast<size_t>(C));
  for (int n = 0; n < N; n++) {
    LayerNormForward(row.data(), mean + n, rstd + n, inp + static_cast<size_t>(n) * C, weight, bias, 1, C);
    for (int i = 0; i < C; i++) out[static_cast<size_t>(n) * C + i] = F32ToBF16(row[i]);
  }
}

void CpuReferenceBackend::LayerNormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                                            const float* inp, const float* weight, const float* mean,
                                            const float* rstd, int N, int C) {
  for (int n = 0; n < N; n++) {
    const float* dy = dout + static_cast<size_t>(n) * C;
    const float* x = inp + static_cast<size_t>(n) * C;
    float* dx = dinp + static_cast<size_t>(n) * C;
    float m = mean[n], s = rstd[n];
    // two reductions: mean of dnorm and mean of dnorm * norm
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
    for (int i = 0; i < C; i++) {
      float norm = (x[i] - m) * s;
      float dnorm = weight[i] * dy[i];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean /= C;
    dnorm_norm_mean /= C;
    for (int i = 0; i < C; i++) {
      float norm = (x[i] - m) * s;
      float dnorm = weight[i] * dy[i];
      dbias[i] += dy[i];
      dweight[i] += norm * dy[i];
      dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
  }
}

void CpuReferenceBackend::Matmul(float* c, Operand a, Operand b, const float* bias, int M, int N, int K,
                                 bool trans_a, bool trans_b, float beta, Compute compute) {
  for (int m = 0; m < M; m++) {
    for (int n = 0; n < N; n++) {
      double acc = 0.0;
      for (int k = 0; k < K; k++) {
        size_t ia = trans_a ? static_cast<size_t>(k) * M + m : static_cast<size_t>(m) * K + k;
        size_t ib = trans_b ? static_cast<size_t>(n) * K + k : static_cast<size_t>(k) * N + n;
        acc += static_cast<double>(OperandAt(a, ia, compute)) * OperandAt(b, ib, compute);
      }
      if (bias) acc += bias[n];
      float* cmn = c + static_cast<size_t>(m) * N + n;
      *cmn = static_cast<float>(beta == 0.0f ? acc : beta * *cmn + acc);
    }
  }
}

void CpuReferenceBackend::BiasBackward(float* dbias, const float* dout, int N, int OC) {
  for (int o = 0; o < OC; o++) {
    double sum = 0.0;
    for (int n = 0; n < N; n++) sum += dout[static_cast<size_t>(n) * OC + o];
    dbias[o] += static_cast<float>(sum);
  }
}

namespace {
float Gelu(float x) {
  const float cube = 0.044715f * x * x * x;
  return 0.5f * x * (1.0f + std::tanh(kGeluScale * (x + cube)));
}
}  // namespace

void CpuReferenceBackend::GeluForward(float* out, const float* inp, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = Gelu(inp[i]);
}

void CpuReferenceBackend::GeluForwardBF16(uint16_t* out, const float* inp, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = F32ToBF16(Gelu(inp[i]));
}

void CpuReferenceBackend::GeluBackward(float* dinp, const float* inp, const float* dout, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float x = inp[i];
    float cube = 0.044715f * x * x * x;
    float tanh_arg = kGeluScale * (x + cube);
    float tanh_out = std::tanh(tanh_arg);
    float cosh_out = std::cosh(tanh_arg);
    float sech_out = 1.0f / (cosh_out * cosh_out);
    float local_grad =
        0.5f * (1.0f + tanh_out) + x * 0.5f * sech_out * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = local_grad * dout[i];
  }
}

void CpuReferenceBackend::Add(float* out, const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void CpuReferenceBackend::AttentionForward(float* out, void* state, const float* qkv, int B, int T, int C,
                                           int NH, Compute /*compute: fp32 always*/) {
  float* att = static_cast<float*>(state);  // the naive kind only: att[B,NH,T,T]
  const int C3 = 3 * C, hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      for (int h = 0; h < NH; h++) {
        const float* q = qkv + (static_cast<size_t>(b) * T + t) * C3 + h * hs;
        float* att_bth = att + ((static_cast<size_t>(b) * NH + h) * T + t) * T;
        // pass 1: scores and their max
        float maxval = -INFINITY;
        for (int t2 = 0; t2 <= t; t2++) {
          const float* k = qkv + (static_cast<size_t>(b) * T + t2) * C3 + h * hs + C;
          float dot = 0.0f;
          for (int i = 0; i < hs; i++) dot += q[i] * k[i];
          dot *= scale;
          att_bth[t2] = dot;
          if (dot > maxval) maxval = dot;
        }
        // pass 2: softmax over the causal row
        float expsum = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) {
          float e = std::exp(att_bth[t2] - maxval);
          att_bth[t2] = e;
          expsum += e;
        }
        float inv = 1.0f / expsum;
        for (int t2 = 0; t2 < T; t2++) att_bth[t2] = t2 <= t ? att_bth[t2] * inv : 0.0f;
        // pass 3: weighted sum of values
        float* o = out + (static_cast<size_t>(b) * T + t) * C + h * hs;
        for (int i = 0; i < hs; i++) o[i] = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) {
          const float* v = qkv + (static_cast<size_t>(b) * T + t2) * C3 + h * hs + 2 * C;
          for (int i = 0; i < hs; i++) o[i] += att_bth[t2] * v[i];
        }
      }
    }
  }
}

void CpuReferenceBackend::AttentionBackward(float* dqkv, void* scratch, const float* dout, const float* qkv,
                                            const float* /*out*/, const void* state, int B, int T, int C,
                                            int NH, Compute /*compute*/) {
  const float* att = static_cast<const float*>(state);
  float* datt = static_cast<float*>(scratch);
  const int C3 = 3 * C, hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  std::memset(dqkv, 0, sizeof(float) * B * T * C3);
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      for (int h = 0; h < NH; h++) {
        const float* att_bth = att + ((static_cast<size_t>(b) * NH + h) * T + t) * T;
        float* datt_bth = datt + ((static_cast<size_t>(b) * NH + h) * T + t) * T;
        const float* q = qkv + (static_cast<size_t>(b) * T + t) * C3 + h * hs;
        float* dq = dqkv + (static_cast<size_t>(b) * T + t) * C3 + h * hs;
        const float* dy = dout + (static_cast<size_t>(b) * T + t) * C + h * hs;
        // backward through the weighted sum of values
        for (int t2 = 0; t2 <= t; t2++) {
          const float* v = qkv + (static_cast<size_t>(b) * T + t2) * C3 + h * hs + 2 * C;
          float* dv = dqkv + (static_cast<size_t>(b) * T + t2) * C3 + h * hs + 2 * C;
          float d = 0.0f;
          for (int i = 0; i < hs; i++) {
            d += v[i] * dy[i];
            dv[i] += att_bth[t2] * dy[i];
          }
          datt_bth[t2] = d;
        }
        // softmax backward: dpre[t3] = att[t3] * (datt[t3] - sum_t2 att[t2] * datt[t2])
        float dot = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) dot += att_bth[t2] * datt_bth[t2];
        for (int t2 = 0; t2 <= t; t2++) datt_bth[t2] = att_bth[t2] * (datt_bth[t2] - dot);
        // backward through q . k * scale
        for (int t2 = 0; t2 <= t; t2++) {
          const float* k = qkv + (static_cast<size_t>(b) * T + t2) * C3 + h * hs + C;
          float* dk = dqkv + (static_cast<size_t>(b) * T + t2) * C3 + h * hs + C;
          float g = datt_bth[t2] * scale;
          for (int i = 0; i < hs; i++) {
            dq[i] += k[i] * g;
            dk[i] += q[i] * g;
          }
        }
      }
    }
  }
}

void CpuReferenceBackend::CrossEntropyForwardBackward(float* losses, float* logits, const int32_t* targets,
                                                      int N, int V, float dloss) {
  for (int n = 0; n < N; n++) {
    float* row = logits + static_cast<size_t>(n) * V;
    int target = targets[n];
    float maxval = -INFINITY;
    for (int i = 0; i < V; i++) maxval = row[i] > maxval ? row[i] : maxval;
    double sum = 0.0;
    for (int i = 0; i < V; i++) sum += std::exp(static_cast<double>(row[i] - maxval));
    float logsum = static_cast<float>(std::log(sum));
    losses[n] = target < 0 ? 0.0f : -(row[target] - maxval - logsum);
    if (dloss != 0.0f) {
      for (int i = 0; i < V; i++) {
        float p = std::exp(row[i] - maxval - logsum);
        float indicator = i == target ? 1.0f : 0.0f;
        row[i] = target < 0 ? 0.0f : (p - indicator) * dloss;
      }
    }
  }
}

// The fp32 op on each widened row, its gradient rounded back over the row.
void CpuReferenceBackend::CrossEntropyForwardBackwardBF16(float* losses, uint16_t* logits,
                                                          const int32_t* targets, int N, int V, float dloss) {
  std::vector<float> row(static_cast<size_t>(V));
  for (int n = 0; n < N; n++) {
    uint16_t* h = logits + static_cast<size_t>(n) * V;
    for (int i = 0; i < V; i++) row[i] = BF16ToF32(h[i]);
    CrossEntropyForwardBackward(losses + n, row.data(), targets + n, 1, V, dloss);
    if (dloss != 0.0f)
      for (int i = 0; i < V; i++) h[i] = F32ToBF16(row[i]);
  }
}

double CpuReferenceBackend::SumSquares(const float* x, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += static_cast<double>(x[i]) * x[i];
  return s;
}

double CpuReferenceBackend::Sum(const float* x, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += x[i];
  return s;
}

void CpuReferenceBackend::AdamW(float* param, uint16_t* param_bf16, const float* grad, float* m, float* v,
                                size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                                float grad_scale, int t) {
  float bc1 = 1.0f - std::pow(beta1, static_cast<float>(t));
  float bc2 = 1.0f - std::pow(beta2, static_cast<float>(t));
  for (size_t i = 0; i < n; i++) {
    float g = grad[i] * grad_scale;
    m[i] = beta1 * m[i] + (1.0f - beta1) * g;
    v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
    float m_hat = m[i] / bc1;
    float v_hat = v[i] / bc2;
    param[i] -= lr * (m_hat / (std::sqrt(v_hat) + eps) + weight_decay * param[i]);
    if (param_bf16) param_bf16[i] = F32ToBF16(param[i]);
  }
}

void CpuReferenceBackend::CastF32ToBF16(uint16_t* dst, const float* src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = F32ToBF16(src[i]);
}

Capabilities CpuReferenceBackend::capabilities() const {
  Capabilities c;
  c.host_addressable_memory = true;
  c.int4_weights = true;
  c.kv_dtypes = {DType::kF32, DType::kBF16, DType::kI8};
  return c;
}

std::unique_ptr<Backend> MakeCpuReferenceBackend() {
  return std::make_unique<CpuReferenceBackend>();
}

}  // namespace tern
