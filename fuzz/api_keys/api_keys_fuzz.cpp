// The `tern serve --api-keys FILE` file: ParseApiKeys, what LoadApiKeys runs on the file's text. An entry's
// key_env names a variable; $HOME is set in the harness's environment, so key_env: HOME is the path that
// reads a key from the environment.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "serve/api_keys.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto keys = tern::ParseApiKeys(text, "/fuzz/keys.yaml");
  if (!keys.ok()) return 0;
  for (const tern::ApiKeyEntry& k : *keys)
    if (k.id.empty() || k.key.size() < 8 || k.project.empty()) __builtin_trap();  // what it promises
  return 0;
}
