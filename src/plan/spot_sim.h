// `tern simulate`: a job of W hours of work replayed tick by tick on a real spot trace (spot_trace.h) under
// each policy (spot_policy.h), from many start offsets, against a deadline. docs/spot-simulation.md
// has the model; in short:
//   - each tick the policy picks spot, on-demand or none; every instance started pays the restart
//     overhead d (billed, no progress); a voluntary switch first saves (switch cost = one checkpoint);
//   - on spot the job saves every `interval` hours of work (Young/Daly from the zone's MTBF in the trace and
//     the checkpoint time, unless given), each save billed and not progress;
//   - a spot instance is lost at the first tick the trace says down; the work since the last save is lost
//     unless the emergency save fits in the notice (tern saves on the spot notice: ckpt.on_notice);
//   - billing is per second of each instance (the last tick pro rata); none costs nothing;
//   - the trace is cyclic, a run stops at the horizon (3 x the deadline) unfinished.
// The omniscient bound knows the trace: spot x min(W, S) + on-demand x (W - S)+, S the spot hours up before
// the deadline; no policy that finishes by the deadline costs less.
#pragma once

#include <string>
#include <vector>

#include "plan/spot_policy.h"
#include "plan/spot_trace.h"

namespace tern::plan {

struct SimJob {
  double work_h = 0;  // compute on one instance (steps x step time + evaluations + ...)
  double deadline_h = 0;
  double restart_h = 0;        // start-up + resume on a new instance (d)
  double checkpoint_h = 0;     // one save
  double interval_h = 0;       // work between saves on spot; 0: Young/Daly from the trace's MTBF
  double notice_h = 2.0 / 60;  // preemption notice (AWS: 2 minutes)
  double spot_usd_h = 0, ondemand_usd_h = 0;  // per instance-hour
};

struct SimRun {
  bool finished = false, met_deadline = false;
  double wall_h = 0, cost_usd = 0;
  double spot_h = 0, ondemand_h = 0;  // instance-hours billed
  double lost_h = 0, checkpoint_h = 0, restart_h = 0;
  int preemptions = 0, switches = 0;
};

// The interval a spot run saves at on this trace (job.interval_h when set).
double SimIntervalHours(const SimJob& job, const SpotTrace& trace);

// One run from `start_tick`. `decisions`, when given, receives the cluster chosen at every tick.
SimRun Simulate(const SpotTrace& trace, size_t start_tick, const SimJob& job, SpotPolicy policy,
                std::vector<Cluster>* decisions = nullptr);

// The omniscient lower bound for a start (see above): finished by the deadline when on-demand alone is.
SimRun OmniscientBound(const SpotTrace& trace, size_t start_tick, const SimJob& job);

struct SimStats {
  std::string zone;
  Polarity polarity = Polarity::kAvailableIfNonzero;
  SpotPolicy policy = SpotPolicy::kOnDemand;
  int runs = 0;
  double mean_cost = 0, p50_cost = 0, p95_cost = 0;
  double mean_wall_h = 0, p95_wall_h = 0;
  double miss_rate = 0;                                          // not finished by the deadline
  double mean_preemptions = 0, mean_lost_h = 0, spot_share = 0;  // spot share of billed instance-hours
  double vs_ondemand = 0;  // mean cost / on-demand's mean cost on the same trace (0 when not simulated)
};

// `starts` offsets evenly spaced over the trace; one SimStats per policy, in the order given.
std::vector<SimStats> SimulateStarts(const SpotTrace& trace, const SimJob& job,
                                     const std::vector<SpotPolicy>& policies, int starts);

// One policy over `starts` offsets of every trace given, pooled into one distribution (zone: "3 zones").
// vs_ondemand is against on-demand's cost, work + restart at the on-demand price.
SimStats SimulatePooled(const std::vector<const SpotTrace*>& traces, const SimJob& job, SpotPolicy policy,
                        int starts);

}  // namespace tern::plan
