// metrics.jsonl, as `tern report`, `tern diagnose`, the sweep and the FinOps page read it (ReadMetricsFile):
// each line of the input is one row. Two readers are checked against each other: wherever the simdjson fast
// path reads a line (ReadStepOrEvalFast), nlohmann's ParseRunLine must accept it and give the same row; a
// difference aborts (a finding), as does any crash or UB in either.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "metrics/run_record.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    tern::RunRow fast;
    const bool taken = tern::ReadStepOrEvalFast(line, &fast);
    auto ref = tern::ParseRunLine(line, "fuzz line");
    if (!taken) continue;
    if (!ref.ok()) {
      std::fprintf(stderr, "fast path read a line the reference refuses: %s\n  %s\n", line.c_str(),
                   ref.status().message().c_str());
      std::abort();
    }
    const std::string a = tern::ToJson(fast.record).dump(), b = tern::ToJson(ref->record).dump();
    if (a != b || fast.version != ref->version) {
      std::fprintf(stderr, "readers differ on %s\n  fast v%d %s\n  ref  v%d %s\n", line.c_str(), fast.version,
                   a.c_str(), ref->version, b.c_str());
      std::abort();
    }
  }
  return 0;
}
