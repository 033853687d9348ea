// The compute interface the model is written against. One implementation per device:
// cpu/ (a plain reference of every op, and a fast oneDNN/OpenMP path) and cuda/.
//
// Rules of the interface:
//  * Every pointer passed to an op was returned by Alloc() of the same backend (device memory).
//    The model never dereferences them; host data moves only through Upload()/Download().
//  * Shapes use llm.c's letters: B batch, T time, C channels, NH heads, V vocab, N = B*T rows,
//    OC output channels. Tensors are row-major and contiguous.
//  * "+=" in a comment means the op accumulates into its output (gradients across micro-batches,
//    the residual gradient stream); everything else overwrites.
//  * bf16 values are stored as uint16_t (the top half of an fp32). Matmuls with compute = kBF16 round
//    their fp32 operands to bf16 (the backend casts them into its own scratch) and accumulate in fp32.
//  * Compute = kF16 (fp16 mixed precision, used with dynamic loss scaling, loss_scaler.h) rounds fp32
//    operands to IEEE fp16 (round-to-nearest-even; above 65504 -> inf) and accumulates in fp32. Backends
//    with fp16 GEMMs (CUDA) run them natively; the others are wrapped by WithF16Emulation().
//  * What differs between backends (host-readable buffers, fp16, KV cache dtypes, attention kernels) is
//    asked through capabilities(), never inferred from name() or from the backend being a GPU.
//  * A decorator (a backend wrapping another: fp16 emulation, later a profiler or a fault injector) derives
//    from ForwardingBackend (forwarding_backend.h) and overrides only what it changes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tern {

enum class DType : uint8_t { kF32, kBF16, kI32, kI8 };
enum class Compute : uint8_t { kF32, kBF16, kF16 };

size_t DTypeSize(DType t);
const char* DTypeName(DType t);
// Bytes of one block of one layer's key (or value) cache (the inference ops below): bs * C elements, and
// with kI8 elements one fp32 scale per (head, slot) after them.
size_t KvBlockBytes(DType kv_dtype, int C, int NH, int bs);
const char* ComputeName(Compute c);

// Causal-attention kernel families (Backend::SetAttentionKernel, `train.attention`). kNaive keeps the
// softmax probabilities for the backward; kFlash keeps two floats per score row (the softmax statistics)
// and recomputes the probabilities in the backward; kCudnn (the CUDA backend, where cuDNN 9 loads) is cuDNN's
// fused flash attention, which also keeps the layer's bf16 output for its backward.
enum class AttentionKind : uint8_t { kNaive, kFlash, kCudnn };
const char* AttentionKindName(AttentionKind k);  // "naive", "flash", "cudnn"
// What attention keeps from a layer's forward for its backward (`state`, bytes per layer) and what its
// backward needs as scratch (`scratch`, bytes, shared by every layer), at micro-batch B x T:
//   kNaive: state = the probabilities att[B,NH,T,T] (fp32); scratch = datt[B,NH,T,T] (fp32)
//   kFlash: state = two fp32 per score row [B,NH,T,2] in the backend's own layout (CUDA: the logsumexp;
//           the fast CPU path: the row maximum and 1/sum, so that it recomputes the naive kernel's
//           probabilities bit for bit); scratch = 0 (a backend's per-thread working memory is its own).
//   kCudnn: at bf16 compute, state = kFlash's state, then the bf16 output o[B,T,C]; scratch = bf16
//           dout[B,T,C] + bf16 dqkv[B,T,3C] + one fp32 per score row. Linear in B (the planner scales by B);
//           the parts start 16-byte aligned, as cuDNN needs, when C % 8 == 0 and B*NH*T is even (else the
//           flash kernels run it). At fp32 and fp16 compute (the flash kernels run those) it is kFlash's.
// The model allocates both (Gpt::memory()) and the planner counts both (GptMemoryEstimate), so they agree.
// `compute` is part of the signature so that a 16-bit state (a cuDNN kernel's) can size itself.
struct AttentionMemory {
  size_t state = 0;
  size_t scratch = 0;
};
AttentionMemory AttentionStateBytes(AttentionKind kind, int B, int T, int C, int NH, Compute compute);

// A matmul operand: a device pointer and how its elements are stored.
struct Operand {
  const void* ptr = nullptr;
  DType dtype = DType::kF32;
};
inline Operand F32(const float* p) {
  return {p, DType::kF32};
}
inline Operand BF16(const uint16_t* p) {
  return {p, DType::kBF16};
}

// What a backend has, asked where a caller would otherwise guess from "is it a GPU" or from its name.
struct Capabilities {
  // Alloc() returns host pointers: the caller may read and write a buffer directly once Synchronize() has
  // returned (the CPU backends; Upload/Download are then memcpy).
  bool host_addressable_memory = false;
  // Matmul accepts Compute::kF16, natively or emulated (WithF16Emulation); false: it must be wrapped first.
  bool fp16_matmul = false;
  // fp16 GEMMs run on fp16 hardware (tensor cores, at the bf16 peak); false where there are none or they are
  // emulated (at the fp32 matmul's speed).
  bool native_fp16 = false;
  // The kv_dtype values KvCacheWrite and PagedAttentionForward accept (empty: no inference ops).
  std::vector<DType> kv_dtypes;
  // The kinds SetAttentionKernel accepts (AttentionKindName); "naive" (the default) is always one of them.
  std::vector<std::string> attention_kinds = {"naive"};
  // A GPU: NVML can sample it through PciBusId(), and names and messages may say so.
  bool is_gpu = false;
  // MatmulInt4 runs at serving speed (tern serve --weights int4): the CPU backends with AVX-512 VNNI. false:
  // not implemented (it aborts), or only as the reference computes it (the fast CPU backend without VNNI).
  bool int4_weights = false;

  bool HasKvDType(DType t) const {
    return std::find(kv_dtypes.begin(), kv_dtypes.end(), t) != kv_dtypes.end();
  }
  bool HasAttentionKind(const std::string& kind) const {
    return std::find(attention_kinds.begin(), attention_kinds.end(), kind) != attention_kinds.end();
  }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // What this backend has (see Capabilities). Each backend states its own; a decorator (forwarding_backend.h)
  // passes on its inner backend's, changed where the decorator changes them.
  virtual Capabilities capabilities() const = 0;
  // The GPU's PCI bus id ("0000:3B:00.0") so NVML reads the same GPU CUDA uses; empty when not a GPU.
  virtual std::string PciBusId() const { return {}; }
  // The GPU stream every op is queued on (a cudaStream_t), so a communicator (NCCL) can order itself after
  // the compute; null for host backends.
  virtual void* native_stream() const { return nullptr; }
  // Selects the causal-attention kernel family, one of capabilities().attention_kinds ("naive": the
  // materialised probabilities att[B,NH,T,T]; "flash": softmax statistics only, see AttentionKind). Returns
  // false for a name this backend does not have. Choose before sizing a model: the model sizes its attention
  // state for attention_kind() when it is built.
  virtual bool SetAttentionKernel(const std::string& kind) { return kind == "naive"; }
  virtual AttentionKind attention_kind() const { return AttentionKind::kNaive; }

  // ---- memory ----------------------------------------------------------------------------------
  virtual void* Alloc(size_t bytes) = 0;  // zero-filled; aborts on out-of-memory (a bug in sizing)
  virtual void Free(void* ptr) = 0;
  virtual void Upload(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void Download(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void Copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void Zero(void* dst, size_t bytes) = 0;
  virtual void Synchronize() {}
  // Call on a thread that will issue ops, after setting its OpenMP thread count: per-thread state the
  // backend relies on (the CPU fast backend: subnormal flushing on the thread and its OpenMP workers).
  // The constructor prepares the thread that constructs the backend.
  virtual void PrepareThread() {}

  // ---- ops ---------------------------------------------------------------------------------------
  // out[B,T,C] = wte[inp[b,t],:] + wpe[t,:]
  virtual void EncoderForward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B,
                              int T, int C) = 0;
  // dwte[V,C] += , dwpe[T,C] += from dout[B,T,C]. Deterministic (no atomics, fixed order). host_inp, if
  // not null, is a host copy of inp[B*T] (the model keeps the ids it uploaded): CUDA buckets rows by token
  // on the host, and with the copy it need not download inp and wait for the stream mid-backward.
  virtual void EncoderBackward(float* dwte, float* dwpe, const float* dout, const int32_t* inp,
                               const int32_t* host_inp, int B, int T, int C) = 0;

  // out[N,C] = (inp - mean) * rstd * weight + bias; also saves mean[N], rstd[N]. eps = 1e-5.
  virtual void LayerNormForward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                const float* bias, int N, int C) = 0;
  // LayerNormForward with out in bf16 (its fp32 value rounded as CastF32ToBF16 rounds): with bf16 compute a
  // layer norm's output is only ever a bf16 matmul operand, and its backward reads the input, not the output.
  virtual void LayerNormForwardBF16(uint16_t* out, float* mean, float* rstd, const float* inp,
                                    const float* weight, const float* bias, int N, int C) = 0;
  // The residual add and the next layer norm in one pass (llm.c's fused_residual_forward): residual[N,C] =
  // a + b, then LayerNormForward (or LayerNormForwardBF16) of it into out, mean, rstd; the same values as Add
  // followed by the layer norm, bit for bit. The default runs those two ops; the fast CPU backend and CUDA
  // fuse them (the sum is normalised while it is in registers or L1, not read back from memory).
  virtual void ResidualLayerNormForward(float* residual, float* out, float* mean, float* rstd, const float* a,
                                        const float* b, const float* weight, const float* bias, int N, int C);
  virtual void ResidualLayerNormForwardBF16(float* residual, uint16_t* out, float* mean, float* rstd,
                                            const float* a, const float* b, const float* weight,
                                            const float* bias, int N, int C);
  // dinp[N,C] +=, dweight[C] +=, dbias[C] +=
  virtual void LayerNormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                                 const float* inp, const float* weight, const float* mean, const float* rstd,
                                 int N, int C) = 0;

  // General matmul: C[M,N] = beta*C + op(A)[M,K] * op(B)[K,N] (+ bias[N] broadcast over rows if non-null).
  // trans_a: A is stored [K,M]; trans_b: B is stored [N,K] (the nn.Linear weight layout).
  // Uses in the model:  forward   out[N,OC]  = inp[N,C] * W[OC,C]^T + b      (trans_b)
  //                     backward  dinp[N,C]  = dout[N,OC] * W[OC,C]           (plain)
  //                               dW[OC,C]  += dout[N,OC]^T * inp[N,C]        (trans_a, beta = 1)
  virtual void Matmul(float* c, Operand a, Operand b, const float* bias, int M, int N, int K, bool trans_a,
                      bool trans_b, float beta, Compute compute) = 0;
  // Matmul with the product rounded to bf16 (fp32 accumulation, as CastF32ToBF16 rounds): c[M,N] = op(A)
  // op(B) (+ bias[N], added in fp32 before the rounding; bias may be null), beta 0. Under bf16 compute the
  // LM head writes its logits this way (half the bytes of fp32 logits), and the qkv projection its q, k, v.
  // The default multiplies into a temporary fp32 buffer, then casts.
  virtual void MatmulToBF16(uint16_t* c, Operand a, Operand b, const float* bias, int M, int N, int K,
                            bool trans_a, bool trans_b, Compute compute);
  // Matmul with a GELU epilogue (the MLP's fc layer): pre[M,N] = op(A) op(B) + bias (bias may be null),
  // out[M,N] = gelu(pre) as GeluForward computes it; pre is kept for the backward (beta is 0). The default
  // runs Matmul, then GeluForward; CUDA fuses both into the GEMM (cuBLASLt's GELU_AUX_BIAS epilogue).
  virtual void MatmulGelu(float* out, float* pre, Operand a, Operand b, const float* bias, int M, int N,
                          int K, bool trans_a, bool trans_b, Compute compute);
  // MatmulGelu with the GELU output in bf16 (GeluForwardBF16's rounding); pre stays fp32. Under bf16 compute
  // the GELU output is only ever a bf16 matmul operand, so the model keeps it in bf16. The default runs
  // Matmul into pre, then GeluForwardBF16.
  virtual void MatmulGeluBF16(uint16_t* out, float* pre, Operand a, Operand b, const float* bias, int M,
                              int N, int K, bool trans_a, bool trans_b, Compute compute);
  // Matmul with a GELU-gradient epilogue (the fcproj input gradient turned into the fc output gradient):
  // dinp[M,N] = gelu'(pre) * (op(A) op(B)), GeluBackward with the product as dout (beta is 0). The default
  // runs Matmul into dinp, then GeluBackward in place; CUDA fuses it (cuBLASLt's DGELU epilogue).
  virtual void MatmulDGelu(float* dinp, const float* pre, Operand a, Operand b, int M, int N, int K,
                           bool trans_a, bool trans_b, Compute compute);
  // dbias[OC] += sum over rows of dout[N,OC]
  virtual void BiasBackward(float* dbias, const float* dout, int N, int OC) = 0;

  // out[N] = gelu(inp[N]) (tanh approximation, as GPT-2)
  virtual void GeluForward(float* out, const float* inp, size_t n) = 0;
  // out[N] = bf16(gelu(inp[N])): GeluForward's value rounded to nearest even, as CastF32ToBF16 would round it
  virtual void GeluForwardBF16(uint16_t* out, const float* inp, size_t n) = 0;
  // dinp[N] = gelu'(inp) * dout; dinp may be dout (in place)
  virtual void GeluBackward(float* dinp, const float* inp, const float* dout, size_t n) = 0;

  // out[n] = a[n] + b[n], element by element: out may be a or b (an accumulation, out += b)
  virtual void Add(float* out, const float* a, const float* b, size_t n) = 0;

  // Causal self-attention with the kernel family attention_kind(). qkv[B,T,3C] packs q,k,v; out[B,T,C];
  // `state` (AttentionStateBytes(attention_kind(), B, T, C, NH, compute).state bytes) receives what the
  // backward needs; for kNaive it is att[B,NH,T,T], the softmax probabilities (zero above the diagonal).
  // compute: kF32 multiplies in fp32; kBF16 / kF16 let a backend round q, k, v and the probabilities to 16
  // bits for its products (fp32 accumulation; the softmax in fp32). CUDA does; the CPU backends compute in
  // fp32 at every compute.
  virtual void AttentionForward(float* out, void* state, const float* qkv, int B, int T, int C, int NH,
                                Compute compute) = 0;
  // dqkv[B,T,3C] = (overwrites) from dout[B,T,C] and the forward's qkv, output out[B,T,C] and state, with
  // the same kind and compute as that forward; scratch holds AttentionStateBytes(...).scratch bytes. (Only
  // cuDNN's kernels read out, as PyTorch's SDPA backward takes its forward's output: the state then need not
  // keep a copy of it.)
  virtual void AttentionBackward(float* dqkv, void* scratch, const float* dout, const float* qkv,
                                 const float* out, const void* state, int B, int T, int C, int NH,
                                 Compute compute) = 0;
  // Attention over bf16 q, k, v (qkv[B,T,3C] as bf16 compute's qkv projection writes it, MatmulToBF16) with a
  // bf16 output out[B,T,C] (what the attention projection multiplies), as PyTorch autocast's attention: the
  // products and the softmax as AttentionForward at `compute` on the widened values (exact), the output
  // rounded to nearest even. The state is AttentionForward's. The default widens qkv into a temporary, runs
  // AttentionForward and casts its output (the reference backend's oracle); the fast CPU backend widens
  // while it packs the operands, CUDA into its scratch.
  virtual void AttentionForwardBF16(uint16_t* out, void* state, const uint16_t* qkv, int B, int T, int C,
                                    int NH, Compute compute);
  // AttentionBackward of that forward: the gradients stay fp32 (dout[B,T,C] in, dqkv[B,T,3C] overwritten);
  // qkv and out are the forward's bf16 input and output. The default widens both and runs AttentionBackward.
  virtual void AttentionBackwardBF16(float* dqkv, void* scratch, const float* dout, const uint16_t* qkv,
                                     const uint16_t* out, const void* state, int B, int T, int C, int NH,
                                     Compute compute);

  // Fused softmax + cross-entropy over logits[N,V] with targets[N]:
  // losses[N] = -log softmax(logits)[target]. If dloss != 0, logits are overwritten with the gradient
  // dlogits = (softmax - onehot(target)) * dloss (dloss = 1 / (N * grad_accum_steps) for a mean loss).
  // A target < 0 is ignored (loss 0, gradient 0).
  virtual void CrossEntropyForwardBackward(float* losses, float* logits, const int32_t* targets, int N, int V,
                                           float dloss) = 0;
  // The same loss over bf16 logits[N,V] (what bf16 compute's head matmul writes, MatmulToBF16): the loss of
  // the widened logits in fp32, and (dloss != 0) the gradient written over them in bf16 (the fp32 op's
  // gradient of the widened logits rounded to nearest even, as CastF32ToBF16): what the head's two backward
  // matmuls multiply next. As llm.c and PyTorch autocast, bf16 training never holds fp32 logits.
  virtual void CrossEntropyForwardBackwardBF16(float* losses, uint16_t* logits, const int32_t* targets, int N,
                                               int V, float dloss) = 0;

  // sum of squares of x[n] in double, returned to the host (for the global gradient norm).
  virtual double SumSquares(const float* x, size_t n) = 0;
  // sum of x[n], returned to the host (for the mean loss).
  virtual double Sum(const float* x, size_t n) = 0;
  // acc[0] (one double in device memory) += float(Sum(x, n) / divisor), the host's arithmetic, without
  // reading anything back: the trainer adds each micro-batch's mean loss on the device and reads the step's
  // sum once. The default runs Sum, then Download / Upload of acc; CUDA keeps it on the stream.
  virtual void AccumulateMean(double* acc, const float* x, size_t n, double divisor);

  // AdamW on one tensor: g' = g * grad_scale; m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;
  // p -= lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * p), with bias corrections for step t (1-based).
  // If param_bf16 is non-null it receives the updated parameters rounded to bf16 (the matmul copy).
  virtual void AdamW(float* param, uint16_t* param_bf16, const float* grad, float* m, float* v, size_t n,
                     float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                     int t) = 0;

  // dst[n] = bf16(src[n]) with round-to-nearest-even.
  virtual void CastF32ToBF16(uint16_t* dst, const float* src, size_t n) = 0;

  // ---- inference ops (infer/) -----------------------------------------------------------------------
  // Optional: the base class aborts with "op X not implemented on backend Y"; training never calls them.
  // A ragged batch has N rows, the new tokens of S sequences concatenated (sequence s owns the rows
  // [q_start, q_start + q_len)). Each layer's KV cache is a pool of fixed-size blocks (bs tokens per block,
  // hs = C / NH) of kv_dtype elements (kF32, kBF16 or kI8): keys k_cache[num_blocks, NH, hs, bs]
  // (transposed within a block, so one query's scores over a block are bs-wide vector multiply-adds) and
  // values v_cache[num_blocks, NH, bs, hs]; a block is KvBlockBytes long.
  // Sequence s keeps position p in block block_tables[s * max_blocks + p / bs], slot p % bs. bf16 elements
  // are the fp32 keys and values rounded to nearest even. kI8 blocks end with scale[NH, bs] (fp32): the key
  // (or value) vector x[hs] of one head and slot is stored as nearbyint(x * 127 / m), m = max |x|, with scale
  // m / 127 (0 when m = 0), as llama.cpp's q8_0 cache with one scale per head vector. Attention reads the
  // elements back (times the scale) and computes in fp32.
  // Row independence: every output row depends only on that row's inputs (and its sequence's cache), never
  // on N or on the other rows, so a request decodes the same tokens alone or batched with others.

  // out[N,C] = wte[tokens[n],:] + wpe[positions[n],:]
  virtual void EmbedTokens(float* out, const int32_t* tokens, const int32_t* positions, const float* wte,
                           const float* wpe, int N, int C);
  // The same with a bf16 token table (serving with bf16 weights: the tied LM head's table): each element
  // widened to fp32 exactly, then the one float add.
  virtual void EmbedTokensBF16(float* out, const int32_t* tokens, const int32_t* positions,
                               const uint16_t* wte, const float* wpe, int N, int C);
  // Copies the k and v parts of qkv[N,3C] into the cache, row n at slots[n] = block * bs + offset.
  virtual void KvCacheWrite(void* k_cache, void* v_cache, DType kv_dtype, const float* qkv,
                            const int32_t* slots, int N, int C, int NH, int bs);
  // out[N,C] = causal attention of each row's query (the q part of qkv[N,3C]) over its sequence's cache.
  // seqs[S,3] = {q_start, q_len, ctx_len}: row q_start + i is position ctx_len - q_len + i and attends to
  // positions 0 .. ctx_len - q_len + i, whose keys and values KvCacheWrite has already stored.
  virtual void PagedAttentionForward(float* out, const float* qkv, const void* k_cache, const void* v_cache,
                                     DType kv_dtype, const int32_t* seqs, const int32_t* block_tables, int S,
                                     int max_blocks, int N, int C, int NH, int bs);
  // out[N,OC] = inp[N,K] * W[OC,K]^T + bias (bias may be null) with int8 weights and int8 activations:
  //   W[o,k] ~= w(o,k) * w_scale[o]   (per-output-channel symmetric, infer/quantize.h makes them)
  //   a(n,k) = nearbyint(inp[n,k] * (127 / m_n)), m_n = max_k |inp[n,k]| (a = 0 when m_n = 0)
  //   out[n,o] = float(sum_k a(n,k) * w(o,k)) * (m_n / 127 * w_scale[o]) + bias[o]   (int32 sum: exact)
  // w is packed for int8 dot products (VNNI, dp4a): OC in groups of 16 (zero-padded), K in groups of 4;
  // w(o,k) is byte ((o / 16) * (K / 4) + k / 4) * 64 + (o % 16) * 4 + k % 4. K % 4 == 0.
  virtual void MatmulInt8(float* out, const float* inp, const int8_t* w, const float* w_scale,
                          const float* bias, int N, int OC, int K);
  // out[N,OC] = inp[N,K] * W[OC,K]^T + bias (bias may be null) with 4-bit weights in groups of 64 k, each
  // group of a channel with its own scale, and the int8 activations of MatmulInt8:
  //   W[o,k] ~= w(o,k) * w_scale(o, k / 64), w in [-8, 7]   (infer/quantize.h makes them)
  //   s_j(n,o) = sum over the 64 k of group j of a(n,k) * w(o,k)          (int32: exact)
  //   acc = 0; for j = 0 .. K/64 - 1 in order: acc = fma(float(s_j), w_scale(o,j), acc)
  //   out[n,o] = fma(acc, m_n / 127, bias[o])                            (acc * (m_n / 127) without bias)
  // Packing: OC in groups of 16 (zero-padded, scale 0). Channel group g, k-group j is 512 bytes at
  // (g * K/64 + j) * 512; its byte p * 64 + (o % 16) * 4 + i (p = 0..7, i = 0..3) holds w + 8 of k = 64 j +
  // 8 p + i in the low nibble and of k = 64 j + 8 p + 4 + i in the high one. w_scale(o, j) is float
  // (g * K/64 + j) * 16 + o % 16. K % 64 == 0. Row independent; Capabilities::int4_weights says it runs.
  virtual void MatmulInt4(float* out, const float* inp, const uint8_t* w, const float* w_scale,
                          const float* bias, int N, int OC, int K);
  // out[N,OC] = bf16(inp)[N,K] * W[OC,K]^T + bias (bias may be null) with bf16 weights (serving with
  // --weights bf16): each activation rounded to bf16 (nearest even), the bf16 x bf16 products exact, summed
  // in fp32. Row independent on the CPU backends (any summation order a backend picks is the same for every
  // row count). The default runs Matmul(F32(inp), BF16(w), ..., Compute::kBF16), which means the same numbers
  // but may pick another kernel (and order) for another N: CUDA's cuBLASLt does.
  // row_independent = false: the caller never batches sequences (an engine of one stream), so a backend may
  // pick its kernel by N; the fast CPU backend then multiplies fewer than kBf16AmxMinRows rows with vdpbf16ps
  // (it reads the weights faster than AMX tile loads do at one row) and more with AMX.
  virtual void MatmulBF16(float* out, const float* inp, const uint16_t* w, const float* bias, int N, int OC,
                          int K, bool row_independent = true);
  // out[N,OC] = inp[N,K] * W[OC,K]^T + bias (bias may be null), all fp32 (serving with --weights fp32).
  // Row independent on the CPU fast backend (cpu/f32_matmul.cpp: a row gets bitwise the same result alone or
  // batched, which the engine's batching invariance rests on; oneDNN's sgemm picks other kernels, and other
  // summation orders, for other row counts). The default runs Matmul(F32(inp), F32(w), ..., Compute::kF32):
  // what the reference and CUDA backends use.
  virtual void MatmulF32Weights(float* out, const float* inp, const float* w, const float* bias, int N,
                                int OC, int K);
};

// Backends this build knows. "cpu" is the fast CPU path, "cpu-ref" the plain reference (the test oracle).
std::unique_ptr<Backend> MakeCpuReferenceBackend();
std::unique_ptr<Backend> MakeCpuFastBackend();
// fp16 matmuls for a CPU backend without them (cpu/f16_emulation.cpp): returns `inner` itself when
// inner->capabilities().fp16_matmul, otherwise a wrapper whose Matmul with Compute::kF16 rounds the operands
// to fp16 (F16C / AVX-512 conversions) and multiplies them in fp32; every other call goes to `inner`
// unchanged.
// Only for backends with host_addressable_memory (the CPU ones); aborts for any other (a bug).
std::unique_ptr<Backend> WithF16Emulation(std::unique_ptr<Backend> inner);

// Device memory owned by a backend, freed on destruction. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend* backend, size_t bytes) : backend_(backend), bytes_(bytes) {
    ptr_ = bytes ? backend->Alloc(bytes) : nullptr;
  }
  ~DeviceBuffer() { Reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      Reset();
      backend_ = o.backend_;
      ptr_ = o.ptr_;
      bytes_ = o.bytes_;
      o.ptr_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void Reset() {
    if (ptr_) backend_->Free(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  Backend* backend_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace tern
