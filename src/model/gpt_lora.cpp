// The model's LoRA parts (model/lora.h says how): the merged matrices of one layer, the adapters' weight
// gradients, and the merged export. Without LoRA every function here is the plain path.
#include <algorithm>
#include <cassert>

#include "model/gpt.h"

namespace tern {

Gpt::LoraParts Gpt::Parts() const {
  LoraParts p;
  if (!lora_.enabled()) return p;
  // The order and sizes of LoraScratchFloats.
  float* base = lora_scratch_.as<float>();
  size_t merged = 0;
  for (size_t i = 0; i < lora_matrices_.size(); i++) {
    p.merged[i] = base + merged;
    merged += lora_matrices_[i].per_layer();
  }
  size_t off = merged;
  if (compute_ == Compute::kBF16) {
    auto* b16 = reinterpret_cast<uint16_t*>(base + off);
    size_t e = 0;
    for (size_t i = 0; i < lora_matrices_.size(); i++) {
      p.merged_bf16[i] = b16 + e;
      e += lora_matrices_[i].per_layer();
    }
    off += (merged + 1) / 2;
  }
  const size_t r = lora_.rank;
  for (size_t i = 0; i < lora_matrices_.size(); i++) {
    p.sa[i] = base + off;
    off += r * lora_matrices_[i].in;
    p.sb[i] = base + off;
    off += r * lora_matrices_[i].out;
  }
  p.s_eye = base + off;
  off += r * r;
  p.ln_sink = base + off;
  off += 2 * static_cast<size_t>(config_.n_embd);
  p.xa = base + off;
  off += r * static_cast<size_t>(max_B_) * max_T_;
  p.gb = base + off;
  return p;
}

int Gpt::LoraIndex(const char* name) const {
  for (size_t i = 0; i < lora_matrices_.size(); i++)
    if (lora_matrices_[i].base == name) return static_cast<int>(i);
  return -1;
}

Operand Gpt::LW(const char* name, int l, size_t per_layer) const {
  const int i = LoraIndex(name);
  if (i < 0) return W(name, static_cast<size_t>(l) * per_layer);
  assert(merged_layer_ == l && "LW before MergeLayer(l)");
  const LoraParts p = Parts();
  if (compute_ == Compute::kBF16) return BF16(p.merged_bf16[i]);
  return F32(p.merged[i]);
}

// W' = W + B (s A): s A = (s I) A and B s = B (s I) (kept for the backward), a copy of W, then the rank-r
// product added (beta 1). Every product is fp32 whatever the training precision (the adapters are small);
// under bf16 compute the merged matrix is then rounded to bf16 as the weights' copy would be.
void Gpt::MergeLayer(int l) {
  if (!lora_.enabled() || merged_layer_ == l) return;
  const LoraParts p = Parts();
  const int r = lora_.rank;
  for (size_t i = 0; i < lora_matrices_.size(); i++) {
    const LoraMatrix& m = lora_matrices_[i];
    const float* A = P(("lora_a." + m.base).c_str()) + static_cast<size_t>(l) * r * m.in;
    const float* B = P(("lora_b." + m.base).c_str()) + static_cast<size_t>(l) * m.out * r;
    backend_->Matmul(p.sa[i], F32(p.s_eye), F32(A), nullptr, r, m.in, r, false, false, 0.0f, Compute::kF32);
    backend_->Matmul(p.sb[i], F32(B), F32(p.s_eye), nullptr, m.out, r, r, false, false, 0.0f, Compute::kF32);
    backend_->Copy(p.merged[i], P(m.base.c_str()) + static_cast<size_t>(l) * m.per_layer(),
                   m.per_layer() * sizeof(float));
    backend_->Matmul(p.merged[i], F32(B), F32(p.sa[i]), nullptr, m.out, m.in, r, false, false, 1.0f,
                     Compute::kF32);
    if (compute_ == Compute::kBF16) backend_->CastF32ToBF16(p.merged_bf16[i], p.merged[i], m.per_layer());
  }
  merged_layer_ = l;
}

// dB += dout^T (inp (sA)^T) and dA += (dout (Bs))^T inp: four products with r as one dimension, at the
// training precision (bf16 operands under bf16 compute, as the weight-gradient GEMM they replace), fp32
// accumulation.
void Gpt::WeightGrad(const char* name, int l, Operand dout, Operand inp, int out, int in, int rows,
                     float beta) {
  const size_t per_layer = static_cast<size_t>(out) * in;
  if (!lora_.enabled()) {
    backend_->Matmul(G(name) + static_cast<size_t>(l) * per_layer, dout, inp, nullptr, out, in, rows, true,
                     false, beta, compute_);
    return;
  }
  const int i = LoraIndex(name);
  if (i < 0) return;  // frozen and not adapted
  assert(merged_layer_ == l);
  const LoraParts p = Parts();
  const int r = lora_.rank;
  const LoraMatrix& m = lora_matrices_[i];
  float* dA = G(("lora_a." + m.base).c_str()) + static_cast<size_t>(l) * r * m.in;
  float* dB = G(("lora_b." + m.base).c_str()) + static_cast<size_t>(l) * m.out * r;
  backend_->Matmul(p.xa, inp, F32(p.sa[i]), nullptr, rows, r, in, false, true, 0.0f, compute_);
  backend_->Matmul(dB, dout, F32(p.xa), nullptr, out, r, rows, true, false, 1.0f, compute_);
  backend_->Matmul(p.gb, dout, F32(p.sb[i]), nullptr, rows, r, out, false, false, 0.0f, compute_);
  backend_->Matmul(dA, F32(p.gb), inp, nullptr, r, in, rows, true, false, 1.0f, compute_);
}

std::vector<float> Gpt::ExportParameters() {
  if (!lora_.enabled()) return GetParameters();
  std::vector<float> host(num_base_params_);
  backend_->Download(host.data(), params(), num_base_params_ * sizeof(float));
  const int L = config_.n_layer;
  for (int l = 0; l < L; l++) {
    MergeLayer(l);
    const LoraParts p = Parts();
    for (size_t i = 0; i < lora_matrices_.size(); i++) {
      const LoraMatrix& m = lora_matrices_[i];
      size_t offset = 0;
      for (const auto& t : layout_)
        if (t.name == m.base) offset = t.offset;
      backend_->Download(host.data() + offset + static_cast<size_t>(l) * m.per_layer(), p.merged[i],
                         m.per_layer() * sizeof(float));
    }
  }
  return host;
}

}  // namespace tern
