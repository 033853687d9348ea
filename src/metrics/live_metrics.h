// Live metrics: the newest state of a training run, fed with the very rows the trainer writes to
// metrics.jsonl (so what is served equals the file), and its Prometheus text exposition (format 0.0.4).
// Names and types are listed in docs/report.md ("Live metrics").
#pragma once

#include <mutex>
#include <optional>
#include <string>

#include "metrics/run_record.h"

namespace tern {

// What the exposition is made of: the start row, the newest step and eval rows, and totals over the rows
// this process wrote.
struct LiveSnapshot {
  std::optional<StartRecord> start;
  std::optional<StepRecord> step;
  std::optional<EvalRecord> eval;
  double step_s_total = 0, data_wait_s_total = 0, comm_s_total = 0;
  double checkpoint_stall_s_total = 0;  // checkpoint rows' stall_ms + wait_ms, and a preemption's save_s
  int64_t checkpoints_total = 0, skipped_steps_total = 0;
};

// The Prometheus text for a snapshot: HELP and TYPE for every family that has a value, base units,
// `tern_` prefix. A family without a value yet (no step, no eval, no price) is left out.
std::string PrometheusText(const LiveSnapshot& s);

// Thread-safe: the trainer's thread observes rows, the server's thread renders them.
class LiveRunState {
 public:
  // A row as written to metrics.jsonl; rows the reader refuses are ignored (the file keeps them).
  void Observe(const nlohmann::json& row);
  void Observe(const RunRecord& record);
  LiveSnapshot Snapshot() const;
  std::string Text() const { return PrometheusText(Snapshot()); }

 private:
  mutable std::mutex mu_;
  LiveSnapshot s_;
};

}  // namespace tern
