// The base of a backend decorator: a Backend that owns another one and forwards every virtual of backend.h
// to it, unchanged. A decorator (cpu/f16_emulation.h today; a profiler or a fault injector later) derives
// from it and overrides only the calls it changes, calling inner() for the rest of the work.
//
// This is the one place that restates the interface: a virtual added to Backend gets its forwarding line
// here (a pure one is a compile error until it has it; forwarding_backend_test.cpp checks the defaulted
// ones).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"

namespace tern {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

  Backend* inner() const { return inner_.get(); }

  std::string name() const override { return inner_->name(); }
  Capabilities capabilities() const override { return inner_->capabilities(); }
  std::string PciBusId() const override { return inner_->PciBusId(); }
  void* native_stream() const override { return inner_->native_stream(); }
  bool SetAttentionKernel(const std::string& kind) override { return inner_->SetAttentionKernel(kind); }
  AttentionKind attention_kind() const override { return inner_->attention_kind(); }

  void* Alloc(size_t bytes) override { return inner_->Alloc(bytes); }
  void Free(void* ptr) override { inner_->Free(ptr); }
  void Upload(void* dst, const void* src, size_t bytes) override { inner_->Upload(dst, src, bytes); }
  void Download(void* dst, const void* src, size_t bytes) override { inner_->Download(dst, src, bytes); }
  void Copy(void* dst, const void* src, size_t bytes) override { inner_->Copy(dst, src, bytes); }
  void Zero(void* dst, size_t bytes) override { inner_->Zero(dst, bytes); }
  void Synchronize() override { inner_->Synchronize(); }
  void PrepareThread() override { inner_->PrepareThread(); }

  void EncoderForward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B, int T,
                      int C) override {
    inner_->EncoderForward(out, inp, wte, wpe, B, T, C);
  }
  void EncoderBackward(float* dwte, float* dwpe, const float* dout, const int32_t* inp,
                       const int32_t* host_inp, int B, int T, int C) override {
    inner_->EncoderBackward(dwte, dwpe, dout, inp, host_inp, B, T, C);
  }
  void LayerNormForward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                        const float* bias, int N, int C) override {
    inner_->LayerNormForward(out, mean, rstd, inp, weight, bias, N, C);
  }
  void LayerNormBackward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                         const float* weight, const float* mean, const float* rstd, int N, int C) override {
    inner_->LayerNormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }
  void Matmul(float* c, Operand a, Operand b, const float* bias, int M, int N, int K, bool trans_a,
              bool trans_b, float beta, Compute compute) override {
    inner_->Matmul(c, a, b, bias, M, N, K, trans_a, trans_b, beta, compute);
  }
  void MatmulGelu(float* out, float* pre, Operand a, Operand b, const float* bias, int M, int N, int K,
                  bool trans_a, bool trans_b, Compute compute) override {
    inner_->MatmulGelu(out, pre, a, b, bias, M, N, K, trans_a, trans_b, compute);
  }
  void MatmulGeluBF16(uint16_t* out, float* pre, Operand a, Operand b, const float* bias, int M, int N, int K,
                      bool trans_a, bool trans_b, Compute compute) override {
    inner_->MatmulGeluBF16(out, pre, a, b, bias, M, N, K, trans_a, trans_b, compute);
  }
  void LayerNormForwardBF16(uint16_t* out, float* mean, float* rstd, const float* inp, const float* weight,
                            const float* bias, int N, int C) override {
    inner_->LayerNormForwardBF16(out, mean, rstd, inp, weight, bias, N, C);
  }
  void ResidualLayerNormForward(float* residual, float* out, float* mean, float* rstd, const float* a,
                                const float* b, const float* weight, const float* bias, int N,
                                int C) override {
    inner_->ResidualLayerNormForward(residual, out, mean, rstd, a, b, weight, bias, N, C);
  }
  void ResidualLayerNormForwardBF16(float* residual, uint16_t* out, float* mean, float* rstd, const float* a,
                                    const float* b, const float* weight, const float* bias, int N,
                                    int C) override {
    inner_->ResidualLayerNormForwardBF16(residual, out, mean, rstd, a, b, weight, bias, N, C);
  }
  void MatmulToBF16(uint16_t* c, Operand a, Operand b, const float* bias, int M, int N, int K, bool trans_a,
                    bool trans_b, Compute compute) override {
    inner_->MatmulToBF16(c, a, b, bias, M, N, K, trans_a, trans_b, compute);
  }
  void MatmulDGelu(float* dinp, const float* pre, Operand a, Operand b, int M, int N, int K, bool trans_a,
                   bool trans_b, Compute compute) override {
    inner_->MatmulDGelu(dinp, pre, a, b, M, N, K, trans_a, trans_b, compute);
  }
  void BiasBackward(float* dbias, const float* dout, int N, int OC) override {
    inner_->BiasBackward(dbias, dout, N, OC);
  }
  void GeluForward(float* out, const float* inp, size_t n) override { inner_->GeluForward(out, inp, n); }
  void GeluForwardBF16(uint16_t* out, const float* inp, size_t n) override {
    inner_->GeluForwardBF16(out, inp, n);
  }
  void GeluBackward(float* dinp, const float* inp, const float* dout, size_t n) override {
    inner_->GeluBackward(dinp, inp, dout, n);
  }
  void Add(float* out, const float* a, const float* b, size_t n) override { inner_->Add(out, a, b, n); }
  void AttentionForward(float* out, void* state, const float* qkv, int B, int T, int C, int NH,
                        Compute compute) override {
    inner_->AttentionForward(out, state, qkv, B, T, C, NH, compute);
  }
  void AttentionBackward(float* dqkv, void* scratch, const float* dout, const float* qkv, const float* out,
                         const void* state, int B, int T, int C, int NH, Compute compute) override {
    inner_->AttentionBackward(dqkv, scratch, dout, qkv, out, state, B, T, C, NH, compute);
  }
  void AttentionForwardBF16(uint16_t* out, void* state, const uint16_t* qkv, int B, int T, int C, int NH,
                            Compute compute) override {
    inner_->AttentionForwardBF16(out, state, qkv, B, T, C, NH, compute);
  }
  void AttentionBackwardBF16(float* dqkv, void* scratch, const float* dout, const uint16_t* qkv,
                             const uint16_t* out, const void* state, int B, int T, int C, int NH,
                             Compute compute) override {
    inner_->AttentionBackwardBF16(dqkv, scratch, dout, qkv, out, state, B, T, C, NH, compute);
  }
  void CrossEntropyForwardBackward(float* losses, float* logits, const int32_t* targets, int N, int V,
                                   float dloss) override {
    inner_->CrossEntropyForwardBackward(losses, logits, targets, N, V, dloss);
  }
  void CrossEntropyForwardBackwardBF16(float* losses, uint16_t* logits, const int32_t* targets, int N, int V,
                                       float dloss) override {
    inner_->CrossEntropyForwardBackwardBF16(losses, logits, targets, N, V, dloss);
  }
  double SumSquares(const float* x, size_t n) override { return inner_->SumSquares(x, n); }
  double Sum(const float* x, size_t n) override { return inner_->Sum(x, n); }
  void AccumulateMean(double* acc, const float* x, size_t n, double divisor) override {
    inner_->AccumulateMean(acc, x, n, divisor);
  }
  void AdamW(float* param, uint16_t* param_bf16, const float* grad, float* m, float* v, size_t n, float lr,
             float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t) override {
    inner_->AdamW(param, param_bf16, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale, t);
  }
  void CastF32ToBF16(uint16_t* dst, const float* src, size_t n) override {
    inner_->CastF32ToBF16(dst, src, n);
  }

  void EmbedTokens(float* out, const int32_t* tokens, const int32_t* positions, const float* wte,
                   const float* wpe, int N, int C) override {
    inner_->EmbedTokens(out, tokens, positions, wte, wpe, N, C);
  }
  void EmbedTokensBF16(float* out, const int32_t* tokens, const int32_t* positions, const uint16_t* wte,
                       const float* wpe, int N, int C) override {
    inner_->EmbedTokensBF16(out, tokens, positions, wte, wpe, N, C);
  }
  void KvCacheWrite(void* k_cache, void* v_cache, DType kv_dtype, const float* qkv, const int32_t* slots,
                    int N, int C, int NH, int bs) override {
    inner_->KvCacheWrite(k_cache, v_cache, kv_dtype, qkv, slots, N, C, NH, bs);
  }
  void PagedAttentionForward(float* out, const float* qkv, const void* k_cache, const void* v_cache,
                             DType kv_dtype, const int32_t* seqs, const int32_t* block_tables, int S,
                             int max_blocks, int N, int C, int NH, int bs) override {
    inner_->PagedAttentionForward(out, qkv, k_cache, v_cache, kv_dtype, seqs, block_tables, S, max_blocks, N,
                                  C, NH, bs);
  }
  void MatmulBF16(float* out, const float* inp, const uint16_t* w, const float* bias, int N, int OC, int K,
                  bool row_independent = true) override {
    inner_->MatmulBF16(out, inp, w, bias, N, OC, K, row_independent);
  }
  void MatmulF32Weights(float* out, const float* inp, const float* w, const float* bias, int N, int OC,
                        int K) override {
    inner_->MatmulF32Weights(out, inp, w, bias, N, OC, K);
  }
  void MatmulInt8(float* out, const float* inp, const int8_t* w, const float* w_scale, const float* bias,
                  int N, int OC, int K) override {
    inner_->MatmulInt8(out, inp, w, w_scale, bias, N, OC, K);
  }
  void MatmulInt4(float* out, const float* inp, const uint8_t* w, const float* w_scale, const float* bias,
                  int N, int OC, int K) override {
    inner_->MatmulInt4(out, inp, w, w_scale, bias, N, OC, K);
  }

 private:
  std::unique_ptr<Backend> inner_;
};

}  // namespace tern
