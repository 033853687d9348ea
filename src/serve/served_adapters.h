// The LoRA adapters a server answers for, by API model name (`tern serve --lora NAME=PATH`, and with
// --allow-lora-updates POST /v1/load_lora_adapter and /v1/unload_lora_adapter, vLLM's routes): each name's
// engine adapter id (Engine::AddAdapter), where it came from and when. With `--max-loaded-loras` some are
// served but not in memory (id 0): AdapterPager reads them back when a request names one. Thread-safe:
// requests look names up while an operator loads and unloads.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace tern {

class ServedAdapters {
 public:
  struct Entry {
    std::string name;
    int id = 0;              // the engine's adapter id (GenerationRequest::adapter); 0: not in memory
    std::string source;      // the path or models:/ URI it was loaded from
    int64_t created = 0;     // unix seconds: when it was loaded (/v1/models "created")
    uint64_t last_used = 0;  // the order of use: Put and Touch set it above every other entry's
  };
  // Serves e.name: adds it, or replaces the entry of that name (then *replaced, if given, gets the old
  // one). False, changing nothing, when the name is new and `limit` (> 0) adapters are already served.
  bool Put(const Entry& e, size_t limit, std::optional<Entry>* replaced);
  std::optional<Entry> Find(const std::string& name) const;
  // Find, and marks the entry as the most recently used.
  std::optional<Entry> Touch(const std::string& name);
  // Sets name's engine id to `id` if its entry is still there with the id `expected`; false otherwise (it
  // was unloaded, or replaced, in between).
  bool SetId(const std::string& name, int expected, int id);
  std::optional<Entry> Remove(const std::string& name);  // the entry that was removed
  std::vector<Entry> List() const;                       // in the order they were first loaded
  std::vector<std::string> Names() const;

 private:
  mutable std::mutex mu_;
  std::vector<Entry> entries_;
  uint64_t clock_ = 0;  // last_used's source
};

}  // namespace tern
