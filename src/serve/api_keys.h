// The `tern serve --api-keys FILE` file: its entries (key id, secret, project, per-minute limits) and the
// constant-time comparison every key check uses. A pure parser (ParseApiKeys) so that the fuzz harness
// (fuzz/api_keys/) runs the code `tern serve` runs; usage.h holds what the server does with the keys.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tern {

struct ApiKeyEntry {
  std::string id;               // short, non-secret name (metrics, logs, usage file)
  std::string key;              // the secret
  std::string project;          // who pays
  double requests_per_min = 0;  // 0 = no limit
  double tokens_per_min = 0;    // prompt + generated tokens; 0 = no limit
  bool admin = false;           // may load and unload LoRA adapters (--allow-lora-updates)
  int priority = 0;             // its requests' priority is at least this (lower is sooner; batch keys: 10)
};

// The --api-keys file:
//   keys:
//     - id: search-prod          # [A-Za-z0-9_.-]{1,64}, unique
//       key: sk-...              # or key_env: NAME (the key is read from $NAME)
//       project: search
//       requests_per_min: 600    # optional
//       tokens_per_min: 200000   # optional
//       admin: true              # optional: may load and unload LoRA adapters (--allow-lora-updates)
//       priority: 10             # optional: a floor on its requests' `priority` (lower is admitted sooner)
// Errors name the file and the line.
// ParseApiKeys: the file's text; `path` names it in messages. LoadApiKeys reads the file, then parses it.
[[nodiscard]] Result<std::vector<ApiKeyEntry>> ParseApiKeys(std::string_view text, const std::string& path);
[[nodiscard]] Result<std::vector<ApiKeyEntry>> LoadApiKeys(const std::string& path);

// a == b without an early exit, so the time taken does not reveal how much of a guess was right.
bool ConstantTimeEquals(const std::string& a, const std::string& b);

}  // namespace tern
