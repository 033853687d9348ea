// GPT-2 for serving: one forward over a ragged batch of sequences with a paged KV cache, written over the
// Backend interface like model/gpt.h (the model never dereferences a device pointer).
//
// A batch concatenates the new tokens of several sequences as rows: a prompt (or a chunk of it) being
// prefilled contributes many rows, a decoding sequence one. Embedding, layernorm, the matmuls and GELU run
// over all rows at once; attention runs per sequence over its KV blocks (Backend::PagedAttentionForward).
// Only the rows whose next token is wanted go through the final layernorm and the LM head.
//
// Every op is row-independent (backend.h), so a sequence gets bitwise the same logits whichever sequences
// share its batch. With quantize = int8 the five matmul weights per layer and the tied LM head are
// per-output-channel int8 (Backend::MatmulInt8); with int4, 4-bit in groups of 64 k with a scale each
// (Backend::MatmulInt4); embeddings, biases and layernorms stay fp32. With bf16 the
// four matmul weights per layer and the tied token table (LM head and embedding) are bf16, rounded to
// nearest even: Backend::Matmul of fp32 activations by bf16 weights with fp32 sums (Compute::kBF16 on a GPU,
// where cuBLASLt multiplies bf16 by bf16), and Backend::EmbedTokensBF16.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "infer/adapter.h"
#include "model/gpt_config.h"

namespace tern {

// The matmul weights' format (`--weights`): kNone is fp32.
enum class Quantize { kNone, kInt8, kBF16, kInt4 };
Result<Quantize> ParseWeights(const std::string& name);   // "fp32" | "bf16" | "int8" | "int4"
Result<Quantize> ParseQuantize(const std::string& name);  // the older --quantize: "none" | "int8" (| "bf16")
const char* QuantizeName(Quantize q);                     // "none" | "int8" | "bf16" | "int4"
const char* WeightsName(Quantize q);                      // "fp32" | "int8" | "bf16" | "int4"
// "fp32" | "bf16" | "int8" | "auto": bf16 keys and values once the weights are bf16, int8 or int4 anyway
// (half the cache bytes per token, loss within 1e-5), fp32 with fp32 weights (the logits of the training
// forward).
Result<DType> ParseKvDtype(const std::string& name, Quantize weights);
const char* KvDtypeName(DType t);

struct InferenceModelOptions {
  Quantize quantize = Quantize::kNone;
  DType kv_dtype = DType::kF32;  // KV cache elements: kF32, kBF16 (half the bytes) or kI8 (backend.h)
  int block_size = 16;           // tokens per KV block
  int num_blocks = 64;           // KV blocks in the pool (all layers)
  int max_rows = 256;            // rows (new tokens) per forward
  int max_seqs = 32;             // sequences per forward; 1: an engine of one stream, which never batches,
                                 // so its bf16 matmuls may pick their kernel by row count (backend.h)
  int max_logit_rows = 0;        // rows whose logits one forward may return (>= max_seqs); 0 = max_seqs + 64
                                 // (the extra rows score prompts: echo with logprobs); evaluation: max_rows
};

// The inputs of one forward, on the host (InferenceModel uploads them).
struct ForwardBatch {
  std::vector<int32_t> tokens, positions, slots;  // [N]; slot = block * block_size + offset of the row's KV
  std::vector<int32_t> seqs;                      // [S,3]: q_start, q_len, ctx_len (backend.h)
  std::vector<int32_t> block_tables;              // [S, max_blocks], unused entries 0
  std::vector<int32_t> logit_rows;                // rows whose next-token logits are wanted, in output order
  std::vector<int32_t> adapters;  // [S] each sequence's LoRA adapter (0 = the base model); empty = all base
  int N() const { return static_cast<int>(tokens.size()); }
  int S() const { return static_cast<int>(seqs.size() / 3); }
  void Clear();
};

class InferenceModel {
 public:
  // params: the flat fp32 parameter buffer (GptParamLayout order), e.g. from ReadGptSafetensors.
  static Result<std::unique_ptr<InferenceModel>> Create(Backend* backend, const GptConfig& cfg,
                                                        const std::vector<float>& params,
                                                        const InferenceModelOptions& options);
  // KV bytes per block over all layers (keys and values): 2 * L * KvBlockBytes (backend.h).
  static size_t KvBytesPerBlock(const GptConfig& cfg, int block_size, DType kv_dtype);

  // Serves a LoRA adapter beside the base weights (multi-LoRA, infer/adapter.h): a sequence of the batch
  // with adapter i (ForwardBatch::adapters) computes each adapted matrix as x W^T + b + (x A^T)(s B)^T, the
  // adapters in fp32 beside fp32 weights and in bf16 beside bf16 or int8 ones (vLLM's punica path computes
  // in the model's dtype); sequences with other adapters, or none, are unaffected. The shape must be the
  // model's (the caller checks the base fingerprint: CheckAdapterBase). Returns i: 1 for the first, 2 for the
  // next... Ids are never reused: one removed stays a hole (RemoveAdapter).
  Result<int> AddAdapter(const LoraAdapter& adapter);
  // Frees adapter id's weights; no sequence of a later batch may name it (the engine sees to that).
  void RemoveAdapter(int id);
  // The highest id given (removed ones included), and whether id is served now.
  int num_adapters() const { return static_cast<int>(adapters_.size()); }
  // Bytes a served adapter takes per parameter: 4 (fp32) beside fp32 weights, 2 (bf16) beside bf16 or int8.
  size_t adapter_bytes_per_param() const { return opt_.quantize == Quantize::kNone ? 4 : 2; }
  bool has_adapter(int id) const { return id >= 1 && id <= num_adapters() && adapters_[id - 1].rank > 0; }
  // The identity of adapter id's weights and spec (xxh3, never 0): two adds of the same adapter file give
  // the same value, other weights another. The engine roots each adapter's prefix-cache chain at it.
  uint64_t adapter_fingerprint(int id) const { return adapters_[id - 1].fingerprint; }

  // Runs the batch: writes its keys and values into the cache and returns the logits of logit_rows,
  // [logit_rows.size(), V] in host memory, valid until the next Forward. A CPU backend's buffer is returned
  // as it is (copying 16 rows of GPT-2's logits cost 0.3 ms a step); a GPU's is downloaded first.
  const float* Forward(const ForwardBatch& batch);

  // Seconds per op, summed over forwards, while set (`serve_load forward`, bench/serve_load.cpp): every op is
  // followed by Backend::Synchronize, so set it only to measure. nullptr (the default) turns it off.
  void set_profile(std::map<std::string, double>* seconds_by_op) { profile_ = seconds_by_op; }

  // Zeroes every KV block (`tern bench --serve`: decode steps timed over a cache of a chosen length without
  // prefilling it; attention over zero keys and values costs what it costs over real ones).
  void ZeroKvCache();

  const GptConfig& config() const { return cfg_; }
  const InferenceModelOptions& options() const { return opt_; }
  int max_blocks_per_seq() const { return max_blocks_; }  // block_size(config) / block_size, rounded up
  Backend* backend() const { return backend_; }
  size_t weight_bytes() const { return weight_bytes_; }  // bytes of the weights the forward reads
  // Device bytes of all parameters held (fp32 tensors + bf16 or int8 weights), without KV cache or
  // activations.
  size_t param_bytes() const;

 private:
  struct Linear {  // one matmul weight [OC, K]: fp32, bf16, packed int8 or int4 with their scales
    const float* f32 = nullptr;
    const uint16_t* bf16 = nullptr;
    const int8_t* q = nullptr;
    const uint8_t* q4 = nullptr;
    const float* scale = nullptr;
  };
  InferenceModel(Backend* backend, const GptConfig& cfg, const InferenceModelOptions& options);
  void Init(const std::vector<float>& params);
  void RunLinear(float* out, const float* inp, const Linear& w, const float* bias, int N, int OC, int K);
  const float* P(const char* name, int layer = 0) const;  // device pointer of a fp32 tensor (of a layer)
  // out[rows, OC] += the adapters' term for matrix `target` (0 qkv, 1 attproj, 2 fc, 3 fcproj) of layer l,
  // for each run of consecutive sequences that share an adapter.
  void ApplyAdapters(float* out, const float* inp, int target, int l, const ForwardBatch& batch, int OC,
                     int K);
  struct LayerParams {  // the fp32 vectors of one layer, looked up once
    const float *ln1w, *ln1b, *qkvb, *attprojb, *ln2w, *ln2b, *fcb, *fcprojb;
  };

  Backend* backend_;
  GptConfig cfg_;
  InferenceModelOptions opt_;
  int max_blocks_ = 0;
  size_t weight_bytes_ = 0;
  std::vector<ParamTensor> layout_;  // the tensors of params_, offsets into it
  DeviceBuffer params_;              // the fp32 tensors of layout_ (all of them with fp32 weights; see Init)
  std::vector<DeviceBuffer> weight_buffers_;  // bf16 weights, or packed int8/int4 weights and their scales
  std::vector<Linear> qkvw_, attprojw_, fcw_, fcprojw_;
  std::vector<LayerParams> layer_params_;
  std::map<std::string, double>* profile_ = nullptr;
  std::unique_ptr<Linear> head_;
  struct Adapter {  // one served LoRA adapter: A and s*B of each adapted matrix, [L * 4] (null: not adapted)
    int rank = 0;   // 0: removed
    bool bf16 = false;         // its matrices in bf16 (beside bf16 or int8 weights), else fp32
    uint64_t fingerprint = 0;  // adapter_fingerprint
    DeviceBuffer weights;
    std::vector<const void*> a, b;
  };
  std::vector<Adapter> adapters_;
  DeviceBuffer lora_mid_, lora_out_;  // [max_rows, max rank] and [max_rows, 4C]
  DeviceBuffer k_cache_, v_cache_;    // [L, num_blocks, NH, hs, bs] keys, [L, num_blocks, NH, bs, hs] values
  DeviceBuffer acts_;                 // activations for max_rows rows
  DeviceBuffer ints_;                 // uploaded batch metadata
  std::vector<float> host_logits_;    // GPU backends: the logits downloaded for the sampler
};

}  // namespace tern
