// GPT-2 shape, parameter layout, and the FLOP and memory counts that the trainer (MFU), `tern bench`
// and `tern plan` all share. One formula, stated once:
//
//   model FLOPs per token (training) = 6 * (12*L*C^2 + C*V) + 12*L*T*C
//
// 12*L*C^2 is the weight count of the block matmuls (qkv 3C^2, proj C^2, fc 4C^2, fcproj 4C^2), C*V the
// tied LM head; each weight costs 2 FLOPs forward and 4 backward. 12*L*T*C is attention's QK^T and AV
// (2*2*T*C forward per token and layer, counted over the full T as nanoGPT and the PaLM paper do,
// times 3 for forward + backward). Layernorm, GELU, softmax and the optimizer are not counted: MFU
// measures useful model math, not everything the machine did.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"

namespace tern {

struct GptConfig {
  int n_layer = 12;
  int n_head = 12;
  int n_embd = 768;
  int vocab_size = 50257;
  int block_size = 1024;  // maximum sequence length (rows of wpe)

  Status Validate() const;
  std::string ToString() const;  // "L12 H12 C768 V50257 T1024"
};

// Named shapes, OpenAI's GPT-2 family (V=50257, T=1024): the one table `tern bench --model` and `tern plan
// --model` read. Each has a name and may have aliases ("gpt2-1.5b" is gpt2-1558m).
struct GptPresetEntry {
  std::string name;                  // "gpt2-1558m"
  std::vector<std::string> aliases;  // {"gpt2-1.5b"}
  GptConfig cfg;
};
const std::vector<GptPresetEntry>& GptPresets();
// By name or alias; InvalidArgument listing them all otherwise.
Result<GptConfig> GptPreset(const std::string& name);
// Names and aliases, in table order: gpt2-124m, gpt2, gpt2-350m, ...
std::vector<std::string> GptPresetNames();
// For help texts and errors: "gpt2-124m (gpt2), gpt2-350m, gpt2-774m, gpt2-1558m (gpt2-1.5b)".
std::string GptPresetList();

// One parameter tensor in the flat parameter buffer (llm.c order; per-layer tensors are stacked [L,...]).
struct ParamTensor {
  std::string name;            // tern's name, e.g. "qkvw"
  std::vector<int64_t> shape;  // e.g. {L, 3C, C}
  size_t offset = 0;           // in elements, into the flat buffer
  size_t numel = 0;
  bool decay = false;  // weight decay applies (matrices only: dim >= 2 per layer)
};

// The 16 parameter tensors of a GPT-2 with this config, in buffer order.
std::vector<ParamTensor> GptParamLayout(const GptConfig& cfg);
size_t GptParamCount(const GptConfig& cfg);

// Training FLOPs per token at sequence length T (the formula above).
double GptFlopsPerToken(const GptConfig& cfg, int T);

// Activation recomputation (`train.recompute`). kGelu is llm.c's `-r 1`: the model keeps one [B*T, 4C] GELU
// output instead of one per layer and recomputes it from the saved fc output in the backward, just before the
// fcproj weight gradient needs it. Cost: L-1 extra GELU forwards per micro-batch (the last layer's output is
// still in the buffer); saving: (L-1) x B*T x 4C floats. kBlocks is activation checkpointing per layer
// (PyTorch's torch.utils.checkpoint on each block, Megatron's full recompute): the model keeps each layer's
// input (the residual stream) and one layer's working set, and the backward re-runs each layer's forward (but
// the last's) before its backward: about one more forward per micro-batch (the planner's
// block_recompute_time_factor, 4/3) for ~(L-1) x 17 B*T*C floats less. Gradients are bitwise the same as
// with kNone in both modes.
enum class Recompute { kNone, kGelu, kBlocks };
const char* RecomputeName(Recompute r);  // "none", "gelu", "blocks"
Result<Recompute> ParseRecompute(const std::string& s);

// The fused classifier (`train.logits_chunk`): Forward with targets runs the LM head chunk by chunk of rows
// (logits = lnf * wte^T, the loss and its gradient, then the head's backward matmuls), so the model holds
// [min(B*T, chunk), V] fp32 logits instead of [B*T, V] (GPT-2 124M at B=16 T=1024: 206 MB, not 3.3 GB).
// 0 = one chunk of every row. Results are the unchunked ones up to the summation order of the tied
// embedding's gradient (bit for bit when B*T <= chunk).
inline constexpr int kDefaultLogitsChunk = 1024;
// Rows of logits held at once for N = B*T rows.
size_t GptLogitsRows(size_t N, int logits_chunk);
// The logits' bytes at micro-batch B x T: GptLogitsRows(B*T, chunk) x V logits (their gradient written in
// place), fp32, or bf16 with bf16 compute (rounded up to whole floats). Not linear in B: the planner adds it
// apart from the other activations.
size_t GptLogitsBytes(const GptConfig& cfg, int B, int T, int logits_chunk, bool bf16);
// The training loss summed over a step's micro-batches on the device (one double; Gpt::ForwardAccumulate),
// counted with the activations: a constant, not per row (the planner adds it apart too).
inline constexpr size_t kGptLossSumBytes = sizeof(double);

// Bytes of memory per component for training with micro-batch B x T.
struct GptMemory {
  size_t params = 0;       // fp32 weights (the master copy)
  size_t params_bf16 = 0;  // bf16 working copy of the weights (bf16 precision only)
  size_t grads = 0;        // fp32 gradients
  size_t adam_state = 0;   // fp32 first and second moments
  size_t activations = 0;  // saved forward activations (incl. attention's state, logits, token ids)
  size_t scratch = 0;      // backward scratch reused across layers
  size_t total() const { return params + params_bf16 + grads + adam_state + activations + scratch; }
};
// The memory model `tern plan` and `tern bench` use; Gpt::memory() is what the model really allocated and a
// test keeps the two equal. `attention` is the attention kernel family (train.attention): naive saves the
// probabilities [B,NH,T,T] per layer and needs as much again as backward scratch, flash two floats per
// score row (AttentionStateBytes). `logits_chunk` sizes the logits (GptLogitsBytes).
GptMemory GptMemoryEstimate(const GptConfig& cfg, int B, int T, bool bf16,
                            Recompute recompute = Recompute::kNone,
                            AttentionKind attention = AttentionKind::kNaive,
                            int logits_chunk = kDefaultLogitsChunk);

// Data-parallel sharding of the training state over `world` ranks, by ZeRO stage. tern train runs kNone and
// kOptimizer (ZeRO-1: each rank keeps the AdamW moments of its shard of the parameters; the fp32 weights,
// the bf16 copy and the gradients stay whole on every rank). kGradients (ZeRO-2) also shards the gradients
// and kWeights (ZeRO-3) every weight copy too: tern train does neither; the planner names them only to say
// what would fit.
enum class ZeroStage : uint8_t { kNone = 0, kOptimizer = 1, kGradients = 2, kWeights = 3 };
const char* ZeroStageName(ZeroStage z);  // "none", "ZeRO-1", "ZeRO-2", "ZeRO-3"
// Elements of n that rank `rank` of `world` holds: contiguous shards in rank order, the first n % world ranks
// one more (dist::ShardOf's count; model/ does not depend on dist/). Rank 0 holds the largest.
size_t ShardElements(size_t n, int world, int rank);
// The memory of rank `rank` in a data-parallel job: the sharded parts are ShardElements(P, world, rank)
// elements (ZeRO-1: adam_state = 8 x shard bytes); activations and scratch are the micro-batch's, as on one
// GPU. world 1 or kNone is GptMemoryEstimate above. The engine's Gpt allocates this for its rank; a test
// (plan/memory_agreement_test.cpp) holds the planner to it.
GptMemory GptMemoryEstimate(const GptConfig& cfg, int B, int T, bool bf16, Recompute recompute, int world,
                            ZeroStage zero, int rank = 0, AttentionKind attention = AttentionKind::kNaive,
                            int logits_chunk = kDefaultLogitsChunk);

}  // namespace tern
