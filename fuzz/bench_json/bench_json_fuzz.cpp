// `tern bench --json` output, the planner's calibration input (ParseBenchJson: record version, model shape,
// batch geometry, precision, device, measured rates), and `tern bench --dist --json` output, its link
// calibration (ParseDistBenchJson: communicator, world, nodes, latency, bus bandwidth, the sizes measured).
#include <cstddef>
#include <cstdint>
#include <string>

#include "plan/calibration.h"
#include "plan/link_calibration.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto b = tern::plan::ParseBenchJson(text, "fuzz.json");
  (void)b.ok();
  auto d = tern::plan::ParseDistBenchJson(text, "fuzz.json");
  (void)d.ok();
  return 0;
}
