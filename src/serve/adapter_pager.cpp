#include "serve/adapter_pager.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace tern {

AdapterPager::AdapterPager(ServedAdapters* adapters, Loader loader, int max_loaded, ServeMetrics* metrics)
    : adapters_(adapters),
      loader_(std::move(loader)),
      max_loaded_(std::max(max_loaded, 0)),
      metrics_(metrics) {}

Result<int> AdapterPager::Acquire(const std::string& name, Engine* engine) {
  for (int attempt = 0; attempt < 4; attempt++) {
    auto entry = adapters_->Touch(name);
    if (!entry) return Status::NotFound(fmt::format("no LoRA adapter '{}' is served", name));
    if (entry->id != 0) return entry->id;
    std::lock_guard<std::mutex> lock(load_mu_);
    entry = adapters_->Touch(name);  // another request may have read it back while this one waited
    if (!entry) return Status::NotFound(fmt::format("no LoRA adapter '{}' is served", name));
    if (entry->id != 0) return entry->id;
    const auto t0 = std::chrono::steady_clock::now();
    Result<LoraAdapter> adapter =
        loader_ ? loader_(entry->source)
                : Result<LoraAdapter>(Status::Internal("tern serve has no adapter loader"));
    if (!adapter.ok())
      return Status::Unavailable(
          fmt::format("LoRA adapter '{}' is not in memory and could not be read back "
                      "from {}: {}",
                      name, entry->source, adapter.status().message()));
    MakeRoomLocked(engine, name, 1);
    TERN_ASSIGN_OR_RETURN(int id, engine->AddAdapter(*adapter));
    if (!adapters_->SetId(name, 0, id)) {  // unloaded or replaced while it was read: look again
      (void)engine->RemoveAdapter(id);
      continue;
    }
    if (metrics_) {
      metrics_->lora_loads++;
      metrics_->lora_load_ns += static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
              .count());
    }
    return id;
  }
  return Status::Unavailable(
      fmt::format("LoRA adapter '{}' was replaced or unloaded while it was read back; retry", name));
}

void AdapterPager::MakeRoom(Engine* engine, const std::string& keep) {
  if (max_loaded_ == 0) return;
  std::lock_guard<std::mutex> lock(load_mu_);
  MakeRoomLocked(engine, keep, 0);
}

void AdapterPager::MakeRoomLocked(Engine* engine, const std::string& keep, int incoming) {
  if (max_loaded_ == 0) return;
  std::vector<ServedAdapters::Entry> loaded;
  for (ServedAdapters::Entry& e : adapters_->List())
    if (e.id != 0 && e.name != keep) loaded.push_back(std::move(e));
  const int keep_loaded = adapters_->Find(keep).value_or(ServedAdapters::Entry{}).id != 0 ? 1 : 0;
  // Least recently used first; among them, those no request is using before those some request is.
  std::vector<std::pair<bool, const ServedAdapters::Entry*>> order;
  for (const auto& e : loaded) order.push_back({engine->adapter_in_use(e.id), &e});
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    if (a.first != b.first) return !a.first;
    return a.second->last_used < b.second->last_used;
  });
  int in_memory = static_cast<int>(loaded.size()) + keep_loaded + incoming;
  for (const auto& [busy, e] : order) {
    if (in_memory <= max_loaded_) break;
    if (!adapters_->SetId(e->name, e->id, 0)) continue;  // changed meanwhile (an unload): not ours to retire
    (void)engine->RemoveAdapter(e->id);                  // its running requests finish on it
    in_memory--;
    if (metrics_) metrics_->lora_evictions++;
    if (busy)
      std::fprintf(
          stderr,
          "tern serve: LoRA adapter %s left memory while requests still use it (every loaded adapter "
          "is in use: raise --max-loaded-loras)\n",
          e->name.c_str());
  }
}

}  // namespace tern
