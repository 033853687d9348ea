// The fast CPU backend ("cpu"): every op of the reference backend again, OpenMP-parallel and vectorised,
// with oneDNN matmuls (fp32, and bf16×bf16→fp32). Results match the reference within float rounding
// (fast_ops_test.cpp states the bounds).
//
// Determinism: every op gives bit-identical results run after run for the same OMP_NUM_THREADS (static
// schedules, per-thread partials combined in a fixed order, no atomics). EncoderBackward, BiasBackward,
// Sum and SumSquares are even independent of the thread count. The thread count is never set here.
//
// Like the reference, the backend is not thread-safe: one caller at a time (it owns scratch buffers and a
// cache of oneDNN primitives).
#pragma once

#include <memory>

#include "backend/cpu/fast_math.h"
#include "backend/cpu/reference_ops.h"

namespace tern {

class DnnlMatmul;

class CpuFastBackend : public CpuReferenceBackend {
 public:
  CpuFastBackend();
  ~CpuFastBackend() override;
  std::string name() const override { return "cpu"; }
  // The reference's: host memory, every KV cache dtype; no fp16 matmul; naive and flash attention.
  Capabilities capabilities() const override;
  // "flash" keeps each score row's maximum and 1/sum instead of the probabilities and recomputes them in the
  // backward, bit for bit as the naive kernel computed them (fast_attention.cpp).
  bool SetAttentionKernel(const std::string& kind) override;
  AttentionKind attention_kind() const override { return attention_kind_; }
  void PrepareThread() override;

  void EncoderForward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B, int T,
                      int C) override;
  void EncoderBackward(float* dwte, float* dwpe, const float* dout, const int32_t* inp,
                       const int32_t* host_inp, int B, int T, int C) override;
  void LayerNormForward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                        const float* bias, int N, int C) override;
  void LayerNormForwardBF16(uint16_t* out, float* mean, float* rstd, const float* inp, const float* weight,
                            const float* bias, int N, int C) override;
  void ResidualLayerNormForward(float* residual, float* out, float* mean, float* rstd, const float* a,
                                const float* b, const float* weight, const float* bias, int N,
                                int C) override;
  void ResidualLayerNormForwardBF16(float* residual, uint16_t* out, float* mean, float* rstd, const float* a,
                                    const float* b, const float* weight, const float* bias, int N,
                                    int C) override;
  void LayerNormBackward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                         const float* weight, const float* mean, const float* rstd, int N, int C) override;
  void Matmul(float* c, Operand a, Operand b, const float* bias, int M, int N, int K, bool trans_a,
              bool trans_b, float beta, Compute compute) override;
  void MatmulToBF16(uint16_t* c, Operand a, Operand b, const float* bias, int M, int N, int K, bool trans_a,
                    bool trans_b, Compute compute) override;
  void BiasBackward(float* dbias, const float* dout, int N, int OC) override;
  void GeluForward(float* out, const float* inp, size_t n) override;
  void GeluForwardBF16(uint16_t* out, const float* inp, size_t n) override;
  void GeluBackward(float* dinp, const float* inp, const float* dout, size_t n) override;
  void Add(float* out, const float* a, const float* b, size_t n) override;
  void AttentionForward(float* out, void* state, const float* qkv, int B, int T, int C, int NH,
                        Compute compute) override;
  void AttentionForwardBF16(uint16_t* out, void* state, const uint16_t* qkv, int B, int T, int C, int NH,
                            Compute compute) override;
  void AttentionBackwardBF16(float* dqkv, void* scratch, const float* dout, const uint16_t* qkv,
                             const uint16_t* out, const void* state, int B, int T, int C, int NH,
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

  // Inference ops (infer/): fast_paged_attention.cpp, int8_matmul.cpp, bf16_matmul.cpp and f32_matmul.cpp.
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
  // int4_matmul.cpp: vpdpbusd over nibbles unpacked in registers (AVX-512 VNNI), else the reference.
  void MatmulInt4(float* out, const float* inp, const uint8_t* w, const float* w_scale, const float* bias,
                  int N, int OC, int K) override;

  // bf16_matmul.cpp: AMX tiles where granted, else vdpbf16ps tiles on CPUs with AVX512-BF16, else FMA tiles
  // on widened bf16. row_independent = false (an engine of one stream): vdpbf16ps below kBf16AmxMinRows rows.
  void MatmulBF16(float* out, const float* inp, const uint16_t* w, const float* bias, int N, int OC, int K,
                  bool row_independent = true) override;
  // f32_matmul.cpp: FMA tiles over fp32 weights, each weight read once per row tile, prefetched ahead.
  void MatmulF32Weights(float* out, const float* inp, const float* w, const float* bias, int N, int OC,
                        int K) override;

  // The oneDNN matmul (for tests and benchmarks: implementation names, cache size).
  DnnlMatmul& dnnl() { return *dnnl_; }

 private:
  std::unique_ptr<DnnlMatmul> dnnl_;
  fast::Scratch operand_a_, operand_b_;  // matmul operands converted to the compute type
  fast::Scratch widened_a_, widened_b_;  // bf16 operands widened to fp32 where oneDNN has no bf16 kernel
  fast::Scratch transposed_c_;           // Matmul: the product transposed, for long reductions (fp32)
  fast::Scratch transposed_a16_;         // Matmul: blocks of a bf16 A transposed (weight gradients, bf16)
  fast::Scratch product_;                // MatmulToBF16 without a bf16 kernel: the fp32 product
  fast::Scratch loss_rows_;              // CrossEntropyForwardBackwardBF16: per-thread widened rows
  fast::Scratch partials_;               // per-thread / per-chunk partial sums
  fast::Scratch attention_;              // per-thread packed q, k, v tiles
  fast::Scratch paged_scores_;           // PagedAttentionForward: per-thread attention scores
  fast::Scratch int8_acts_;              // MatmulInt8: quantised activations, row scales and sums
  fast::Scratch bf16_acts_;              // MatmulBF16: activations rounded to bf16
  AttentionKind attention_kind_ = AttentionKind::kNaive;
};

}  // namespace tern
