// `ckpt.every: auto`: the checkpoint interval that minimises the expected time lost to saves and to the
// rework after an interruption, from the measured cost of a save and the mean time between interruptions.
//
//   Young (1974):  tau = sqrt(2 delta M)
//   Daly (2006):   tau = sqrt(2 delta M) [1 + (1/3) sqrt(delta / (2M)) + delta / (18M)] - delta   (delta <
//   2M)
//                  tau = M                                                                       (otherwise)
//
// delta is what one save costs the training loop: its stall on the training thread (the capture and the
// wait for the snapshot copy; for a synchronous save, all of it) plus, for an asynchronous save, the share of
// the writer's time that slowed the steps running beside it (measured: steps while the writer is busy
// against steps while it is idle). The writer's copy and persist run beside training and are not in delta;
// they bound the interval from below instead: saving more often than the writer can write only queues saves.
// A wait for the previous save is that queue, so it is logged but not counted in delta (counting it would
// make the interval swing: too short -> waits -> longer -> no waits -> shorter). M is the mean time between
// interruptions that cost the work since the last checkpoint. docs/checkpoints.md has the details.
//
// Pure: no clocks, no I/O. The trainer (train/trainer_interval.cpp) feeds it and logs its decisions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace tern::ckpt {

// M when nothing says otherwise: the planner's spot_mtbf_hours (plan/defaults.h; run/hazard_test checks that
// they agree). Conservative for on-demand machines, which rarely go away: it saves more often than needed.
inline constexpr double kDefaultMtbfS = 6 * 3600.0;
// The first guess of delta before any save was measured: the whole state written at the planner's
// checkpoint_write_gb_per_s (1 GB/s), as if the save were synchronous.
inline constexpr double kAssumedSaveBytesPerS = 1e9;

// Both in seconds; 0 when delta <= 0 or M <= 0.
double YoungInterval(double delta_s, double mtbf_s);
double DalyInterval(double delta_s, double mtbf_s);

// "21600", "90s", "10m", "6h", "2d" -> seconds (a bare number is seconds); must be positive. `what` names the
// key in the error.
[[nodiscard]] Result<double> ParseDurationSeconds(std::string_view text, std::string_view what);

struct IntervalOptions {
  double mtbf_s = kDefaultMtbfS;
  std::string mtbf_source = "default";  // where M came from, for the log
  int max_steps = 0;                    // the longest interval; 0 = no limit
  double first_guess_save_s = 0;        // delta until a save is measured
  double step_weight = 0.2;             // moving averages: the newest step's weight
  double save_weight = 0.5;             // ... and the newest save's
  double hysteresis = 0.1;              // a new interval within 10% of the current one is no change
};

// One decision and everything it was computed from (a metrics.jsonl "ckpt_interval" row).
struct IntervalDecision {
  int every = 0;                  // steps between saves
  int previous = 0;               // the interval before; 0 = this is the first
  double tau_s = 0, young_s = 0;  // Daly's and Young's optimum, seconds of training
  double delta_s = 0;             // = stall_s + interference_s (or the first guess)
  double stall_s = 0;             // the save's own stall: capture + snapshot wait (all of a sync save)
  double wait_s = 0;              // the stall's wait for the previous save (not in delta)
  double writer_s = 0;            // the writer's copy + persist: the lower bound on the interval
  double interference_s = 0;      // the part of writer_s the steps beside it lost
  bool measured = false;          // delta from measured saves; false: the first guess
  int saves = 0;                  // measured saves so far
  double mtbf_s = 0;
  std::string mtbf_source;
  double step_s = 0;  // moving average
  std::string
      bound;  // what set it: "daly", "writer" (the writer's pace: copy + persist), "max", "min" (1 step)
};

class IntervalTuner {
 public:
  explicit IntervalTuner(IntervalOptions options) : o_(std::move(options)) {}

  // After every training step: its seconds, and whether a save was being persisted at its end.
  void ObserveStep(double step_s, bool writer_busy);
  // A periodic save was just started: the next step (which waits for its snapshot copy, a wait already in
  // the save's stall) is not counted as a step beside the writer.
  void SaveStarted() { skip_next_ = true; }
  // A finished save of the tier the interval drives, seconds: its whole training stall, the part of it spent
  // waiting for the previous save, and the writer's time on it (copy + persist).
  void ObserveSave(double stall_s, double wait_s, double writer_s);
  // Recomputes the interval once a step time is known and again after every measured save (not between
  // saves: the step time alone does not churn it): the new decision when it changed, else nothing.
  std::optional<IntervalDecision> Retune();

  int every() const { return current_.every; }  // 0 until the first step was observed
  const IntervalDecision& current() const { return current_; }
  // The decision Retune would make now, changed or not.
  IntervalDecision Compute() const;

 private:
  IntervalOptions o_;
  IntervalDecision current_;
  double step_s_ = 0, busy_step_s_ = 0, idle_step_s_ = 0;
  int steps_ = 0, busy_steps_ = 0, idle_steps_ = 0;
  double stall_s_ = 0, wait_s_ = 0, writer_s_ = 0;
  int saves_ = 0;
  bool skip_next_ = false;
  bool pending_ = false;  // a save was observed since the last Retune
};

}  // namespace tern::ckpt
