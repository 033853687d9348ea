// Which GPT the user wants to train: a named GPT-2 preset, a parameter budget ("--params 1.3B" gives a
// GPT-2-shaped config of about that size) or the `model:` block of a tern YAML config.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "model/gpt_config.h"

namespace tern::plan {

struct ModelChoice {
  GptConfig cfg;
  std::string label;  // "gpt2-124m", "~1.3B (L44 H24 C1536 ...)", "configs/demo.yaml"
};

// A GPT-2-shaped config with about `params` parameters. Depth follows the GPT-2 family's own growth
// (L = 12 * (P / 124M)^0.55, fitted to 12/24/36/48 layers at 124M..1.5B), width is the multiple of 64
// (head size 64) whose parameter count is closest to the target.
Result<GptConfig> GptConfigForParams(double params, int vocab_size = 50257, int block_size = 1024);

inline constexpr int kAssumedTokenizerVocab = 4096;

// Reads n_layer/n_head/n_embd/vocab_size/block_size from the `model:` block of a YAML file;
// missing keys keep the gpt2-124m values; vocab_size 0 ("the tokenizer's") becomes 4096.
Result<GptConfig> LoadModelYaml(const std::string& path);

// --model (a preset of the model layer's table, GptPreset, or a YAML path) and --params are alternatives;
// exactly one must be given.
Result<ModelChoice> ResolveModel(const std::string& model_arg, const std::string& params_arg);

}  // namespace tern::plan
