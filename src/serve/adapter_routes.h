// LoRA adapters loaded and unloaded while `tern serve` runs (--allow-lora-updates; vLLM's
// /v1/load_lora_adapter and /v1/unload_lora_adapter, docs/finetune.md "Serving adapters"). The server checks
// that the route is on and the key may use it; these do the rest and say what happened as JSON, or an
// OpenAI-style error.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <variant>

#include "infer/engine.h"
#include "serve/adapter_pager.h"
#include "serve/api.h"
#include "serve/served_adapters.h"

namespace tern {

struct AdapterRouteContext {
  Engine* engine = nullptr;
  ServedAdapters* adapters = nullptr;
  std::string model_name;  // the base model's: no adapter may take it
  std::function<Result<LoraAdapter>(const std::string& path)> loader;
  int max_adapters = 0;           // > 0: at most this many served at once
  std::string who;                // the key id that asked (the log line)
  std::string lora_root;          // non-empty: lora_path must pass CheckLoraPath
  AdapterPager* pager = nullptr;  // --max-loaded-loras: a load makes room in memory for itself
  // models:/NAME@alias -> models:/NAME@V (ServerOptions::lora_pin): what is loaded and kept as its source
  std::function<Result<std::string>(const std::string& path)> pin;
};

// `tern serve --lora-root DIR`: whether the load route may read `path`: a models:/ URI (the registry, whose
// entries are verified on read) or a local path that lies inside root once symlinks and ".." are resolved.
// Anything else (another directory, s3://) is refused with a message naming the flag (the route: 403). An
// empty root allows all.
Status CheckLoraPath(const std::string& path, const std::string& root);

// {"lora_name": NAME, "lora_path": PATH}: reads the adapter (c.loader: checked against the served weights;
// a registry alias pinned to the version it names now, c.pin), adds it to the engine and serves it as NAME. A
// NAME already served is replaced: requests already running finish on the old adapter, new ones get the new
// one (a registry alias moved: load models:/NAME@REF again). The response: {"object": "lora_adapter", "id",
// "parent", "root", "rank", "alpha", "bytes", "replaced"}.
std::variant<std::string, ApiError> LoadAdapterRoute(std::string_view body, const AdapterRouteContext& c);
// {"lora_name": NAME}: stops serving NAME (requests already running finish on it; its weights are freed
// after them). The response: {"object": "lora_adapter", "id", "deleted": true}.
std::variant<std::string, ApiError> UnloadAdapterRoute(std::string_view body, const AdapterRouteContext& c);

}  // namespace tern
