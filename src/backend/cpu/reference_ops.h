// The plain reference implementation of every op: single-threaded, no intrinsics, written to be read
// (a port of llm.c's train_gpt2.c). It is the oracle every faster backend is tested against.
#pragma once

#include "backend/cpu/cpu_memory.h"

namespace tern {

class CpuReferenceBackend : public CpuMemoryBackend {
 public:
  std::string name() const override { return "cpu-ref"; }
  // Host memory, every KV cache dtype, the naive attention; no fp16 matmul (WithF16Emulation adds it).
  Capabilities capabilities() const override;

  void EncoderForward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B, int T,
                      int C) override;
  void EncoderBackward(float* dwte, float* dwpe, const float* dout, const int32_t* inp,
                       const int32_t* host_inp, int B, int T, int C) override;
  void LayerNormForward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                        const float* bias, int N, int C) override;
  void LayerNormForwardBF16(uint16_t* out, float* mean, float* rstd, const float* inp, const float* weight,
                            const float* bias, int N, int C) override;
  void LayerNormBackward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                         const float* weight, const float* mean, const float* rstd, int N, int C) override;
  void Matmul(float* c, Operand a, Operand b, const float* bias, int M, int N, int K, bool trans_a,
              bool trans_b, float beta, Compute compute) override;
  void BiasBackward(float* dbias, const float* dout, int N, int OC) override;
  void GeluForward(float* out, const float* inp, size_t n) override;
  void GeluForwardBF16(uint16_t* out, const float* inp, size_t n) override;
  void GeluBackward(float* dinp, const float* inp, const float* dout, size_t n) override;
  void Add(float* out, const float* a, const float* b, size_t n) override;
  void AttentionForward(float* out, void* state, const float* qkv, int B, int T, int C, int NH,
                        Compute compute) override;
  void AttentionBackward(float* dqkv, void* scratch, const float* dout, const float* qkv, const float* out,
                         const void* state, int B, int T, int C, int NH, Compute compute) override;
  void CrossEntropyForwardBackward(float* losses, float* logits, const int32_t* targets, int N, int V,
                                   float dloss) override;
  void CrossEntropyForwardBackwardBF16(float* losses, uint16_t* logits, const int32_t* targets, int N, int V,
                                       float dloss) override;
  double SumSquares(const float* x, size_t n) override;
  double Sum(const float* x, size_t n) override;
  void AdamW(float* param, uint16_t* param_bf16, const float* grad, float* m, float* v, size_t n, float lr,
             float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t) override;
  void CastF32ToBF16(uint16_t* dst, const float* src, size_t n) override;

  // Inference ops (infer/), in reference_inference_ops.cpp.
  void EmbedTokens(float* out, const int32_t* tokens, const int32_t* positions, const float* wte,
                   const float* wpe, int N, int C) override;
  void EmbedTokensBF16(float* out, const int32_t* tokens, const int32_t* positions, const uint16_t* wte,
                       const float* wpe, int N, int C) override;
  void KvCacheWrite(void* k_cache, void* v_cache, DType kv_dtype, const float* qkv, const int32_t* slots,
                    int N, int C, int NH, int bs) override;
  void PagedAttentionForward(float* out, const float* qkv, const void* k_cache, const void* v_cache,
                             DType kv_dtype, const int32_t* seqs, const int32_t* block_tables, int S,
                             int max_blocks, int N, int C, int NH, int bs) override;
  void MatmulInt8(float* out, const float* inp, const int8_t* w, const float* w_scale, const float* bias,
                  int N, int OC, int K) override;
  void MatmulInt4(float* out, const float* inp, const uint8_t* w, const float* w_scale, const float* bias,
                  int N, int OC, int K) override;
};

}  // namespace tern
