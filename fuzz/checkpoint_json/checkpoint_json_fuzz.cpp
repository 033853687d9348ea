// A checkpoint's JSON files: manifest.json (ckpt::Manifest::Parse, what every load and verify reads first)
// and trainer.json (ParseTrainerState, the trainer state a resume restores). The same input goes to both.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ckpt/format.h"
#include "train/trainer_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto m = tern::ckpt::Manifest::Parse(text);
  if (m.ok()) {  // what Parse accepts, ToJson writes back and Parse reads again
    auto again = tern::ckpt::Manifest::Parse(m->ToJson());
    if (!again.ok() || again->files.size() != m->files.size()) __builtin_trap();
  }
  auto t = tern::ParseTrainerState(text, "fuzz");
  (void)t.ok();
  return 0;
}
