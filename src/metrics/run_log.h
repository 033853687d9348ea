// metrics.jsonl: one JSON object per line, flushed as written so a crash loses at most the last line
// and a live reader (`tail -f`, the report, the planner's calibration) always sees whole lines.
#pragma once

#include <cstdio>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "metrics/run_record.h"

namespace tern {

class RunLog {
 public:
  RunLog() = default;
  ~RunLog();
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;

  Status Open(const std::string& path, bool append);
  // A log never opened discards its rows (the data-parallel ranks other than 0 keep none). A row without a
  // format version gets the current one (run_record.h); the observer, if any, then sees the row as written.
  [[nodiscard]] Status Write(nlohmann::json row);
  [[nodiscard]] Status Write(const RunRecord& record) { return Write(ToJson(record)); }
  // Called with every row written (the live metrics server's feed, metrics/live_metrics.h).
  void SetObserver(std::function<void(const nlohmann::json&)> observer) { observer_ = std::move(observer); }
  const std::string& path() const { return path_; }

 private:
  FILE* file_ = nullptr;
  std::string path_;
  std::function<void(const nlohmann::json&)> observer_;
};

// Dollars for a run priced by the hour: cumulative cost and cost per million tokens. Under `tern run`
// (docs/jobs.md) the cost is the job's, not the process's: `offset_usd` is what the job's earlier attempts
// cost, and `startup_s` bills this attempt's start-up (from its launch to the trainer's first clock tick).
struct CostMeter {
  double price_per_hour = 0;
  double offset_usd = 0;  // spent before this process by earlier attempts of the same job
  double startup_s = 0;   // seconds billed before the trainer's clock started
  bool enabled() const { return price_per_hour > 0; }
  // The spend so far, `elapsed_s` seconds after the trainer's clock started.
  double CostUsd(double elapsed_s) const {
    return offset_usd + price_per_hour * (startup_s + elapsed_s) / 3600.0;
  }
  double UsdPerMillionTokens(double tokens_per_s) const {
    return tokens_per_s > 0 ? price_per_hour / 3600.0 / tokens_per_s * 1e6 : 0;
  }
  // The trainer's clock starts now: bills the start-up since `billing_start_unix` (UTC seconds, the
  // attempt's launch; 0 = no start-up is billed, as for a plain `tern train`).
  void StartClock(double billing_start_unix);
};

}  // namespace tern
