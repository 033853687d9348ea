// SWEEP.yaml (`tern sweep SWEEP.yaml`): ParseSweepSpec, then what the sweep does with a spec that parses
// before any trial runs: its rungs (RungSteps), its trial count (TrialCount) and the first trials' parameters
// (SampleTrial, random or the grid's mixed radix).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "sweep/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto spec = tern::sweep::ParseSweepSpec(text, "/fuzz/sweep.yaml");
  if (!spec.ok()) return 0;
  (void)tern::sweep::RungSteps(spec->asha);
  const int n = tern::sweep::TrialCount(*spec);
  if (n < 1) __builtin_trap();  // a spec that parses must have a trial to run
  for (int i = 0; i < std::min(n, 4); i++) (void)tern::sweep::SampleTrial(*spec, i);
  if (n > 4) (void)tern::sweep::SampleTrial(*spec, n - 1);
  return 0;
}
