// The training config: a YAML document (ParseTrainConfigYaml, what `tern train CONFIG` loads), then the
// `--set` overrides (ApplyOverride), one per line after a line "#--set". A config that loads and validates
// must also survive the round trip through TrainConfigToYaml (config.yaml in the run directory, what a resume
// reads) unchanged: it once did not for values holding non-UTF-8 bytes or control characters, which are now
// refused (docs/hardening.md). TERN_FUZZ_ROUNDTRIP=0 turns the check off.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "train/train_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const size_t split = text.find("#--set\n");
  tern::TrainConfig cfg;
  if (!tern::ParseTrainConfigYaml(text.substr(0, split), "fuzz.yaml", &cfg).ok()) return 0;
  if (split != std::string_view::npos) {
    std::string_view rest = text.substr(split + 7);
    while (!rest.empty()) {
      const size_t nl = rest.find('\n');
      if (!tern::ApplyOverride(std::string(rest.substr(0, nl)), &cfg).ok()) return 0;
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    }
  }
  if (!cfg.Validate().ok()) return 0;
  static const bool roundtrip = [] {
    const char* v = std::getenv("TERN_FUZZ_ROUNDTRIP");
    return v == nullptr || std::string_view(v) != "0";
  }();
  if (!roundtrip) return 0;
  const std::string yaml = tern::TrainConfigToYaml(cfg);
  tern::TrainConfig back;
  if (!tern::ParseTrainConfigYaml(yaml, "config.yaml", &back).ok()) __builtin_trap();
  if (tern::TrainConfigValues(back) != tern::TrainConfigValues(cfg)) __builtin_trap();
  return 0;
}
