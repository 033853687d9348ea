#include "plan/spot_policy.h"

#include <algorithm>

#include <fmt/format.h>

#include "plan/units.h"

namespace tern::plan {

std::string_view ClusterName(Cluster c) {
  switch (c) {
    case Cluster::kSpot:
      return "spot";
    case Cluster::kOnDemand:
      return "on-demand";
    case Cluster::kNone:
      break;
  }
  return "none";
}

std::string_view SpotPolicyName(SpotPolicy p) {
  switch (p) {
    case SpotPolicy::kOnDemand:
      return "on-demand";
    case SpotPolicy::kSpot:
      return "spot";
    case SpotPolicy::kUniformProgress:
      return "uniform-progress";
    case SpotPolicy::kOmniscient:
      return "omniscient";
  }
  return "?";
}

Result<std::vector<SpotPolicy>> ParseSpotPolicies(std::string_view text) {
  const std::vector<SpotPolicy> all = {SpotPolicy::kOnDemand, SpotPolicy::kSpot, SpotPolicy::kUniformProgress,
                                       SpotPolicy::kOmniscient};
  std::vector<SpotPolicy> out;
  for (const std::string& item : SplitList(text)) {
    if (item == "all") return all;
    auto it = std::find_if(all.begin(), all.end(), [&](SpotPolicy p) { return SpotPolicyName(p) == item; });
    if (it == all.end())
      return Status::InvalidArgument(fmt::format(
          "--policy {}: unknown policy; choose from on-demand, spot, uniform-progress, omniscient, all",
          item));
    if (std::find(out.begin(), out.end(), *it) == out.end()) out.push_back(*it);
  }
  if (out.empty()) return Status::InvalidArgument("--policy: give at least one policy (or all)");
  return out;
}

Cluster UniformProgress::Decide(const PolicyView& v) {
  const double d = v.restart_h;
  const double left = v.deadline_h - v.t_h;                                                    // R(t)
  const double work_left = v.work_h - v.done_h;                                                // C(t)
  const auto expected = [&](double t) { return v.work_h * std::min(1.0, t / v.deadline_h); };  // ep(t)
  // Rule 4, with what this decision risks until the next one: a tick, the work a preemption would lose,
  // and the save a switch to on-demand makes first.
  const double risk = v.tick_h + (v.current == Cluster::kOnDemand ? 0.0 : v.at_risk_h + v.switch_h);
  if (safety_net_ || left - risk < work_left + 2 * d) {
    safety_net_ = true;
    return Cluster::kOnDemand;
  }
  switch (v.current) {
    case Cluster::kSpot:
      if (v.spot_up) return Cluster::kSpot;  // rule 2: stay until preempted
      break;                                 // preempted (the simulator then sees kNone)
    case Cluster::kOnDemand:
      if (v.done_h < expected(v.t_h + 2 * d)) return Cluster::kOnDemand;  // rule 3
      // tern leaves on-demand for spot only: idling when ahead would pay d again on the way back (without
      // spot, the paper's reading cycles on and off every few d and bills a third more than on-demand).
      return v.spot_up ? Cluster::kSpot : Cluster::kOnDemand;
    case Cluster::kNone:
      break;
  }
  if (v.spot_up) return Cluster::kSpot;                       // rule 2
  if (v.done_h < expected(v.t_h)) return Cluster::kOnDemand;  // rule 1
  return Cluster::kNone;
}

Cluster PolicyRunner::Decide(const PolicyView& v) {
  switch (policy_) {
    case SpotPolicy::kOnDemand:
      return Cluster::kOnDemand;
    case SpotPolicy::kSpot:
      return v.spot_up ? Cluster::kSpot : Cluster::kNone;
    case SpotPolicy::kUniformProgress:
      return up_.Decide(v);
    case SpotPolicy::kOmniscient:
      break;
  }
  return Cluster::kNone;
}

}  // namespace tern::plan
