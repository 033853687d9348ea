// Multiple-choice sets (`tern eval --choices`, the pipeline's evaluate.choices): ParseChoiceItems, what
// LoadChoiceItems runs on the file.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "infer/choices.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto items = tern::ParseChoiceItems(text, "/fuzz/set.jsonl");
  if (!items.ok()) return 0;
  // The checks it promises: at least one item, each with two or more non-empty endings and a label in range.
  if (items->empty()) __builtin_trap();
  for (const tern::ChoiceItem& it : *items) {
    if (it.endings.size() < 2 || it.label < 0 || it.label >= static_cast<int>(it.endings.size()))
      __builtin_trap();
    for (const auto& e : it.endings)
      if (e.empty()) __builtin_trap();
  }
  return 0;
}
