// Many LoRA adapters served from a few in memory (`tern serve --max-loaded-loras N`; S-LoRA's adapter
// paging, vLLM's --max-cpu-loras cache): every served adapter has a name and a source, at most N have their
// weights in the engine, and a request naming one that is not is held while it is read back from its source
// (a run directory, adapter file, checkpoint or models:/ URI: what it was first loaded from), making room by
// retiring the least recently used adapter no request is using (if every one is in use, the least recently
// used one: its running requests finish on it and its weights are freed after them, so memory may pass N by
// the adapters still finishing). docs/finetune.md, "Serving adapters".
#pragma once

#include <functional>
#include <mutex>
#include <string>

#include "core/status.h"
#include "infer/adapter.h"
#include "infer/engine.h"
#include "infer/metrics.h"
#include "serve/served_adapters.h"

namespace tern {

class AdapterPager {
 public:
  using Loader = std::function<Result<LoraAdapter>(const std::string& path)>;
  // max_loaded 0: every served adapter stays in memory (Acquire only looks up). metrics may be null.
  AdapterPager(ServedAdapters* adapters, Loader loader, int max_loaded, ServeMetrics* metrics);

  // The engine id of adapter `name` for a request about to be submitted, read back into the engine first if
  // it is not in memory. NotFound when no adapter of that name is served; Unavailable (naming the adapter,
  // its source and why) when it cannot be read back. An id may be retired again by another request's
  // Acquire before it is submitted (Engine::Submit's NotFound): acquire again.
  Result<int> Acquire(const std::string& name, Engine* engine);
  // Retires least recently used adapters until at most max_loaded are in memory (after a load route added
  // one). `keep` is never retired.
  void MakeRoom(Engine* engine, const std::string& keep);

  int max_loaded() const { return max_loaded_; }

 private:
  void MakeRoomLocked(Engine* engine, const std::string& keep, int incoming);

  ServedAdapters* adapters_;
  Loader loader_;
  int max_loaded_;
  ServeMetrics* metrics_;
  std::mutex load_mu_;  // one read-back or eviction at a time
};

}  // namespace tern
