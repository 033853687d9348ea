// metrics.jsonl: one JSON object per line, flushed as written so a crash loses at most the last line
// and a live reader (`tail -f`, the report, the planner's calibration) always sees whole lines.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace tern {

class RunLog {
 public:
  RunLog() = default;
  ~RunLog();
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;

  Status Open(const std::string& path, bool append);
  // A log never opened discards its rows (the data-parallel ranks other than 0 keep none).
  Status Write(const nlohmann::json& row);
  const std::string& path() const { return path_; }

 private:
  FILE* file_ = nullptr;
  std::string path_;
};

// Dollars for a run priced by the hour: cumulative cost and cost per million tokens.
struct CostMeter {
  double price_per_hour = 0;
  bool enabled() const { return price_per_hour > 0; }
  double CostUsd(double elapsed_s) const { return price_per_hour * elapsed_s / 3600.0; }
  double UsdPerMillionTokens(double tokens_per_s) const {
    return tokens_per_s > 0 ? price_per_hour / 3600.0 / tokens_per_s * 1e6 : 0;
  }
};

}  // namespace tern
