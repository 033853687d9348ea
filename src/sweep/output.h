// What a sweep shows: the table, the JSON, the best trial's config as YAML and the offline HTML page
// (parallel coordinates of parameters -> loss, loss-vs-$ curves; Chart.js inlined as src/report/ does).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "sweep/runner.h"

namespace tern::sweep {

std::string SweepTable(const SweepResult& r);
nlohmann::json SweepJson(const SweepSpec& spec, const SweepResult& r);
// The base config with the best trial's parameters and train.steps = max_steps, as `tern train` loads it.
[[nodiscard]] Result<std::string> BestConfigYaml(const SweepSpec& spec, const SweepResult& r);
// The page; `chartjs` is Chart.js's text (report::ReadChartJs).
std::string SweepHtml(const SweepSpec& spec, const SweepResult& r, const std::string& chartjs);
// DIR/best.yaml, DIR/sweep.json and DIR/sweep.html.
[[nodiscard]] Status WriteSweepOutputs(const SweepSpec& spec, const SweepResult& r);

}  // namespace tern::sweep
