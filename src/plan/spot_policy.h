// Which instance a deadline-bound job should be on now: spot, on-demand or none (waiting for spot).
// The same decision functions drive `tern simulate` (spot_sim.h, replaying a trace) and are meant for the
// live supervisor, so that what the simulator predicts is what a run does.
//
// Uniform Progress (Wu et al., *Can't Be Late*, NSDI 2024, section 5), with d the restart overhead,
// cp(t) the progress made, ep(t) = W x t / D the straight line from 0 to the work W at the deadline D,
// R(t) the time left and C(t) the work left:
//   1. uniform progress  idle and cp(t) < ep(t): take on-demand and stay on it to catch up;
//   2. taking risks      spot available: take it (even when behind) and stay on it until it is preempted;
//   3. hysteresis        on on-demand: stay until cp(t) >= ep(t + 2d) (tern: and then leave it for spot
//                        only, never for idling: the way back would cost d again);
//   4. safety net        R(t) < C(t) + 2d: on-demand until the end.
// tern's safety net also counts what a decision risks until it is next made: one tick of time, the work a
// preemption would lose (none when the emergency save fits in the notice) and the save a switch costs, so
// that Uniform Progress never misses a deadline that on-demand alone meets (spot_sim_test.cpp checks it on
// every start offset of the shipped traces).
#pragma once

#include <string_view>
#include <vector>

#include "core/status.h"

namespace tern::plan {

enum class Cluster { kNone, kSpot, kOnDemand };
std::string_view ClusterName(Cluster c);  // "none" | "spot" | "on-demand"

enum class SpotPolicy {
  kOnDemand,         // on-demand from start to end
  kSpot,             // spot only: wait while it is unavailable (misses deadlines)
  kUniformProgress,  // the four rules above
  kOmniscient,       // knows the trace: the lower bound on any policy's cost (spot_sim.h)
};
std::string_view SpotPolicyName(SpotPolicy p);  // "on-demand" | "spot" | "uniform-progress" | "omniscient"
// "on-demand,spot,uniform-progress,omniscient" in any order, or "all".
Result<std::vector<SpotPolicy>> ParseSpotPolicies(std::string_view text);

// What a policy sees at a tick boundary. Hours since the job started.
struct PolicyView {
  double t_h = 0;
  double deadline_h = 0;
  double work_h = 0;     // the whole job
  double done_h = 0;     // progress so far (saved or not)
  double at_risk_h = 0;  // the part of done_h a preemption now would lose
  double restart_h = 0;  // d: start-up and resume on a new instance
  double switch_h = 0;   // the save a voluntary switch makes first
  double tick_h = 0;     // the decision holds until the next tick
  Cluster current = Cluster::kNone;
  bool spot_up = false;  // a spot instance can be had (or kept) for this tick
};

class UniformProgress {
 public:
  Cluster Decide(const PolicyView& v);
  bool safety_net() const { return safety_net_; }

 private:
  bool safety_net_ = false;  // rule 4 is for the rest of the job
};

// One decision of the online policies (kOmniscient has none: it is a bound, spot_sim.h).
class PolicyRunner {
 public:
  explicit PolicyRunner(SpotPolicy p) : policy_(p) {}
  Cluster Decide(const PolicyView& v);

 private:
  SpotPolicy policy_;
  UniformProgress up_;
};

}  // namespace tern::plan
