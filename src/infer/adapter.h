// LoRA adapters on their own (docs/finetune.md, "Serving adapters"): what `tern serve BASE --lora NAME=PATH`
// loads to serve many fine-tunes of one model from one copy of its weights (vLLM's multi-LoRA, PEFT's
// adapter_model.safetensors).
//
// A LoRA run writes RUN/adapter.safetensors beside its merged model.safetensors: the adapters in tern's
// layout ("lora_a.<base>" [L, r, in], "lora_b.<base>" [L, out, r], model/lora.h), the model's shape, the LoRA
// spec, and the fingerprint of the base weights they were trained on (tern.base_xxh3), so that an adapter is
// never applied to another model. A LoRA run's checkpoint holds the same adapters beside its frozen base, and
// serves as an adapter just as well.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/gpt_config.h"
#include "model/lora.h"

namespace tern {

inline constexpr char kAdapterFile[] = "adapter.safetensors";

struct LoraAdapter {
  GptConfig config;           // the model's shape
  LoraSpec spec;              // rank, alpha, targets (enabled)
  std::vector<float> params;  // LoraParamCount(config, spec) floats, LoraParamLayout(config, spec, 0) order
  std::string base_fingerprint;  // BaseFingerprint of the weights the adapters were trained on
};

// The identity of a model's weights: xxh3-64 (hex) of its GptParamCount fp32 parameters' bytes (the first
// ones of `params`; a buffer with adapters after them is fingerprinted by its base).
std::string BaseFingerprint(const GptConfig& cfg, const std::vector<float>& params);

// The adapter file's bytes; extra metadata joins the file's.
Result<std::string> LoraAdapterBytes(const LoraAdapter& adapter,
                                     const std::map<std::string, std::string>& extra_metadata = {});
// Writes them atomically (temp file + rename).
Status WriteLoraAdapter(const std::string& path, const LoraAdapter& adapter,
                        const std::map<std::string, std::string>& extra_metadata = {});
// An adapter file's bytes (`where` names it in errors).
Result<LoraAdapter> ParseLoraAdapter(std::string_view bytes, const std::string& where);

// Reads an adapter from a LoRA run directory (its adapter.safetensors), an adapter file, or a LoRA run's
// checkpoint (a step directory, local or s3://; the fingerprint of its frozen base). A source without
// adapters gets an error that says what it is and what to give instead.
Result<LoraAdapter> LoadLoraAdapter(const std::string& path);

// `--lora NAME=PATH` (vLLM's --lora-modules): the API model name and where the adapter is. Without "NAME=",
// the name is PATH's last component (a run directory's name), or NAME of a registry's models:/NAME@REF. Names
// are letters, digits and . _ - : / (an API model id and a Prometheus label value as they are).
struct LoraModule {
  std::string name, path;
};
Result<LoraModule> ParseLoraModule(const std::string& arg);
// OK when name is 1-128 letters, digits and . _ - : / (what --lora and POST /v1/load_lora_adapter accept).
Status CheckAdapterName(const std::string& name);

// OK when the adapter fits the served model: the same shape and the very base weights it was trained on;
// otherwise InvalidArgument naming both and the fix (serve the model the LoRA run started from, its
// train.init_from).
Status CheckAdapterBase(const LoraAdapter& adapter, const std::string& adapter_path, const GptConfig& cfg,
                        const std::string& base_fingerprint, const std::string& base_path);

}  // namespace tern
