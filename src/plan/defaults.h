// Every number `tern plan` assumes that is not in a catalog file, in one place. docs/planning.md
// reproduces this table with sources (a test checks that every entry appears there), and
// `tern plan --show-defaults` prints it. Change a default here and in the doc together.
#pragma once

#include <string>
#include <vector>

#include "plan/gpu_specs.h"

namespace tern::plan {

struct ProviderRates {
  std::string provider;
  double storage_usd_per_gb_month;  // object storage for checkpoints
  double egress_usd_per_gb;         // internet egress for the trained model
  std::string source;
};

// Default MFU (model FLOPs / peak of the training precision) by GPU generation and model size.
struct MfuRow {
  GpuGeneration generation;
  double small;   // < 300M parameters: layernorm/GELU/softmax are a larger share of the time
  double medium;  // 300M .. 1B
  double large;   // >= 1B
  const char* source = "tern assumption (no published run measured); calibrate with tern bench";
};

struct PlanDefaults {
  // Workload
  double global_batch_tokens = 524288;  // 2^19 tokens per optimizer step (GPT-2 / llm.c)
  int max_micro_batch = 64;             // largest micro-batch tried (sequences)
  double dataset_bytes_per_token = 2;   // uint16 token shards (4 if vocab > 65535)
  // Memory
  double mem_usable_fraction = 0.95;               // allocator fragmentation
  double mem_reserve_gib = 1.0;                    // CUDA context + cuBLAS workspace
  double gelu_recompute_time_factor = 1.03;        // train.recompute=gelu: L-1 GELU forwards per micro-batch
  double block_recompute_time_factor = 4.0 / 3.0;  // whole blocks re-run the forward (2 of 6 FLOPs/param)
  // Throughput
  double allreduce_link_efficiency = 0.8;  // achieved / nominal bandwidth of a ring all-reduce
  double overlap_fraction = 0.5;           // share of the last micro-batch's backward that hides comm
  double default_gpu_link_gbps = 64;       // PCIe Gen4 x16, bidirectional, when gpus.csv has none
  double default_network_gbps = 25;        // instance network when instance_network.csv has none
  // Spot
  double spot_mtbf_hours = 6;              // per instance, when the catalog has no spot_hazard_per_hr
  double checkpoint_write_gb_per_s = 1.0;  // blocking checkpoint write bandwidth
  double restart_minutes = 10;             // re-acquire + boot + load checkpoint after a preemption
  // data.dir on S3 (docs/formats.md): a new instance fetches the dataset at min(its network, this)
  double data_fetch_gbps = 3.2;
  // A `tern train` run besides its steps (run_model.h), for devices no bench has measured
  double startup_s = 5;                 // process start to the first step, without the peak probe
  double peak_probe_s = 0.6;            // the trainer's MeasurePeakGflops(0.5 s) + its warm-up
  double forward_fraction = 1.0 / 3.0;  // forward-only / training step: 2 of the 6 FLOPs per parameter
  double sample_token_s = 0.02;         // one generated token at batch 1 (launch-bound on a GPU)
  double state_copy_gb_per_s = 10;      // checkpoint state into host memory
  // Serving (tern plan --serve, serve_plan.h)
  double serve_bw_efficiency = 0.6;     // achieved / datasheet memory bandwidth of a decode step (MBU)
  double serve_decode_mfu = 0.5;        // a decode step's FLOP rate when compute-bound (large batches)
  double serve_prefill_mfu = 0.5;       // prefill (compute-bound) MFU
  double serve_step_overhead_ms = 1.0;  // per decode step: launches, scheduling, sampling
  double serve_burst_factor = 1.3;      // plan for the mean request rate times this
  int serve_max_batch = 1024;           // tern serve --max-batch's limit
  // Reserved / committed use
  double reserved_discount = 0.35;    // off on-demand, 1-year term
  double reserved_term_hours = 8760;  // 1 year
  // Storage and egress
  int checkpoint_retention = 3;             // checkpoints kept
  double dataset_egress_usd_per_gb = 0.09;  // moving the dataset in from where it lives
  std::vector<ProviderRates> providers = {
      {"aws", 0.023, 0.09, "SOURCES.md: S3 Standard us-east-1; SkyPilot aws egress first 10 TB"},
      {"gcp", 0.020, 0.12, "SOURCES.md: GCS Standard us-central1; Premium-tier egress first TB (unchecked)"},
      {"azure", 0.018, 0.087, "SOURCES.md: Blob Hot LRS East US; internet egress (unchecked)"},
      {"lambda", 0.20, 0.0, "tern assumption: Lambda filesystem ~$0.20/GB-month, no egress fee (unchecked)"},
      {"local", 0.0, 0.0, "your own machine"},
  };
  ProviderRates unknown_provider = {"(other)", 0.023, 0.09, "tern assumption: AWS rates"};
  // Published runs (docs/planning.md, "MFU defaults"), MFU = tokens/s x tern's FLOPs per token / peak.
  std::vector<MfuRow> mfu = {
      {GpuGeneration::kVolta, 0.45, 0.50, 0.50},
      {GpuGeneration::kTuring, 0.40, 0.45, 0.45},
      {GpuGeneration::kAmpere, 0.55, 0.45, 0.50,
       "llm.c discussion #481: GPT-2 124M, 10B tokens in ~90 min on 8xA100 80GB SXM (0.63 measured; 0.55 "
       "leaves room for evaluation and start-up)"},
      {GpuGeneration::kAda, 0.35, 0.40, 0.45},
      {GpuGeneration::kHopper, 0.40, 0.40, 0.45,
       "llm.c: GPT-2 124M ~470k tok/s per H100 (0.41, issue 19's figure); discussion #677: GPT-2 1558M, "
       "32k steps x 2^20 tokens in 24 h on 8xH100 (0.48 with evaluation in the 24 h)"},
      {GpuGeneration::kBlackwell, 0.30, 0.35, 0.40},
      {GpuGeneration::kUnknown, 0.30, 0.30, 0.30},
  };
  // tern's own CUDA engine at its last GPU measurement (docs/gpu.md). Not in any estimate: a plan that rests
  // on a default MFU above it says what the run would cost at this rate (planner.cpp). Update it with each
  // scripts/gpu-check that measures GPT-2 124M.
  double tern_cuda_mfu = 0.146;
  // Catalog sanity thresholds (warnings, not errors)
  double spot_min_ratio = 0.15;    // spot below 15% of on-demand looks stale
  double price_band_low = 0.33;    // per-GPU price vs the GPU's median across the catalog
  double price_band_high = 3.0;    // (hosts differ: g5.16xlarge pays for 64 vCPUs around one A10G)
  double region_spread_max = 1.6;  // same instance type, cheapest vs dearest region

  const ProviderRates& Rates(const std::string& provider) const;
  double DefaultMfu(GpuGeneration g, double params) const;
};

// One line per default: name as in the struct, value, and where it comes from.
struct DefaultEntry {
  std::string name, value, source;
};
std::vector<DefaultEntry> DescribeDefaults(const PlanDefaults& d);

}  // namespace tern::plan
