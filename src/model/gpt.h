// GPT-2 written once over the Backend interface (llm.c's layout and names). Every buffer is allocated
// at construction for the largest micro-batch (max_B x max_T); Forward may run with any B <= max_B and
// T <= max_T (evaluation, generation). The model never dereferences a device pointer. With Recompute::kGelu
// the GELU outputs share one [B*T, 4C] buffer and the backward recomputes them (gpt_config.h).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "model/gpt_config.h"
#include "model/lora.h"

namespace tern {

// A range of the flat parameter buffer, or of the gradient buffer (GradsReady), in elements.
struct GradRange {
  size_t offset = 0, count = 0;
};
// Called by Backward each time some gradients are final (no later op of this backward writes them): after the
// head (lnfw, lnfb), after each layer from the last to the first (that layer's slice of the 12 stacked
// tensors), and at the end (wte, wpe). Data parallel starts their all-reduce at once (train/grad_sync.h).
// The ranges are offsets into grads() (the same as the parameters' without LoRA; with LoRA only the
// adapters have gradients: each layer's slice of them).
using GradsReady = std::function<void(std::span<const GradRange>)>;

class Gpt {
 public:
  // logits_chunk: rows of the LM head's logits held at once (the fused classifier, gpt_config.h; 0 = all).
  // lora: train low-rank adapters of the block matrices and freeze every base weight (model/lora.h).
  Gpt(Backend* backend, const GptConfig& config, int max_B, int max_T, Compute compute,
      Recompute recompute = Recompute::kNone, int logits_chunk = kDefaultLogitsChunk,
      const LoraSpec& lora = {});

  const GptConfig& config() const { return config_; }
  // The flat parameter buffer: the base model's tensors (GptParamLayout), then with LoRA the adapters'.
  const std::vector<ParamTensor>& layout() const { return layout_; }
  size_t num_params() const { return num_params_; }
  size_t num_base_params() const { return num_base_params_; }
  const LoraSpec& lora() const { return lora_; }
  // The parameters that have gradients and AdamW moments: all of them, or with LoRA the adapters (the
  // buffer's tail). grads() holds trainable().count gradients.
  GradRange trainable() const { return trainable_; }
  Compute compute() const { return compute_; }
  Backend* backend() const { return backend_; }
  Recompute recompute() const { return recompute_; }
  int logits_chunk() const { return logits_chunk_; }
  // The backend's attention kernel family when the model was built; the model's attention state is sized
  // for it (choose the kernel with Backend::SetAttentionKernel before building the model).
  AttentionKind attention() const { return attention_; }

  // Bytes this model allocated, per part (the token-id buffer counts as activations). GptMemoryEstimate,
  // the planner's memory model, must give the same figures (model/gpt_recompute_test.cpp;
  // plan/memory_agreement_test.cpp for the planner).
  GptMemory memory() const;
  // What the constructor allocates for these arguments, computed by the same sizing code without allocating.
  // `attention` is the backend's attention_kind() (the model sizes attention's state for it).
  static GptMemory Allocation(const GptConfig& config, int max_B, int max_T, Compute compute,
                              Recompute recompute, AttentionKind attention = AttentionKind::kNaive,
                              int logits_chunk = kDefaultLogitsChunk, const LoraSpec& lora = {});

  // GPT-2 initialisation from a seed: N(0, 0.02) for matrices and embeddings, residual projections
  // (attprojw, fcprojw) scaled by 1/sqrt(2L), biases 0, layernorm weights 1; with LoRA the adapters' start
  // too (LoraInitialWeights). Deterministic per seed.
  void InitWeights(uint64_t seed);
  // The base model's weights (num_base_params(): a trained model to adapt); the adapters are left as they
  // are.
  void SetBaseParameters(const std::vector<float>& host);
  // The base model's weights as every other command reads them (num_base_params()): with LoRA each adapted
  // matrix merged, W + B (s A), by the same product the forward multiplies; without, GetParameters().
  std::vector<float> ExportParameters();
  // Host <-> device copies of the whole flat fp32 parameter buffer (layout() order).
  void SetParameters(const std::vector<float>& host);
  std::vector<float> GetParameters() const;
  std::vector<float> GetGradients() const;            // trainable().count
  void SetGradients(const std::vector<float>& host);  // for tests and optimizer restores

  // Forward pass over host tokens inputs[B*T]. With targets (host, [B*T], -1 = ignore) returns the mean
  // loss, the LM head running chunk by chunk of logits_chunk() rows; without, returns NaN and only the logits
  // are valid (all B*T rows: B*T must be at most logits_chunk(), a bug otherwise). If dloss != 0 the head's
  // backward is fused into the pass: each chunk's logits become their gradient (scaled by dloss), which
  // gives the head's input gradient (kept for Backward) and accumulates the tied embedding's weight
  // gradient (+=, into wte's) before the next chunk overwrites them. Backward() must follow.
  float Forward(const int32_t* inputs, const int32_t* targets, int B, int T, float dloss = 0.0f);
  // Forward with targets that does not read the loss back: the micro-batch's mean loss is added on the
  // device to a sum that TakeLossSum() reads and clears (the trainer: one host synchronisation per step, not
  // one per micro-batch). The same values as adding Forward's results on the host in double. loss_divisor
  // (> 0) divides the micro-batch's summed loss instead of B*T: for a mean over the tokens learned (loss
  // masks, `tern prepare --chat`; the trainer passes the step's learned targets over its micro-batches).
  void ForwardAccumulate(const int32_t* inputs, const int32_t* targets, int B, int T, float dloss,
                         double loss_divisor = 0);
  double TakeLossSum();
  void ClearLossSum();  // without reading it (queued: no host synchronisation)
  // Accumulates parameter gradients (+=) for the last Forward, which must have had dloss != 0 (the head's
  // share is already in). on_ready, when given, hears of every gradient range as soon as it is final (see
  // GradsReady); the ranges cover the whole buffer exactly once.
  void Backward(const GradsReady& on_ready = {});
  // Starts a step's gradients, as PyTorch's zero_grad(set_to_none=True): the small tensors (biases, layer
  // norms, positions) are zeroed, and the weight matrices' gradients are left for the next Forward with
  // dloss != 0 (wte's, by the head's first chunk) and Backward (the blocks') to overwrite: their first
  // products write with beta 0 instead of adding to zeros, so no pass zeroes ~all the gradient bytes and
  // the first products do not read them. Until that Backward has run, the matrices' gradients are stale:
  // GradNorm, AdamWStep and GetGradients assert they are not.
  void ZeroGrad();

  // Copies the logits row for (b, t) of the last Forward without targets to host (V floats; with bf16
  // compute the bf16 logits widened).
  void GetLogits(int b, int t, float* host_out) const;

  // Global L2 norm of the gradient buffer (the trainable parameters').
  double GradNorm();
  // One AdamW step over every tensor of the optimizer shard (weight decay only where ParamTensor::decay),
  // gradients scaled by grad_scale first (gradient clipping folds into it). t is the 1-based step. Updates
  // the bf16 copy of what it updates.
  void AdamWStep(float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t);
  // ZeRO-1: this model keeps AdamW moments for parameters [shard.offset, shard.offset + shard.count) only,
  // and AdamWStep updates only those; the data-parallel caller all-gathers the weights afterwards and calls
  // WeightsChanged(). Reallocates (zeroes) the moments; call before training. The default shard is
  // whole of trainable(); a shard lies within it.
  void SetOptimizerShard(GradRange shard);
  GradRange optimizer_shard() const { return shard_; }
  // The fp32 weights were written behind the model's back (an all-gather): refresh what derives from them.
  void WeightsChanged() {
    SyncBf16Copy();
    merged_layer_ = -1;
  }
  // Optimizer moments of the shard, for checkpoints and tests.
  std::vector<float> GetAdamState() const;  // m then v, each optimizer_shard().count
  void SetAdamState(const std::vector<float>& host);

  // Device buffers (for data-parallel all-reduce and checkpoint snapshots). grads()[i] is the gradient of
  // parameter trainable().offset + i.
  float* params() const { return params_.as<float>(); }
  float* grads() const { return grads_.as<float>(); }
  // AdamW moments (optimizer_shard().count each), so a checkpoint snapshot copies them without a host
  // temporary.
  float* adam_m() const { return adam_m_.as<float>(); }
  float* adam_v() const { return adam_v_.as<float>(); }

 private:
  struct Acts;                       // activation pointers for one micro-batch shape
  float* P(const char* name) const;  // device pointer of a parameter tensor
  float* G(const char* name) const;  // device pointer of its gradient (null: frozen, LoRA's base tensors)
  Operand W(const char* name, size_t offset_elems) const;  // matmul operand for a weight (bf16 copy if bf16)
  // LayerNormForward into out, a layer norm output (fp32, or bf16 under bf16 compute: LayerNormForwardBF16);
  // with `add`, of residual = inp + add, written too (ResidualLayerNormForward).
  void LayerNorm(Operand out, float* mean, float* rstd, const float* inp, const float* weight,
                 const float* bias, size_t N, int C, const float* add = nullptr, float* residual = nullptr);
  // Layer l's block matrix `name` ([out, in] = per_layer elements) as a matmul operand: with LoRA adapting
  // it, the merged matrix of MergeLayer(l) (which must have run for l); else W(name, l * per_layer).
  Operand LW(const char* name, int l, size_t per_layer) const;
  // LoRA (gpt_lora.cpp): merges layer l's adapted matrices into the scratch (nothing if they are there).
  void MergeLayer(int l);
  // The weight gradient of layer l's block matrix `name` from dout[rows, out] and inp[rows, in]: into its
  // gradient (beta: 0 writes, 1 adds) without LoRA; with LoRA, the adapters' gradients (+=) through rank-r
  // products (model/lora.h), or nothing when the matrix is frozen and not adapted.
  void WeightGrad(const char* name, int l, Operand dout, Operand inp, int out, int in, int rows, float beta);
  // The LoRA scratch's parts (LoraScratchFloats), carved from lora_scratch_ (gpt_lora.cpp).
  struct LoraParts {
    float* merged[4] = {};          // per adapted matrix, one layer's W + B (s A), [out, in]
    uint16_t* merged_bf16[4] = {};  // its bf16 copy (bf16 compute)
    float* sa[4] = {};              // s A of the merged layer, [r, in]
    float* sb[4] = {};              // B s of the merged layer, [out, r]
    float* s_eye = nullptr;         // s I, [r, r]
    float* ln_sink = nullptr;       // [2C]: the frozen layer norms' parameter gradients, discarded
    float* xa = nullptr;            // the backward's x (s A)^T, [rows, r]
    float* gb = nullptr;            // the backward's dy (B s), [rows, r]
  };
  LoraParts Parts() const;
  int LoraIndex(const char* name) const;  // into lora_matrices_, or -1
  void SyncBf16Copy();
  float Run(const int32_t* inputs, const int32_t* targets, int B, int T, float dloss, bool read_loss);
  // Layer l's forward (gpt.cpp): the whole layer, or (recompute) again in the backward for
  // Recompute::kBlocks.
  void ForwardLayer(const Acts& a, int l, int B, int T, bool recompute);
  double* loss_sum() const;  // ForwardAccumulate's sum (one double on the device, in tokens_)

  Backend* backend_;
  double accumulate_divisor_ = 0;  // ForwardAccumulate's loss_divisor for the pass in progress
  GptConfig config_;
  int max_B_, max_T_;
  std::vector<int32_t> host_inputs_;  // the last Forward's input ids, as uploaded
  Compute compute_;
  Recompute recompute_;
  int logits_chunk_;
  AttentionKind attention_;
  std::vector<ParamTensor> layout_;
  size_t num_params_ = 0, num_base_params_ = 0;
  GradRange shard_;  // of the AdamW moments
  GradRange trainable_;
  LoraSpec lora_;
  std::vector<LoraMatrix> lora_matrices_;
  DeviceBuffer lora_scratch_;
  int merged_layer_ = -1;  // the layer whose merged matrices the LoRA scratch holds (-1: none, or stale)

  DeviceBuffer params_, params_bf16_, grads_, adam_m_, adam_v_;
  DeviceBuffer acts_, scratch_, tokens_;
  int last_B_ = 0, last_T_ = 0;
  bool have_head_grads_ = false;  // the last Forward ran the head's backward (dloss != 0)
  // After ZeroGrad: the next head backward overwrites wte's gradient (its first chunk, beta 0); the next
  // Backward overwrites the blocks' weight-matrix gradients.
  bool overwrite_head_grad_ = false, overwrite_block_grads_ = false;
};

}  // namespace tern
