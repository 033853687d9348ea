// PIPELINE.yaml (`tern pipeline PIPELINE.yaml`): ParsePipelineSpec, what LoadPipelineSpec runs on the file.
#include <cstddef>
#include <cstdint>
#include <string>

#include "pipeline/pipeline_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto spec = tern::pipeline::ParsePipelineSpec(text, "/fuzz/pipeline.yaml");
  if (!spec.ok()) return 0;
  if (spec->name.empty() || spec->alias.empty()) __builtin_trap();  // the checks it promises
  (void)tern::pipeline::MetricName(spec->metric);
  return 0;
}
