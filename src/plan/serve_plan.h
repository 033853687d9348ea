// `tern plan --serve`: which instance, how many and on which billing serve a model at a given load
// cheapest, within a latency target. One replica of `tern serve` per GPU (it has no tensor parallelism).
//
// The model of one replica (docs/serving-plan.md): a decode step of b sequences reads the weights once
// and each sequence's KV cache, and does 2 FLOPs per weight per sequence, so its time is
//   t(b) = overhead + max((W + b * KV(ctx)) / (bandwidth * bw_eff), b * F(ctx) / (peak * decode_mfu))
// with ctx the mean context (prompt + half the completion). Prefill is compute-bound:
//   prefill_s = prompt FLOPs / (peak * prefill_mfu).
// Under continuous batching a replica receiving lambda requests/s runs prefills a share rho = lambda *
// prefill_s of the time and decodes the rest; the sequences decoding at once follow Little's law,
//   b = lambda * completion_tokens * tpot,  tpot = t(b + 1) / (1 - rho),
// where b + 1 is the batch a token sees (itself beside the others, Poisson distributed with mean b: the
// size-biased batch, so a lone request's tokens take t(1), not t(b)), whose fixed point (t is the max of two
// lines) gives the batch, the time per output token and the time to the first token, prefill_s / (1 - rho) +
// t(b). A replica set is feasible when rho < 1, the fixed point
// exists, b fits the GPU's memory at the full context (tern serve reserves it) and the targets hold; the
// plan takes the fewest instances that are feasible at the load times the burst factor.
#pragma once

#include <algorithm>

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/gpt_config.h"
#include "plan/catalog.h"
#include "plan/defaults.h"
#include "plan/planner.h"
#include "plan/workload.h"

namespace tern::plan {

struct ServeLoad {
  double requests_per_s = 1;    // mean arrivals
  int prompt_tokens = 512;      // mean per request
  int completion_tokens = 256;  // mean per request
  double max_tpot_ms = 100;     // time per output token a stream may see (about 10 tokens/s to read)
  double max_ttft_s = 0;        // time to the first token; 0 = no target
  std::optional<double> burst;  // plan for the mean rate times this (default: PlanDefaults)
  // Speculative decoding (tern serve --speculative-tokens, docs/speculative.md): a sequence's decode step
  // verifies this many draft tokens on average (its rows: 1 + them; 0 = off) ...
  double speculative_tokens = 0;
  // ... of which this fraction is kept (accepted / drafted): the step yields 1 + speculative_tokens *
  // acceptance tokens. `tern diagnose --serve` measures both on a running server.
  double acceptance = 0;
  double RowsPerStep() const { return 1 + speculative_tokens; }
  double TokensPerStep() const { return 1 + speculative_tokens * acceptance; }
};

// The replica model's constants fitted to a measurement of tern serve's forward on one device
// (`tern bench --serve --json`, serve_calibration.h). They replace PlanDefaults' serve_* assumptions for the
// offers whose GPU is the measured one (`device`: a catalog GPU name, or "cpu" for the local machine).
struct ServeCalibration {
  std::string device;
  std::string file;           // the bench file, for the notes
  double bw_efficiency = 0;   // of bandwidth_gbps
  double decode_mfu = 0;      // of peak_tflops
  double prefill_mfu = 0;     // of peak_tflops
  double overhead_ms = 0;     // per decode step
  double bandwidth_gbps = 0;  // what bw_efficiency is a fraction of (the datasheet's, or a measured read)
  double peak_tflops = 0;     // what the MFUs are fractions of
  struct Point {
    int batch = 0;
    double measured_ms = 0, model_ms = 0;
  };
  std::vector<Point> points;  // the measured decode steps and the fitted model's at the same batch
  double max_error = 0;       // max |model / measured - 1| over points
  // The largest measured batch was compute-bound in the fit; if not, decode_mfu is only a lower bound (the
  // compute line passes under every measured step): conservative, the plan's large batches read slow.
  bool compute_bound_seen = false;
  // PlanDefaults with the serve_* constants replaced by these.
  PlanDefaults Apply(const PlanDefaults& d) const;
};

struct ServeRequest {
  GptConfig model;
  std::string model_label;
  ServeLoad load;
  std::string weights = "bf16";   // fp32 | bf16 | int8 | int4 (CPU-calibrated only; tern serve --weights)
  std::string kv_dtype = "bf16";  // fp32 | bf16 (tern serve --kv-dtype; int8 is CPU only)
  // LoRA fine-tunes served beside the model on every replica (tern serve --lora): their fp32 adapters of
  // every block matrix are resident and, conservatively, all read every decode step (exact once a step's
  // batch covers them all); every request is on one, so each token also does the adapters' products.
  int lora_adapters = 0;
  int lora_rank = 16;
  // tern serve --max-loaded-loras M (> 0): only M of the adapters in memory (and read per step); the others
  // are read back when a request names one (serve/adapter_pager.h). 0: all of them.
  int max_loaded_loras = 0;
  int LoraInMemory() const {
    return max_loaded_loras > 0 ? std::min(lora_adapters, max_loaded_loras) : lora_adapters;
  }
  std::vector<std::string> providers, regions, gpus, instances;  // filters, as tern plan's
  std::vector<Billing> billing = {Billing::kOnDemand, Billing::kSpot, Billing::kReserved};
  std::optional<double> reserved_discount;
  std::optional<double> budget_usd_per_hour;
  int max_instances = 64;
  std::optional<ServeCalibration> calibration;  // --calibrate serve-bench.json
};

// One replica (one GPU) at a request rate: what continuous batching settles to.
struct ReplicaState {
  bool feasible = false;
  std::string why;           // when not: what fails
  double rho = 0;            // share of the time spent in prefill
  double batch = 0;          // sequences decoding at once (mean)
  double step_s = 0;         // one decode step at that batch
  double tpot_s = 0;         // time per output token, prefills included
  double ttft_s = 0;         // time to the first token (no queueing)
  bool memory_bound = true;  // the decode step is bandwidth-bound at that batch
};

// The per-replica constants of the model above, for one GPU.
struct ReplicaModel {
  double weight_bytes = 0;        // resident and read per decode step (the LoRA adapters included)
  double adapter_bytes = 0;       // of which the LoRA adapters'
  double kv_bytes_per_token = 0;  // 2 * L * C * kv bytes
  double bandwidth = 0;           // bytes/s, bw_eff applied
  double peak_flops = 0;          // FLOP/s at the weights' precision
  double overhead_s = 0;          // per decode step
  double prefill_s = 0;           // one prompt
  double decode_flops = 0;        // per sequence per step at the mean context
  double ctx_mean = 0;            // prompt + completion / 2
  int max_batch = 0;              // sequences whose full context fits the memory beside the weights
  double decode_mfu = 0;
  // One decode step of b sequences at the mean context, each of `rows` rows (1 + its draft tokens): overhead
  // + max(memory line, compute line). A sequence's drafts read its context once, with its one row.
  double StepSeconds(double b, double rows = 1) const;
  ReplicaState At(double lambda, const ServeLoad& load) const;  // lambda: requests/s to this replica
};

// nullopt with `why` when the GPU cannot hold the weights or lacks the numbers.
std::optional<ReplicaModel> MakeReplicaModel(const GpuSpec& gpu, const ServeRequest& req,
                                             const PlanDefaults& d, std::string* why);

struct ServeRow {
  size_t offer = 0;
  Billing billing = Billing::kOnDemand;
  int instances = 0, replicas = 0;
  ReplicaState state;       // each replica at the planned (burst) rate
  double capacity_rps = 0;  // the most requests/s these replicas take within the targets
  double price_hr = 0;      // per instance for this billing (reserved: effective)
  double hourly_usd = 0;    // all instances
  double usd_per_mtok = 0;  // per 1M generated tokens at the mean rate
  double kv_cache_mb = 0;   // what to give tern serve --kv-cache-mb
  int serve_max_batch = 0;  // and --max-batch
  std::vector<std::string> warnings;
  std::string risk = "-";
  bool runs = true;  // tern serve's CUDA backend runs on this GPU (compute capability 8.0+); ranked first
  bool calibrated = false;  // the replica model's constants come from --calibrate
  std::string runs_why;     // when not
};

struct ServeExclusion {
  size_t offer = 0;
  std::string billing, reason;
};

struct ServePlan {
  ServeRequest request;
  std::vector<ServeRow> rows;  // cheapest first
  std::vector<ServeExclusion> excluded;
  std::vector<std::string> notes;
};

Result<ServePlan> MakeServePlan(const Catalog& cat, const ServeRequest& req, const PlanDefaults& d);

std::string RenderServePlan(const ServePlan& p, const Catalog& cat, int top, bool show_excluded, bool ascii);
nlohmann::json ServePlanJson(const ServePlan& p, const Catalog& cat, int top);

}  // namespace tern::plan
