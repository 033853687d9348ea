#include "run/hazard.h"

#include <sstream>

#include <fmt/format.h>

#include "plan/defaults.h"

namespace tern::run {
namespace {

struct Prior {
  double mtbf_h = kOnDemandMtbfHours;
  std::string source;
};

std::vector<std::string> SplitInstance(const std::string& spec) {
  std::vector<std::string> parts;
  std::istringstream in(spec);
  for (std::string p; std::getline(in, p, ':');) parts.push_back(p);
  return parts;
}

Prior PriorOf(const JobSpec& spec, const plan::Catalog* catalog) {
  if (spec.billing != "spot") {
    return {kOnDemandMtbfHours, fmt::format("{} machine: assumed {:.0f} h between interruptions",
                                            spec.billing, kOnDemandMtbfHours)};
  }
  const plan::PlanDefaults defaults;
  const std::vector<std::string> parts = SplitInstance(spec.instance);
  if (catalog && parts.size() >= 3) {
    for (const auto& o : catalog->offers) {
      if (o.provider != parts[0] || o.region != parts[1] || o.instance_type != parts[2]) continue;
      if (o.spot_hazard_per_hr && *o.spot_hazard_per_hr > 0) {
        return {1.0 / *o.spot_hazard_per_hr,
                fmt::format("catalog: spot hazard {:.4g}/h for {}", *o.spot_hazard_per_hr, o.Key())};
      }
      break;
    }
  }
  return {
      defaults.spot_mtbf_hours,
      fmt::format("spot default: {:.4g} h (the planner's spot_mtbf_hours; no hazard in the catalog for {})",
                  defaults.spot_mtbf_hours, spec.instance)};
}

}  // namespace

bool IsInterruption(const AttemptRow& a) {
  return a.reason == "preempted" || a.reason == "crashed" || a.reason == "signal" || a.reason == "hung" ||
         a.reason == "lost";
}

Hazard JobHazard(const JobSpec& spec, const std::vector<AttemptRow>& attempts, const plan::Catalog* catalog) {
  const Prior prior = PriorOf(spec, catalog);
  int n = 0;
  double exposure_s = 0;
  for (const auto& a : attempts) {
    if (a.state == "running") continue;  // this attempt's own time is not history yet
    n += IsInterruption(a) ? 1 : 0;
    exposure_s += a.wall_s > 0 ? a.wall_s : std::max(0.0, a.end_unix - a.start_unix);
  }
  const double prior_s = prior.mtbf_h * 3600;
  if (n == 0) return {prior_s, prior.source};
  const double m = (exposure_s + prior_s) / (n + 1);
  return {m, fmt::format("ledger: {} interruption{} in {:.3g} h of attempts, with the prior ({}) as one more",
                         n, n == 1 ? "" : "s", exposure_s / 3600, prior.source)};
}

Hazard JobHazardWithShippedCatalog(const JobSpec& spec, const std::vector<AttemptRow>& attempts) {
  if (spec.billing != "spot") return JobHazard(spec, attempts, nullptr);
  Result<std::string> dir = plan::FindCatalogDir();
  if (!dir.ok()) return JobHazard(spec, attempts, nullptr);
  Result<plan::Catalog> catalog = plan::LoadCatalog(plan::ShippedCatalogFiles(*dir), {});
  return JobHazard(spec, attempts, catalog.ok() ? &*catalog : nullptr);
}

}  // namespace tern::run
