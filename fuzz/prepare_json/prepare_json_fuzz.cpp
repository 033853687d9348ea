// prepare.json as `data.dir: s3://...` reads it from the store (train/remote_data.h): ParsePreparedManifest,
// what MirrorPreparedData, `tern plan --config` and `tern bench --config` run on the object's bytes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "data/prepare_manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto m = tern::ParsePreparedManifest(text, "s3://fuzz/data/prepare.json");
  if (!m.ok()) return 0;
  // The promises a fetch relies on: plain file names only, the tokenizer always, a vocabulary.
  if (m->vocab_size <= 0 || !m->files.count("tokenizer.model")) __builtin_trap();
  for (const std::string& f : m->files)
    if (f.empty() || f.find('/') != std::string::npos || f[0] == '.') __builtin_trap();
  return 0;
}
