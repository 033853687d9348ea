// LoRA (Hu et al., 2021): fine-tuning that freezes the model's weights and trains, for each chosen block
// matrix W[out, in] of every layer, two small ones A[r, in] and B[out, r], the layer computing
//   y = x (W + s B A)^T + b,   s = alpha / r   (PEFT's lora_alpha / r).
// A starts as PEFT's (kaiming_uniform with a = sqrt(5): U(-1/sqrt(in), 1/sqrt(in))), B at zero, so step 0
// is the base model exactly. The adapters are appended to the flat parameter buffer after the base tensors
// (LoraParamLayout); the model keeps gradients and AdamW moments for them only (`train.lora`,
// docs/finetune.md).
//
// How tern computes it (model/gpt.cpp): each layer's adapted matrices are merged, W' = W + B (s A), into a
// one-layer scratch just before the layer runs (forward) and again before its backward; every kernel then
// runs as without LoRA (fused GELU, bf16 operands, flash attention), and the exported model is the merged
// one every other command reads. The backward takes the adapters' gradients through rank-r products, as
// PEFT does, never forming the matrix's gradient: with dy [N, out] and x [N, in],
//   dB += dy^T (x (s A)^T)     dA += (dy (B s))^T x
// so the frozen matrices cost no weight-gradient GEMM (LoRA's compute saving: about a third of a block's
// matmul work) and no gradients or optimizer state (12 of full training's 16 bytes per parameter).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/gpt_config.h"

namespace tern {

// The block matrices LoRA may adapt (a bit each), in layout order.
enum LoraTarget : uint8_t { kLoraQkv = 1, kLoraAttproj = 2, kLoraFc = 4, kLoraFcproj = 8 };
inline constexpr uint8_t kLoraAllTargets = kLoraQkv | kLoraAttproj | kLoraFc | kLoraFcproj;

struct LoraSpec {
  int rank = 0;         // r; 0 = LoRA off (full fine-tuning or pre-training)
  float alpha = 16.0f;  // the scale is alpha / rank
  uint8_t targets = kLoraAllTargets;

  bool enabled() const { return rank > 0; }
  float scale() const { return enabled() ? alpha / static_cast<float>(rank) : 0.0f; }
  // rank within [1, min(in, out)] of every target, alpha positive, at least one target.
  Status Validate(const GptConfig& cfg) const;
  std::string ToString() const;  // "r8 alpha16 qkv,attproj,fc,fcproj", or "off"
};

// The spec as safetensors metadata (tern.lora_rank, tern.lora_alpha, tern.lora_targets), as checkpoints and
// adapter files carry it; nothing when LoRA is off.
std::map<std::string, std::string> LoraMetadata(const LoraSpec& spec);
// The reverse: rank 0 (off) when the metadata has no tern.lora_rank; Corruption naming `where` when it is
// there but incomplete or invalid for cfg.
Result<LoraSpec> LoraFromMetadata(const std::map<std::string, std::string>& metadata, const GptConfig& cfg,
                                  const std::string& where);

// "qkv,attproj,fc,fcproj" (any subset, any order; "all") -> bits; an unknown name lists the known ones.
Result<uint8_t> ParseLoraTargets(const std::string& csv);
std::string LoraTargetNames(uint8_t targets);  // in layout order, comma-separated

// One adapted matrix per layer: the base tensor's name and its per-layer shape [out, in].
struct LoraMatrix {
  std::string base;  // "qkvw", "attprojw", "fcw", "fcprojw"
  int out = 0, in = 0;
  size_t per_layer() const { return static_cast<size_t>(out) * in; }
};
std::vector<LoraMatrix> LoraMatrices(const GptConfig& cfg, const LoraSpec& spec);

// The adapters' tensors, two per adapted matrix: "lora_a.<base>" [L, r, in] and "lora_b.<base>" [L, out, r],
// offsets from `offset` on (the base model's parameter count). Weight decay applies to both (PEFT trains
// them with the optimizer's weight decay).
std::vector<ParamTensor> LoraParamLayout(const GptConfig& cfg, const LoraSpec& spec, size_t offset);
size_t LoraParamCount(const GptConfig& cfg, const LoraSpec& spec);
// Initial adapters (A uniform, B zero), deterministic for a seed; LoraParamCount elements.
std::vector<float> LoraInitialWeights(const GptConfig& cfg, const LoraSpec& spec, uint64_t seed);

// Floats of the model's LoRA scratch for micro-batches of up to `rows` = B*T rows: one layer's merged
// matrices (fp32, and their bf16 copy under bf16 compute), s*A and B*s of one layer, s*I [r, r], a [2C] sink
// for the frozen layer norms' parameter gradients, and the backward's x (sA)^T and dy (Bs) [rows, r] each.
size_t LoraScratchFloats(const GptConfig& cfg, const LoraSpec& spec, bool bf16, size_t rows);

// The memory of training with LoRA from the estimate without it (GptMemoryEstimate, any world and ZeRO
// stage): the adapters join the weights (and their bf16 copy), gradients and AdamW moments are the adapters'
// only (ZeRO-1 shards those), and the LoRA scratch (for `rows` = B*T) joins the backward scratch.
GptMemory WithLora(GptMemory m, const GptConfig& cfg, const LoraSpec& spec, bool bf16, size_t rows,
                   int world = 1, ZeroStage zero = ZeroStage::kNone, int rank = 0);

// Training FLOPs per token with LoRA (GptFlopsPerToken without): the forward and the input gradients of every
// matmul, 4 (12 L C^2 + C V), attention's 12 L T C, and the adapters' gradient products, 4 r (in + out) per
// adapted matrix and layer; no weight gradient of a frozen matrix. The trainer's MFU, `tern bench` and the
// planner use it alike.
double LoraFlopsPerToken(const GptConfig& cfg, const LoraSpec& spec, int T);

// Host merge of a parameter buffer with adapters (GptParamCount + LoraParamCount elements) into the base
// model's (GptParamCount): W + B (s A), in double. The trainer exports the device's merge (the very matrices
// its forward multiplied); this one is for checkpoints read without a model (`tern ckpt export`).
std::vector<float> MergeLoraOnHost(const GptConfig& cfg, const LoraSpec& spec,
                                   const std::vector<float>& params);

}  // namespace tern
