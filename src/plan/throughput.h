// How fast a data-parallel job runs: per-GPU compute at peak x MFU, plus the gradient all-reduce that
// the backward pass cannot hide.
//
//   compute per step   = tokens_per_gpu_per_step x FLOPs/token x (4/3 if recomputing) / (peak x MFU)
//   ring all-reduce    = 2 (n-1)/n x gradient bytes / link bandwidth (+ a measured link's latency)
//   exposed comm       = all-reduce - min(all-reduce, overlap_fraction x backward of the last micro-batch)
//   ZeRO-1 all-gather  = (n-1)/n x fp32 weight bytes / link bandwidth: tern train's ZeRO-1 all-reduces the
//                        gradients, updates its shard, then all-gathers the weights (nothing left to hide it)
//   step time          = compute + exposed comm + all-gather
//
// The link is NVLink (or PCIe) inside one instance and the instance network between instances; a ring
// spanning instances runs at the slower of the two. NCCL gives each GPU's ring share its own NIC, so
// the inter-node term uses the whole instance's network bandwidth. A `tern bench --dist` file replaces the
// catalog figure with the measured bus bandwidth and latency (link_calibration.h).
#pragma once

#include <string>

#include "plan/catalog.h"
#include "plan/defaults.h"
#include "plan/workload.h"

namespace tern::plan {

// Seconds for a ring all-reduce of `bytes` over `n` ranks at `link_gb_per_s` (GB/s, one direction).
double RingAllReduceSeconds(double bytes, int n, double link_gb_per_s);

struct LinkModel {
  double gb_per_s = 0;  // effective one-direction bandwidth used for the ring (after efficiency)
  bool inter_node = false;
  std::string what;  // "NVLink 4 900 GB/s" / "network 3200 Gb/s" / "measured 180 GB/s (dist.json)"
  // A measured link (`tern bench --dist`): gb_per_s is its bus bandwidth as measured (no efficiency factor),
  // latency_s the all-reduce latency scaled to this row's ring; `source` says where it was measured.
  bool measured = false;
  double latency_s = 0;  // added to each all-reduce; half of it to an all-gather (n-1 ring steps)
  std::string source;    // "dist.json: nccl, 8 ranks on 1 node (H100)"
  double measured_latency_us = 0;
  int measured_world = 0;
};
LinkModel AllReduceLink(const InstanceOffer& o, const GpuSpec& g, int nodes, const PlanDefaults& d);

struct StepModel {
  double peak_tflops = 0, mfu = 0;
  std::string mfu_source;      // "default (hopper, <300M)" / "calibrated: bench.json"
  double tokens_per_step = 0;  // global, after rounding micro-batch x accum x ranks
  double compute_s = 0;        // per optimizer step
  double allreduce_s = 0, hidden_s = 0, exposed_s = 0;
  double allgather_s = 0;  // ZeRO-1's weight all-gather after the update (0 without ZeRO-1)
  double step_s = 0;
  double tokens_per_s = 0;
  double wall_s = 0;  // tokens / tokens_per_s, no preemptions
};
StepModel ModelStep(const Workload& w, const MemoryFit& fit, double peak_tflops, double mfu, int n_gpus,
                    const LinkModel& link, const PlanDefaults& d);

}  // namespace tern::plan
