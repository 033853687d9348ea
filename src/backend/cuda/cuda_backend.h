// The CUDA backend: every op of backend.h on one NVIDIA GPU, on one stream.
//
// Memory: Alloc is cudaMalloc + a zero fill (the model allocates everything at construction). The
// backend also owns a few scratch buffers (bf16 copies of matmul operands, attention operands,
// reduction partials) that grow to the largest size a config asks for during the first step and are
// then reused: no allocation in the steady-state training step.
//
// Kernel families live in one file each (matmul_cublaslt.cu, layernorm.cu, gelu.cu, residual.cu,
// attention.cu, cross_entropy.cu, encoder.cu, adamw.cu, reduce.cu, cast.cu, and for serving
// paged_attention.cu, matmul_int8.cu); each defines the CudaBackend members for its ops. See README.md
// for the design notes and the precision of each op.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_api.h"

namespace tern {
namespace cuda {

// The cuBLAS element type of a GEMM's operands for a compute type (matmul_cublaslt.cu).
cudaDataType_t GemmType(Compute c);

// Backend-owned scratch, one buffer per purpose so that uses never alias within an op.
enum class Scratch : int {
  kMatmulA,
  kMatmulB,  // operand conversions for Matmul
  kAttnQkv,
  kAttnDout,  // bf16 copies of qkv and dout for the attention GEMMs
  kAttnP,
  kAttnDp,       // bf16 probabilities and their gradient, one batch row at a time
  kPartials,     // column-reduction partial sums (bias and layernorm parameter gradients)
  kReduce,       // Sum / SumSquares block partials (double)
  kEncoder,      // encoder-backward buckets
  kInt8Act,      // MatmulInt8: per-row activation scales and int8 activations
  kPagedScores,  // PagedAttentionForward: scores beyond the shared-memory limit (long contexts)
  kAttnWide,  // AttentionForwardBF16 / BackwardBF16 computing in fp32 (TERN_CUDA_ATTENTION=fp32): qkv widened
  kAttnOut,   // AttentionForwardBF16, naive kernel: the fp32 output before its rounding; cudnn through
              // the fp32 interface: the bf16 output
  kCudnnWorkspace,  // train.attention=cudnn: the cuDNN plan's workspace
  kMatmulOut,       // MatmulToBF16 with a bias that cuBLASLt declines: the fp32 product before its rounding
  kCount
};

// Backend-owned pinned host buffers, one per purpose: the host writes one only after the asynchronous copies
// that last read it have run (CudaBackend::PinnedForWrite).
enum class PinnedSlot : int {
  kReduce,   // Sum / SumSquares results (read after a synchronisation)
  kEncoder,  // encoder-backward buckets, uploaded without waiting
  kUpload0,
  kUpload1,  // Upload's staging, used in turn
  kCount
};

// train.attention=cudnn's graphs and cuDNN handle (attention_cudnn.cu).
struct CudnnAttention;
}  // namespace cuda
namespace cudnn {
class Graph;  // cudnn_graph.h
}  // namespace cudnn
namespace cuda {
struct CudnnAttentionDeleter {
  void operator()(CudnnAttention* p) const;
};

// A cached cuBLASLt plan for one matmul shape.
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool usable = false;  // false: cuBLASLt offered no algorithm; use the cublasGemmEx fallback
};

}  // namespace cuda

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(int device = 0);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return name_; }
  // Device memory; native fp16 (CUDA_R_16F GEMMs through cuBLASLt); fp32 and bf16 KV caches; naive and
  // flash attention, and cuDNN's fused attention where cuDNN 9 loads.
  Capabilities capabilities() const override;
  std::string PciBusId() const override { return pci_bus_id_; }
  void* native_stream() const override { return stream_; }
  bool SetAttentionKernel(const std::string& kind) override;
  AttentionKind attention_kind() const override {
    if (cudnn_attention_) return AttentionKind::kCudnn;
    return flash_attention_ ? AttentionKind::kFlash : AttentionKind::kNaive;
  }

  void* Alloc(size_t bytes) override;
  void Free(void* ptr) override;
  void Upload(void* dst, const void* host_src, size_t bytes) override;
  void Download(void* host_dst, const void* src, size_t bytes) override;
  void Copy(void* dst, const void* src, size_t bytes) override;
  void Zero(void* dst, size_t bytes) override;
  void Synchronize() override;
  // Makes this backend's GPU current on the calling thread (the serving engine issues ops from its own
  // thread).
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
  // bf16 compute: the product stored as bf16 by cuBLASLt (its BIAS epilogue for the bias), else through
  // Scratch::kMatmulOut (matmul_cublaslt.cu).
  void MatmulToBF16(uint16_t* c, Operand a, Operand b, const float* bias, int M, int N, int K, bool trans_a,
                    bool trans_b, Compute compute) override;
  // cuBLASLt's GELU_AUX(_BIAS) and DGELU epilogues (matmul_cublaslt.cu); Backend's unfused defaults where
  // cuBLASLt takes no such plan (alignment: N % 8 for the pre-activation's leading dimension). MatmulGeluBF16
  // is Backend's (Matmul with its bias epilogue, then GeluForwardBF16).
  void MatmulGelu(float* out, float* pre, Operand a, Operand b, const float* bias, int M, int N, int K,
                  bool trans_a, bool trans_b, Compute compute) override;
  void MatmulDGelu(float* dinp, const float* pre, Operand a, Operand b, int M, int N, int K, bool trans_a,
                   bool trans_b, Compute compute) override;
  void BiasBackward(float* dbias, const float* dout, int N, int OC) override;
  void GeluForward(float* out, const float* inp, size_t n) override;
  void GeluForwardBF16(uint16_t* out, const float* inp, size_t n) override;
  void GeluBackward(float* dinp, const float* inp, const float* dout, size_t n) override;
  void Add(float* out, const float* a, const float* b, size_t n) override;
  void AttentionForward(float* out, void* state, const float* qkv, int B, int T, int C, int NH,
                        Compute compute) override;
  void AttentionBackward(float* dqkv, void* scratch, const float* dout, const float* qkv, const float* out,
                         const void* state, int B, int T, int C, int NH, Compute compute) override;
  // bf16 qkv and output (attention.cu): the GEMMs (naive) and the fused kernels (flash) read the bf16 q, k, v
  // as they are (the fp32 interface rounds its q, k, v to these bits at bf16 compute: the same values); the
  // output is the fp32 result rounded once. Widened into scratch only when attention computes in fp32.
  void AttentionForwardBF16(uint16_t* out, void* state, const uint16_t* qkv, int B, int T, int C, int NH,
                            Compute compute) override;
  void AttentionBackwardBF16(float* dqkv, void* scratch, const float* dout, const uint16_t* qkv,
                             const uint16_t* out, const void* state, int B, int T, int C, int NH,
                             Compute compute) override;
  void CrossEntropyForwardBackward(float* losses, float* logits, const int32_t* targets, int N, int V,
                                   float dloss) override;
  void CrossEntropyForwardBackwardBF16(float* losses, uint16_t* logits, const int32_t* targets, int N, int V,
                                       float dloss) override;
  double SumSquares(const float* x, size_t n) override;
  double Sum(const float* x, size_t n) override;
  void AccumulateMean(double* acc, const float* x, size_t n, double divisor) override;
  void AdamW(float* param, uint16_t* param_bf16, const float* grad, float* m, float* v, size_t n, float lr,
             float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t) override;
  void CastF32ToBF16(uint16_t* dst, const float* src, size_t n) override;

  // Inference ops (infer/): EmbedTokens and EmbedTokensBF16 in encoder.cu, KvCacheWrite and
  // PagedAttentionForward in paged_attention.cu, MatmulInt8 in matmul_int8.cu.
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

  // The compute type of attention's GEMMs: the caller's, unless TERN_CUDA_ATTENTION=fp32 in the environment
  // forces fp32.
  Compute attention_compute(Compute requested) const;

  cudaStream_t stream() const { return stream_; }
  // Whether cuDNN 9 loads here (train.attention=cudnn); *why says what is missing when it does not.
  bool CudnnAvailable(std::string* why = nullptr) const;
  // How many attention forwards and backwards cuDNN ran (not the flash kernels it falls back to): tests
  // check the path.
  int64_t cudnn_attention_forwards() const;
  int64_t cudnn_attention_backwards() const;
  // Grows a scratch buffer to at least `bytes` (synchronising the stream first when it must grow).
  void* ScratchBuffer(cuda::Scratch which, size_t bytes);

 private:
  // The slot's pinned host buffer, at least `bytes`, once the copies that last read it have run (the stream
  // is synchronised first when it must grow). After queueing copies that read it, call PinnedQueued(slot).
  void* PinnedForWrite(cuda::PinnedSlot slot, size_t bytes);
  void PinnedQueued(cuda::PinnedSlot slot);
  // Reduction helpers (reduce.cu).
  double ReduceToHost(const float* x, size_t n, bool squares);
  // The sum (or sum of squares) of x[n] into partials[0] on the device (deterministic); returns partials.
  double* ReduceOnDevice(const float* x, size_t n, bool squares);
  // Converts an operand to the element type the GEMM runs in; returns the pointer to use.
  const void* PrepareOperand(Operand op, size_t elems, Compute compute, cuda::Scratch slot);
  // epilogue: a cublasLtEpilogue_t (DEFAULT, BIAS, GELU_AUX, GELU_AUX_BIAS, DGELU).
  cuda::LtPlan* GetPlan(int m, int n, int k, bool ta, bool tb, cudaDataType_t ab_type, int epilogue, int lda,
                        int ldb, int ldc, cudaDataType_t c_type);
  // One cuBLASLt GEMM in the row-major terms of Matmul, with an epilogue: bias (BIAS variants) and aux (the
  // GELU pre-activation: written by GELU_AUX, read by DGELU; leading dimension N). False when cuBLASLt
  // cannot take it (alignment, no algorithm): the caller takes another path. c holds c_type elements (fp32,
  // or bf16 for MatmulToBF16).
  bool LtMatmul(void* c, const void* pa, const void* pb, cudaDataType_t type, const float* bias,
                const float* aux, int epilogue, int M, int N, int K, bool trans_a, bool trans_b, float beta,
                cudaDataType_t c_type = CUDA_R_32F);
  // dst = fp16(src) when f16, else bf16(src) (the 16-bit operand copies of the attention GEMMs).
  void CastToHalf(uint16_t* dst, const float* src, size_t n, bool f16);
  // The fused kernels of attention_flash.cu (SetAttentionKernel("flash")). The forward keeps only the
  // logsumexp of each score row, lse[B*NH*T] at the start of the state (AttentionStateBytes gives two floats
  // per row; the second half is unused); the backward recomputes the rest.
  // qkv is bf16 when qkv_bf16, else fp32; the output bf16 when out_bf16, else fp32.
  void FlashAttentionForward(void* out, bool out_bf16, float* lse, const void* qkv, bool qkv_bf16, int B,
                             int T, int C, int NH, Compute compute);
  void FlashAttentionBackward(float* dqkv, const float* dout, const void* qkv, bool qkv_bf16,
                              const float* lse, int B, int T, int C, int NH, Compute compute);
  // train.attention=cudnn (attention_cudnn.cu): cuDNN's fused attention; false when cuDNN does not take the
  // call (compute, shape, alignment, no engine), and the caller runs the flash kernels. The state and scratch
  // layouts are AttentionStateBytes(kCudnn, ...)'s. q, k, v and the output are bf16 when bf16, else fp32.
  bool CudnnAttentionForward(void* out, bool out_bf16, void* state, const void* qkv, bool qkv_bf16, int B,
                             int T, int C, int NH, Compute compute);
  bool CudnnAttentionBackward(float* dqkv, void* scratch, const float* dout, const void* qkv, const void* out,
                              bool bf16, const void* state, int B, int T, int C, int NH, Compute compute);
  // The graph for this call (forward or backward), built on first use; nullptr when cuDNN does not take it
  // (the backward's only where the forward's builds too). qkv16 and out16: the caller's bf16 q, k, v and
  // output, whose alignment cuDNN needs (nullptr where they are tern's own scratch).
  const cudnn::Graph* CudnnFor(const void* qkv16, const void* out16, const void* state, int B, int T, int C,
                               int NH, Compute compute, bool backward);
  // The attention ops over fp32 or bf16 qkv (and output), attention.cu: the public ones call these.
  void AttentionForwardAny(void* out, bool out_bf16, void* state, const void* qkv, bool qkv_bf16, int B,
                           int T, int C, int NH, Compute requested);
  void AttentionBackwardAny(float* dqkv, void* scratch, const float* dout, const void* qkv, const void* out,
                            bool bf16, const void* state, int B, int T, int C, int NH, Compute requested);
  // n elements of q, k, v (bf16 when qkv_bf16, else fp32) in the type of attention's GEMMs at `compute`: the
  // caller's when they already are, else widened (Scratch::kAttnWide) and/or cast (Scratch::kAttnQkv).
  const void* GemmQkv(const void* qkv, bool qkv_bf16, size_t n, Compute compute);
  // Strided-batched GEMM through cublasGemmStridedBatchedEx (column-major arguments), used by attention.
  void GemmStridedBatched(bool ta, bool tb, int m, int n, int k, float alpha, const void* a, int lda,
                          long long stride_a, const void* b, int ldb, long long stride_b, float beta,
                          float* c, int ldc, long long stride_c, int batch, cudaDataType_t type);

  int device_ = 0;
  std::string name_;
  std::string pci_bus_id_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cublasLtHandle_t cublaslt_ = nullptr;
  void* lt_workspace_ = nullptr;
  void* cublas_workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::unordered_map<std::string, cuda::LtPlan> plans_;
  std::vector<void*> scratch_;
  std::vector<size_t> scratch_bytes_;
  static constexpr int kPinnedSlots = static_cast<int>(cuda::PinnedSlot::kCount);
  std::array<void*, kPinnedSlots> pinned_{};
  std::array<size_t, kPinnedSlots> pinned_bytes_{};
  std::array<cudaEvent_t, kPinnedSlots> pinned_read_{};  // recorded after the copies that read the slot
  int next_upload_ = 0;                                  // Upload's staging slot in turn
  bool force_fp32_attention_ = false;
  bool flash_attention_ = false;  // SetAttentionKernel("flash"): attention_flash.cu
  bool cudnn_attention_ = false;  // SetAttentionKernel("cudnn"): attention_cudnn.cu, else the flash kernels
  std::unique_ptr<cuda::CudnnAttention, cuda::CudnnAttentionDeleter> cudnn_;
  int num_sms_ = 0;
  size_t smem_optin_ = 48 << 10;  // the most dynamic shared memory one block may opt in to on this GPU
};

}  // namespace tern
