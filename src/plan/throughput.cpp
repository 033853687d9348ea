#include "plan/throughput.h"

#include <algorithm>

#include <fmt/format.h>

namespace tern::plan {

double RingAllReduceSeconds(double bytes, int n, double link_gb_per_s) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) / n * bytes / (link_gb_per_s * 1e9);
}

LinkModel AllReduceLink(const InstanceOffer& o, const GpuSpec& g, int nodes, const PlanDefaults& d) {
  LinkModel link;
  // Vendors quote GPU links bidirectionally; a ring sends one way on each link.
  const double gpu_link_bidir =
      o.gpu_link_gbps.value_or(g.interconnect_gbps.value_or(d.default_gpu_link_gbps));
  const double intra = gpu_link_bidir / 2;
  link.gb_per_s = intra;
  link.what =
      fmt::format("{} {:g} GB/s", g.interconnect.empty() ? "GPU link" : g.interconnect, gpu_link_bidir);
  if (nodes > 1) {
    const double net_gbit = o.network_gbps.value_or(d.default_network_gbps);
    const double inter = net_gbit / 8;  // Gb/s -> GB/s
    link.inter_node = true;
    if (inter < intra || o.gpu_count == 1) {
      link.gb_per_s = inter;
      link.what = fmt::format("network {:g} Gb/s{}", net_gbit, o.network_gbps ? "" : " (default)");
    }
  }
  link.gb_per_s *= d.allreduce_link_efficiency;
  return link;
}

StepModel ModelStep(const Workload& w, const MemoryFit& fit, double peak_tflops, double mfu, int n_gpus,
                    const LinkModel& link, const PlanDefaults& d) {
  StepModel s;
  s.peak_tflops = peak_tflops;
  s.mfu = mfu;
  const double micro_tokens = static_cast<double>(fit.micro_batch) * w.seq();
  s.tokens_per_step = micro_tokens * fit.grad_accum * n_gpus;
  const double rc = RecomputeTimeFactor(fit.recompute, d);
  const double flops_per_s = peak_tflops * 1e12 * mfu;
  const double micro_s = micro_tokens * w.flops_per_token() * rc / flops_per_s;
  s.compute_s = micro_s * fit.grad_accum;
  s.allreduce_s = RingAllReduceSeconds(w.grad_bytes(), n_gpus, link.gb_per_s);
  if (n_gpus > 1) s.allreduce_s += link.latency_s;
  if (fit.zero1 && n_gpus > 1) {
    s.allgather_s = (n_gpus - 1.0) / n_gpus * w.model_bytes() / (link.gb_per_s * 1e9) + link.latency_s / 2;
  }
  // Only the last micro-batch's backward (2/3 of its model FLOPs, 4 of 6 per parameter) can overlap:
  // earlier micro-batches accumulate into the same gradient buffer before it is reduced.
  const double backward_last = micro_s * (2.0 / 3.0) / rc;
  s.hidden_s = std::min(s.allreduce_s, d.overlap_fraction * backward_last);
  s.exposed_s = s.allreduce_s - s.hidden_s;
  s.step_s = s.compute_s + s.exposed_s + s.allgather_s;
  s.tokens_per_s = s.tokens_per_step / s.step_s;
  s.wall_s = w.spec().tokens / s.tokens_per_s;
  return s;
}

}  // namespace tern::plan
