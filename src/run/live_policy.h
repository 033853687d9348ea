// The live spot policy of `tern run --policy uniform-progress --deadline D`: before each attempt, and at
// every decision tick while one runs, the supervisor asks the simulator's own Uniform Progress rules
// (plan/spot_policy.h: one implementation for `tern simulate` and `tern run`) whether the job should be on
// spot, on on-demand, or waiting for spot, from its progress (steps done of train.steps, at the measured
// seconds per step), the time left to the deadline, the restart overhead and whether spot is up now.
//
// The market is behind an interface (STYLE.md 7): `LocalSpotMarket` for a real run (spot is up unless an
// attempt on spot was just preempted: the trainer saved on a spot notice and exited 75), and
// `TraceSpotMarket`, a published trace (plan/spot_trace.h) replayed on the supervisor's clock, for tests.
#pragma once

#include <string>

#include "plan/spot_policy.h"
#include "plan/spot_trace.h"

namespace tern::run {

class SpotMarket {
 public:
  virtual ~SpotMarket() = default;
  // Whether a spot instance can be had (or kept) at UTC second `now`. False while an attempt runs on spot
  // means the instance is taken back: the supervisor stops the trainer (it saves) as a spot notice would.
  virtual bool SpotUp(double now) = 0;
  // An attempt on spot ended preempted at `now` (the trainer saw a notice, saved and exited 75).
  virtual void Preempted(double now) { (void)now; }
};

// This machine: spot is up, except for `cooldown_s` after a preemption (the cloud took the instance back;
// asking again at once would find none).
class LocalSpotMarket : public SpotMarket {
 public:
  explicit LocalSpotMarket(double cooldown_s) : cooldown_s_(cooldown_s) {}
  bool SpotUp(double now) override { return now >= down_until_; }
  void Preempted(double now) override { down_until_ = now + cooldown_s_; }

 private:
  double cooldown_s_;
  double down_until_ = 0;
};

// A trace replayed from UTC second `start_unix` (its tick `start_tick` then), one tick per gap_s of the
// supervisor's clock: on a FakeClock days of market pass in a second.
class TraceSpotMarket : public SpotMarket {
 public:
  TraceSpotMarket(plan::SpotTrace trace, double start_unix, size_t start_tick = 0)
      : trace_(std::move(trace)), start_unix_(start_unix), start_tick_(start_tick) {}
  bool SpotUp(double now) override;

 private:
  plan::SpotTrace trace_;
  double start_unix_;
  size_t start_tick_;
};

// What the live policy knows at a decision.
struct LiveView {
  double now_unix = 0;
  int steps_done = 0;  // of the job, across attempts
  double step_s = 0;   // measured seconds per step; 0 = not measured yet
  plan::Cluster current = plan::Cluster::kNone;
  bool spot_up = false;
};

struct LivePolicyOptions {
  double start_unix = 0;     // t = 0: when the job was created
  double deadline_unix = 0;  // required
  int total_steps = 0;       // train.steps
  double restart_s = 300;    // d: a new instance's start-up and resume (job.restart_overhead)
  double tick_s = 60;        // how long a decision holds (job.policy_tick)
};

// One job's Uniform Progress, in the job's units: hours since start_unix, work in hours as steps x step_s.
class LivePolicy {
 public:
  explicit LivePolicy(LivePolicyOptions o) : o_(o) {}
  plan::Cluster Decide(const LiveView& v);
  // Why the last decision went the way it did, in words (the ledger's switches.why).
  const std::string& why() const { return why_; }
  const LivePolicyOptions& options() const { return o_; }
  // The decision tick that `now` falls in, and its start (UTC seconds).
  long Tick(double now) const;
  double TickStart(long tick) const { return o_.start_unix + static_cast<double>(tick) * o_.tick_s; }

 private:
  LivePolicyOptions o_;
  plan::UniformProgress up_;
  std::string why_;
};

}  // namespace tern::run
