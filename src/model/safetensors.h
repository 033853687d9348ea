// GPT weights as a .safetensors file (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length, a JSON header {name: {dtype, shape, data_offsets}}, then raw data.
// Tensor names and shapes are Hugging Face's GPT-2 ones (transformer.h.0.attn.c_attn.weight, ...),
// whose Conv1D weights are stored [in, out], so tern's [out, in] matrices are transposed on export.
// The tern config travels in __metadata__ so `tern generate` can rebuild the model from the file.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/gpt_config.h"

namespace tern {

// The model's shape as __metadata__ strings (format "pt", tern.n_layer ... tern.block_size): every
// safetensors file tern writes carries it, so each one rebuilds its model without a config.
std::map<std::string, std::string> ShapeMetadata(const GptConfig& cfg);
// The reverse, validated; Corruption naming `where` when a key is missing or the shape is invalid.
Result<GptConfig> ShapeFromMetadata(const std::map<std::string, std::string>& metadata,
                                    const std::string& where);

Status WriteGptSafetensors(const std::string& path, const GptConfig& cfg, const std::vector<float>& params,
                           const std::map<std::string, std::string>& extra_metadata = {});

struct LoadedWeights {
  GptConfig config;
  std::vector<float> params;  // tern layout
  std::map<std::string, std::string> metadata;
};
Result<LoadedWeights> ReadGptSafetensors(const std::string& path);
// The parsing half of ReadGptSafetensors: the file's bytes (named `path` in messages) into weights.
Result<LoadedWeights> ParseGptSafetensors(std::string_view bytes, const std::string& path);

}  // namespace tern
