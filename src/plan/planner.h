// The optimizer, stateless in SkyPilot's manner: a job spec and a catalog in, every option costed out.
// An option is (instance offer, number of instances, billing); each is either a PlanRow or an
// Exclusion with the reason. Ranking, the Pareto frontier and the recommendation are in ranker.h.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "plan/calibration.h"
#include "plan/catalog.h"
#include "plan/cost.h"
#include "plan/defaults.h"
#include "plan/link_calibration.h"
#include "plan/run_model.h"
#include "plan/spot_sim.h"
#include "plan/throughput.h"
#include "plan/workload.h"

namespace tern::plan {

enum class Billing { kOnDemand, kSpot, kReserved };
const char* BillingName(Billing b);  // "on-demand", "spot", "reserved"
Result<Billing> ParseBilling(const std::string& s);

enum class PrecisionMode { kAuto, kBf16, kFp32 };

// A --providers/--regions/--gpus/--instance filter: empty passes everything, else a case-insensitive match.
bool Passes(const std::vector<std::string>& filter, const std::string& value);

struct PlanRequest {
  WorkloadSpec workload;
  std::optional<double> deadline_h, budget_usd;
  int max_gpus = 64;
  // Empty = no filter. Matching is exact (case-insensitive for GPUs and providers).
  std::vector<std::string> providers, regions, gpus, instances;
  std::vector<Billing> billing = {Billing::kOnDemand, Billing::kSpot, Billing::kReserved};
  PrecisionMode precision = PrecisionMode::kAuto;
  std::optional<BenchProfile> calibration;
  std::vector<LinkProfile> links;            // `tern bench --dist` files: measured links (link_calibration.h)
  std::optional<TrainRunSpec> run;           // --config: model the whole `tern train` run, not only its steps
  std::optional<double> spot_hazard_per_hr;  // overrides catalog and default
  std::optional<double> reserved_discount;
  double reserved_utilization = 0;   // 0: only this job uses the commitment
  std::optional<double> dataset_gb;  // default: tokens x bytes/token
  // data.dir on S3 (--config): every new instance fetches the dataset before it trains, so each spot restart
  // takes dataset_gb at min(the instance's network, data_fetch_gbps) on top of the restart (docs/formats.md)
  bool fetch_data = false;
  std::optional<double> dataset_egress_usd_per_gb;
  bool strict_catalog = false;  // exclude options whose catalog row has warnings
  // --spot-traces: spot rows are replayed on these (spot_sim.h; the zones of the row's region, else all of
  // them as a proxy) under Uniform Progress with a deadline, spot alone without; cost = the p95.
  std::vector<SpotTrace> spot_traces;
  int spot_starts = 20;  // start offsets per trace
};

struct PlanRow {
  size_t offer = 0;
  int nodes = 1, gpus = 1;
  Billing billing = Billing::kOnDemand;
  Precision precision = Precision::kBf16;
  MemoryFit fit;
  LinkModel link;
  StepModel step;
  std::optional<RunBreakdown> run;   // with a training config: start-up, eval, samples, checkpoints
  SpotModel spot;                    // billing == spot
  std::optional<SimStats> spot_sim;  // billing == spot with --spot-traces: compute_usd is its p95 cost
  std::string spot_sim_traces;       // which traces: "us-east-1 (4 zones)" or "all 9 zones (none in ...)"
  ReservedModel reserved;            // billing == reserved
  StorageEgress storage;
  double price_hr = 0;    // catalog price per instance-hour for this billing
  double hourly_usd = 0;  // all instances; reserved: effective (commitment share)
  double wall_s = 0;      // expected: steps (+ the run's other work) (+ preemptions for spot)
  double compute_usd = 0, total_usd = 0, usd_per_mtok = 0;
  std::vector<std::string> warnings;  // catalog warnings that apply to this billing
  // Whether `tern train` can run this plan (data parallel over 1..N GPUs and nodes, ZeRO-1, recompute
  // none|gelu, CUDA compute capability 8.0+); if not, what it lacks ("; "-separated). Ranked after the
  // rows it can run.
  bool runs = true;
  std::string runs_why;
  std::string why;
  std::string risk = "-";  // on-demand: none
};

struct Exclusion {
  size_t offer = 0;
  int nodes = 0;                   // 0: any count
  std::optional<Billing> billing;  // empty: every billing
  std::string category;  // "memory", "deadline", "budget", "price", "catalog", "hardware", "spot", "reserved"
  std::string reason;
  double total_usd = -1, wall_s = -1;  // when the option was costed before it was excluded
};

struct PlanResult {
  Workload workload;
  std::vector<PlanRow> rows;          // ranked, best first
  std::vector<size_t> pareto;         // indices into rows, fastest first
  std::optional<size_t> recommended;  // index into rows
  std::vector<std::string> recommendation;
  std::vector<Exclusion> excluded;
  int filtered = 0;  // offers dropped by --providers/--regions/--gpus/--instance
  std::vector<std::string> notes;
};

Result<PlanResult> MakePlan(const Catalog& cat, const PlanRequest& req, const PlanDefaults& d);

}  // namespace tern::plan
