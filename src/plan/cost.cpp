#include "plan/cost.h"

#include <algorithm>
#include <cmath>

namespace tern::plan {

double YoungDalyIntervalSeconds(double checkpoint_s, double mtbf_s) {
  return std::sqrt(2.0 * checkpoint_s * mtbf_s);
}

SpotModel ModelSpot(double work_s, double checkpoint_bytes, int nodes, double hazard_per_instance_hr,
                    const PlanDefaults& d) {
  SpotModel s;
  s.hazard_per_hr = hazard_per_instance_hr;
  const double lambda_s = nodes * hazard_per_instance_hr / 3600.0;  // per second, whole job
  s.job_mtbf_h = 1.0 / (nodes * hazard_per_instance_hr);
  s.checkpoint_s = checkpoint_bytes / (d.checkpoint_write_gb_per_s * 1e9);
  s.interval_s = YoungDalyIntervalSeconds(s.checkpoint_s, s.job_mtbf_h * 3600.0);
  // A job shorter than one interval never checkpoints: nothing to write, the whole run is at risk.
  s.interval_s = std::min(s.interval_s, work_s);
  s.restart_s = d.restart_minutes * 60.0;
  s.lost_per_preemption_s = s.restart_s + (s.interval_s + s.checkpoint_s) / 2.0;
  const double with_ckpt = work_s * (1.0 + s.checkpoint_s / s.interval_s);
  const double denom = 1.0 - lambda_s * s.lost_per_preemption_s;
  if (denom <= 0.05) return s;  // preempted faster than it can make progress: not a plan
  s.feasible = true;
  s.expected_wall_s = with_ckpt / denom;
  s.expected_preemptions = lambda_s * s.expected_wall_s;
  s.time_lost_s = s.expected_wall_s - work_s;
  return s;
}

ReservedModel ModelReserved(double ondemand_hourly, int nodes, double wall_h, double discount,
                            double utilization, const PlanDefaults& d) {
  ReservedModel r;
  r.discount = discount;
  r.break_even_utilization = 1.0 - discount;
  r.job_only = utilization <= 0;
  r.utilization = r.job_only ? std::min(1.0, wall_h / d.reserved_term_hours) : utilization;
  r.commitment_usd = ondemand_hourly * (1.0 - discount) * d.reserved_term_hours * nodes;
  // The job is charged its share of the commitment: reserved hours cost (1-d)/u on-demand hours.
  r.effective_hourly = ondemand_hourly * (1.0 - discount) / r.utilization;
  return r;
}

StorageEgress ModelStorageEgress(const std::string& provider, double wall_h, double checkpoint_bytes,
                                 double dataset_gb, double dataset_usd_per_gb, double model_bytes,
                                 const PlanDefaults& d) {
  const ProviderRates& rates = d.Rates(provider);
  StorageEgress s;
  s.checkpoint_gb = checkpoint_bytes / 1e9;
  const double months = wall_h / 730.0;  // cloud billing month = 730 h
  s.storage_usd = s.checkpoint_gb * d.checkpoint_retention * months * rates.storage_usd_per_gb_month;
  s.dataset_gb = dataset_gb;
  s.dataset_usd = provider == "local" ? 0.0 : dataset_gb * dataset_usd_per_gb;
  s.model_gb = model_bytes / 1e9;
  s.model_usd = s.model_gb * rates.egress_usd_per_gb;
  return s;
}

}  // namespace tern::plan
