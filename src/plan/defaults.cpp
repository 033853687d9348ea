#include "plan/defaults.h"

#include <fmt/format.h>

namespace tern::plan {

const ProviderRates& PlanDefaults::Rates(const std::string& provider) const {
  for (const auto& r : providers) {
    if (r.provider == provider) return r;
  }
  return unknown_provider;
}

double PlanDefaults::DefaultMfu(GpuGeneration g, double params) const {
  const MfuRow* row = nullptr;
  for (const auto& r : mfu) {
    if (r.generation == g) row = &r;
  }
  for (const auto& r : mfu) {
    if (!row && r.generation == GpuGeneration::kUnknown) row = &r;
  }
  if (!row) return 0.3;
  if (params < 300e6) return row->small;
  if (params < 1e9) return row->medium;
  return row->large;
}

std::vector<DefaultEntry> DescribeDefaults(const PlanDefaults& d) {
  const char* kAssume = "tern assumption; calibrate or override";
  std::vector<DefaultEntry> e = {
      {"global_batch_tokens", fmt::format("{:g}", d.global_batch_tokens),
       "GPT-2 paper / llm.c GPT-2 124M run: 512 x 1024 = 2^19 tokens"},
      {"max_micro_batch", fmt::format("{}", d.max_micro_batch),
       "search bound; larger rarely helps GPT-2 sizes"},
      {"dataset_bytes_per_token", fmt::format("{:g}", d.dataset_bytes_per_token),
       "tern shard format: uint16 tokens"},
      {"mem_usable_fraction", fmt::format("{:g}", d.mem_usable_fraction), kAssume},
      {"mem_reserve_gib", fmt::format("{:g}", d.mem_reserve_gib), kAssume},
      {"gelu_recompute_time_factor", fmt::format("{:.4g}", d.gelu_recompute_time_factor),
       "train.recompute=gelu: L-1 memory-bound GELU passes, not in the FLOP count. GPT-2 124M B=16 on an "
       "H100: "
       "11 x 0.4 GB at ~3 TB/s = 1.5 ms of a 35-100 ms step; +2% measured on 2 CPU cores (demo shape); tern "
       "assumption"},
      {"block_recompute_time_factor", fmt::format("{:.4g}", d.block_recompute_time_factor),
       "train.recompute=blocks: one extra forward = 2 of the 6 FLOPs per parameter "
       "per "
       "token: (6+2)/6"},
      {"allreduce_link_efficiency", fmt::format("{:g}", d.allreduce_link_efficiency), kAssume},
      {"overlap_fraction", fmt::format("{:g}", d.overlap_fraction), kAssume},
      {"default_gpu_link_gbps", fmt::format("{:g}", d.default_gpu_link_gbps),
       "PCIe Gen4 x16 (gpus.csv: L4/A10 rows)"},
      {"default_network_gbps", fmt::format("{:g}", d.default_network_gbps), kAssume},
      {"spot_mtbf_hours", fmt::format("{:g}", d.spot_mtbf_hours),
       "tern assumption (the worked checkpoint-interval case, docs/planning.md); AWS publishes only monthly "
       "buckets"},
      {"checkpoint_write_gb_per_s", fmt::format("{:g}", d.checkpoint_write_gb_per_s), kAssume},
      {"restart_minutes", fmt::format("{:g}", d.restart_minutes), kAssume},
      {"data_fetch_gbps", fmt::format("{:g}", d.data_fetch_gbps),
       "tern fetches 4 objects at a time; AWS's S3 performance guidelines: ~85-90 MB/s per connection "
       "(tern assumption)"},
      {"startup_s", fmt::format("{:g}", d.startup_s), kAssume},
      {"peak_probe_s", fmt::format("{:g}", d.peak_probe_s),
       "trainer.cpp: MeasurePeakGflops(backend, compute, 0.5) + warm-up"},
      {"forward_fraction", fmt::format("{:.4g}", d.forward_fraction),
       "forward = 2 of the 6 FLOPs per parameter per token; bench measures it"},
      {"sample_token_s", fmt::format("{:g}", d.sample_token_s), kAssume},
      {"state_copy_gb_per_s", fmt::format("{:g}", d.state_copy_gb_per_s), kAssume},
      {"serve_bw_efficiency", fmt::format("{:g}", d.serve_bw_efficiency),
       "model bandwidth utilisation (MBU, Databricks/MosaicML \"LLM Inference Performance Engineering\", "
       "2023); tuned CUDA stacks reach 0.6-0.85; tern serve's CUDA path unmeasured: tern assumption"},
      {"serve_decode_mfu", fmt::format("{:g}", d.serve_decode_mfu), kAssume},
      {"serve_prefill_mfu", fmt::format("{:g}", d.serve_prefill_mfu),
       "prefill is large matmuls like a training forward; tern assumption near the training MFU defaults"},
      {"serve_step_overhead_ms", fmt::format("{:g}", d.serve_step_overhead_ms),
       "kernel launches (~15 a layer x ~5 us) + scheduling + sampling per decode step; tern assumption"},
      {"serve_burst_factor", fmt::format("{:g}", d.serve_burst_factor),
       "headroom over the mean rate for bursts and queueing; tern assumption"},
      {"serve_max_batch", fmt::format("{}", d.serve_max_batch), "tern serve --max-batch's range [1, 1024]"},
      {"reserved_discount", fmt::format("{:g}", d.reserved_discount),
       "tern assumption: 1-year commitments (AWS Savings Plans, GCP CUD, Azure reservations) publish "
       "~30-40%"},
      {"reserved_term_hours", fmt::format("{:g}", d.reserved_term_hours), "1 year"},
      {"checkpoint_retention", fmt::format("{}", d.checkpoint_retention), kAssume},
      {"dataset_egress_usd_per_gb", fmt::format("{:g}", d.dataset_egress_usd_per_gb),
       "SkyPilot aws.py get_egress_cost, first 10 TB (SOURCES.md)"},
      {"spot_min_ratio", fmt::format("{:g}", d.spot_min_ratio),
       "catalog check; SOURCES.md notes stale Azure spot"},
      {"price_band_low", fmt::format("{:g}", d.price_band_low), "catalog check"},
      {"price_band_high", fmt::format("{:g}", d.price_band_high), "catalog check"},
      {"region_spread_max", fmt::format("{:g}", d.region_spread_max),
       "catalog check: AWS Tokyo vs us-east-1 is <= 1.45x; SOURCES.md's GCP H100 SKU mix-up is 2.6x"},
      {"tern_cuda_mfu", fmt::format("{:g}", d.tern_cuda_mfu),
       "docs/gpu.md: tern's CUDA engine, GPT-2 124M B=16 T=1024 bf16 on an H200, 136k tokens/s (the last "
       "GPU measurement); only in the caution under a plan that rests on a default MFU above it"},
  };
  for (const auto& r : d.providers) {
    e.push_back({fmt::format("storage_usd_per_gb_month[{}]", r.provider),
                 fmt::format("{:g}", r.storage_usd_per_gb_month), r.source});
    e.push_back({fmt::format("egress_usd_per_gb[{}]", r.provider), fmt::format("{:g}", r.egress_usd_per_gb),
                 r.source});
  }
  for (const auto& m : d.mfu) {
    e.push_back({fmt::format("mfu[{}]", GenerationName(m.generation)),
                 fmt::format("{:g}/{:g}/{:g}", m.small, m.medium, m.large), m.source});
  }
  return e;
}

}  // namespace tern::plan
