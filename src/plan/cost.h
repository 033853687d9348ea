// What a plan costs. Compute is price x instances x time; spot adds expected preemptions; reserved is a
// discount that only pays off above a break-even utilisation; storage and egress are small but real.
//
// Spot (first-order Young/Daly model, memoryless preemptions at hazard lambda per instance-hour):
//   job hazard        lambda_job = nodes x lambda           (any instance lost stops the job)
//   checkpoint write  delta = checkpoint bytes / write bandwidth
//   interval          tau   = sqrt(2 x delta x MTBF_job)    (Young 1974; Daly 2006 first order)
//   useful work W     -> W' = W x (1 + delta/tau)           (time spent writing checkpoints)
//   each preemption   costs restart R + (tau + delta)/2 of lost work on average
//   expected time     E[T] = W' / (1 - lambda_job x (R + (tau + delta)/2))   (infeasible if <= 0)
//   preemptions       N = lambda_job x E[T]
#pragma once

#include <string>

#include "plan/defaults.h"

namespace tern::plan {

// Young/Daly optimal checkpoint interval (seconds) for a checkpoint that takes `checkpoint_s` to write
// and a mean time between failures of `mtbf_s`.
double YoungDalyIntervalSeconds(double checkpoint_s, double mtbf_s);

struct SpotModel {
  bool feasible = false;
  double hazard_per_hr = 0;          // per instance
  double job_mtbf_h = 0;             // 1 / (nodes x hazard)
  double checkpoint_s = 0;           // delta
  double interval_s = 0;             // tau
  double restart_s = 0;              // R
  double lost_per_preemption_s = 0;  // R + (tau + delta)/2
  double expected_wall_s = 0;        // E[T]
  double expected_preemptions = 0;
  double time_lost_s = 0;  // E[T] - W: checkpoint writes + restarts + lost work
  // Where delta and R came from (the planner fills them): "measured: bench.json ..." or "default: ...".
  std::string checkpoint_source, restart_source;
};
SpotModel ModelSpot(double work_s, double checkpoint_bytes, int nodes, double hazard_per_instance_hr,
                    const PlanDefaults& d);

struct ReservedModel {
  double discount = 0;
  double break_even_utilization = 0;  // 1 - discount: below it, on-demand is cheaper
  double utilization = 0;             // assumed share of the term the commitment is kept busy
  bool job_only = false;              // utilisation not given: this job alone uses the commitment
  double commitment_usd = 0;          // price x (1 - discount) x term x instances
  double effective_hourly = 0;        // per instance-hour of this job
};
// `utilization` <= 0 means "only this job": the job's share of the term.
ReservedModel ModelReserved(double ondemand_hourly, int nodes, double wall_h, double discount,
                            double utilization, const PlanDefaults& d);

struct StorageEgress {
  double checkpoint_gb = 0, storage_usd = 0;
  double dataset_gb = 0, dataset_usd = 0;
  double model_gb = 0, model_usd = 0;
  double total() const { return storage_usd + dataset_usd + model_usd; }
};
// storage = checkpoint GB x retention x months of the run x $/GB-month;
// egress  = dataset GB x dataset $/GB (in) + model GB x provider egress $/GB (out).
StorageEgress ModelStorageEgress(const std::string& provider, double wall_h, double checkpoint_bytes,
                                 double dataset_gb, double dataset_usd_per_gb, double model_bytes,
                                 const PlanDefaults& d);

}  // namespace tern::plan
