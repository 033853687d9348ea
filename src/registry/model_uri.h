// models:/NAME, models:/NAME@3, models:/NAME@production -> a local directory that LoadModelWeights reads
// (model.safetensors + tokenizer.model, verified against the registry's hashes). Anything else comes back
// unchanged, so a command calls it on whatever model path it was given.
//
// The registry is $TERN_REGISTRY, else $TERN_HOME/registry (default ~/.tern/registry); a signed entry needs
// the key in the file named by $TERN_REGISTRY_KEY_FILE.
#pragma once

#include <string>

#include "core/status.h"

namespace tern::registry {

inline constexpr char kModelUriScheme[] = "models:/";
bool IsModelUri(const std::string& path);
std::string ModelUriRef(const std::string& uri);  // models:/NAME@REF -> "NAME@REF" (for ParseModelRef)
Result<std::string> ResolveModelUri(const std::string& path_or_uri);
// models:/NAME@production -> models:/NAME@3, the version the alias names now (what a run records, so its
// lineage stays true when the alias moves on). Anything else comes back unchanged.
Result<std::string> PinModelUri(const std::string& path_or_uri);
// `tern ckpt export models:/...`: the registered weights (Hugging Face GPT-2 names, fp32) written to `out`.
Status ExportModelUri(const std::string& uri, const std::string& out);

}  // namespace tern::registry
