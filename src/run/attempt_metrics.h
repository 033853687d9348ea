// What one attempt's trainer wrote to RUN_DIR/metrics.jsonl (docs/formats.md), read as it grows, from the
// offset where the attempt began: the heartbeat (the file grew), and the attempt's steps, tokens, time in
// steps and saves, and the work it redid after a resume.
#pragma once

#include <cstdint>
#include <string>

namespace tern::run {

struct AttemptProgress {
  int first_step = -1, last_step = -1;  // optimizer steps this attempt completed; -1 = none
  int resumed_from = -1;                // the step of the checkpoint it resumed from (resume row); -1 = fresh
  uint64_t tokens = 0;                  // tokens this attempt trained on
  double productive_s = 0;              // step time of steps beyond the job's last step before it
  int lost_steps = 0;                   // steps redone: at or below the job's last step before it
  double lost_s = 0;                    // their step time
  double checkpoint_s = 0;              // saves' stall + wait, and the emergency save
  bool preempted = false;               // a "preempted" row: it saved and is about to exit 75
  // When the trainer's clock started (its Run began), on the supervisor's clock: the earliest
  // (time read - elapsed_s) over the step rows, late by at most the time a row waited to be read. 0 = no
  // step row read yet.
  double run_start = 0;
};

class MetricsTail {
 public:
  // `job_last_step`: the highest step any earlier attempt of the job reached (-1 = none); steps up to it
  // are redone work.
  MetricsTail(std::string path, uint64_t offset, int job_last_step);
  // Reads the whole lines appended since the last call, stamping them with `now`. True when the file grew
  // (or was replaced by a fresh run's). A line that does not parse (torn by a kill) is skipped.
  bool Poll(double now);
  const AttemptProgress& progress() const { return p_; }
  uint64_t offset() const { return offset_; }

 private:
  void Row(const std::string& line, double now);
  std::string path_;
  uint64_t offset_, size_seen_;
  int job_last_step_;
  std::string partial_;  // a line not yet ended
  uint64_t tokens_before_first_ = 0;
  AttemptProgress p_;
};

}  // namespace tern::run
