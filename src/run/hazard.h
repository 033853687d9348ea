// The preemption hazard of a job, for the trainer's `ckpt.every: auto` (ckpt/interval.h,
// docs/checkpoints.md): M, the mean time between interruptions that cost the work since the last checkpoint,
// and where it came from. `tern run` passes both to each attempt (--set ckpt.mtbf=... --set
// ckpt.mtbf_source=...).
#pragma once

#include <string>
#include <vector>

#include "plan/catalog.h"
#include "run/job_spec.h"
#include "run/ledger.h"

namespace tern::run {

// An on-demand, reserved or hand-priced machine: no provider publishes a rate of host failures, maintenance
// and crashes; one a week is an assumption on the safe side (it saves more often than a real rate would).
inline constexpr double kOnDemandMtbfHours = 168;

struct Hazard {
  double mtbf_s = 0;
  std::string source;  // in words, for the trainer's ckpt_interval rows
};

// The attempts that lost the work since their last checkpoint: preempted, crashed, signal, hung, lost.
bool IsInterruption(const AttemptRow& attempt);

// M for the job, in this order:
//   1. its own history, when it has at least one interruption: (T + M0) / (n + 1) for n interruptions in T
//      seconds of attempts (wall time, start-up included), the prior M0 below counted as one more
//      interruption, so that one early preemption does not swing the interval to a few seconds;
//   2. M0 for a spot instance: 1 / the catalog's spot_hazard_per_hr, else the planner's spot_mtbf_hours;
//   3. M0 otherwise: kOnDemandMtbfHours.
// `catalog` may be null (not loadable): spot then takes the planner's default.
Hazard JobHazard(const JobSpec& spec, const std::vector<AttemptRow>& attempts, const plan::Catalog* catalog);
// The same with the shipped catalog (loaded only for a spot instance; a catalog that does not load counts as
// none).
Hazard JobHazardWithShippedCatalog(const JobSpec& spec, const std::vector<AttemptRow>& attempts);

}  // namespace tern::run
