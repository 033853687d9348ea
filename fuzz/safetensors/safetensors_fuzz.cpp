// safetensors bytes: the checkpoint parser (ckpt::ParseSafetensors, header and tensor table: offsets,
// dtype x shape sizes) and the exported-model loader (ParseGptSafetensors: Hugging Face GPT-2 names,
// __metadata__ model shape, tern's transposes).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ckpt/safetensors_image.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto parsed = tern::ckpt::ParseSafetensors(bytes);
  if (parsed.ok()) {
    for (const auto& [name, t] : parsed->tensors) {  // every view lies inside the input
      if (!t.data.empty() &&
          (t.data.data() < bytes.data() || t.data.data() + t.data.size() > bytes.data() + size))
        __builtin_trap();
    }
  }
  auto weights = tern::ParseGptSafetensors(bytes, "fuzz.safetensors");
  (void)weights.ok();
  return 0;
}
