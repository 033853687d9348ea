// Test-only: a run's metrics.jsonl read back (docs/formats.md): the training loss of each step.
#pragma once

#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace tern::testing {

// step -> loss from RUN_DIR/metrics.jsonl's step rows (not the event rows); a step logged twice (replayed
// after a resume) keeps its last row. A missing file gives an empty map.
inline std::map<int, double> StepLosses(const std::string& run_dir) {
  std::map<int, double> out;
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (!j.contains("event") && j.contains("loss")) out[j["step"].get<int>()] = j["loss"].get<double>();
  }
  return out;
}

}  // namespace tern::testing
