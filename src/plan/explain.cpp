#include "plan/explain.h"

#include <cmath>

#include <fmt/format.h>

#include "plan/ranker.h"
#include "plan/units.h"

namespace tern::plan {

namespace {

// The whole `tern train` run (run_model.h): steps plus everything else the trainer does.
std::string ExplainRun(const RunBreakdown& b, const PlanRequest& req) {
  const TrainRunSpec& spec = *req.run;
  const RunSchedule& sc = b.schedule;
  std::string s = fmt::format("\n   Run     the whole `tern train` run of {} (other work {}):\n",
                              spec.config_file, b.source);
  s += fmt::format("           steps        {} steps: {} tokens at the rate above = {:.1f} s\n", sc.steps,
                   FormatCount(req.workload.tokens), b.steps_s);
  if (b.data_fetch_s > 0)
    s += fmt::format("           data fetch   {:.1f} s: data.dir on S3, fetched before the first step\n",
                     b.data_fetch_s);
  s += fmt::format(
      "           start-up     {:.2f} s (process, backend, model init, data) + peak probe {:.2f} s{}\n",
      b.startup_s, b.probe_s, spec.probe_peak ? "" : " (train.peak_gflops set)");
  s += fmt::format("           evaluation   {} passes x {} batches x {}x{} tokens, forward only = {:.1f} s\n",
                   sc.evals, sc.eval_batches, spec.micro_batch, spec.seq, b.eval_s);
  s += fmt::format(
      "           samples      {} calls ({} during, {} together at the end) x {} tokens = {:.1f} s\n",
      sc.sample_calls(), sc.samples_during, sc.samples_end, sc.sample_tokens, b.sample_s);
  s += fmt::format(
      "           checkpoints  {} saves, {} tier writes{}: state copies {:.2f} s + stalls {:.2f} s + the "
      "last "
      "save waited for {:.2f} s = {:.1f} s\n",
      sc.saves.size(), sc.tier_writes(), spec.ckpt_async ? " (async)" : " (sync)", b.ckpt_copy_s,
      b.ckpt_stall_s, b.ckpt_final_s, b.checkpoint_s());
  s += fmt::format("           final save   model.safetensors = {:.2f} s\n", b.model_save_s);
  s += fmt::format("           wall         {:.1f} + {:.1f} = {:.1f} s = {} (steps {:.0f}%)\n", b.steps_s,
                   b.overhead_s(), b.total_s(), FormatHours(b.total_s() / 3600),
                   100 * b.steps_s / b.total_s());
  return s;
}

}  // namespace

Result<std::string> ExplainRow(const PlanResult& r, const Catalog& cat, const PlanRequest& req,
                               const PlanDefaults& d, int row) {
  if (row < 1 || static_cast<size_t>(row) > r.rows.size()) {
    return Status::InvalidArgument(
        fmt::format("--explain {}: there are {} ranked rows (1..{})", row, r.rows.size(), r.rows.size()));
  }
  const PlanRow& p = r.rows[static_cast<size_t>(row - 1)];
  const InstanceOffer& o = cat.offers[p.offer];
  const Workload& w = r.workload;
  const GptConfig& c = w.spec().cfg;
  const double GiB = 1024.0 * 1024 * 1024;
  std::string s = fmt::format("Row #{}: {}\n", row, RowName(cat, p));
  s += fmt::format("Catalog   {}price ${:g}/instance-hour ({}), {} x {} with {:g} GiB each\n", o.where,
                   p.price_hr, BillingName(p.billing), o.gpu_count, o.gpu, o.gpu_mem_gib);
  for (const auto& wn : p.warnings) s += "          warning: " + wn + "\n";
  s += p.runs ? "Runs      yes: tern train runs this plan\n" : "Runs      no: " + p.runs_why + "\n";

  s += fmt::format(
      "\n1. FLOPs   per token = 6*(12*L*C^2 + C*V) + 12*L*T*C   (GptFlopsPerToken, as the trainer "
      "reports)\n");
  s += fmt::format("             = 6*(12*{}*{}^2 + {}*{}) + 12*{}*{}*{} = {:.4g} FLOP\n", c.n_layer, c.n_embd,
                   c.n_embd, c.vocab_size, c.n_layer, w.seq(), c.n_embd, w.flops_per_token());
  s += fmt::format("           total = {} tokens x {:.4g} = {:.4g} FLOP\n", FormatCount(w.spec().tokens),
                   w.flops_per_token(), w.total_flops());

  const MemoryFit& f = p.fit;
  s +=
      fmt::format("\n2. Memory  {} training, {} parameters, micro-batch {} x T={}, ZeRO-1 {}, recompute {}\n",
                  PrecisionName(p.precision), FormatCount(w.params()), f.micro_batch, w.seq(),
                  f.zero1 ? fmt::format("over {} ranks", p.gpus) : "off", ActRecomputeName(f.recompute));
  if (f.zero1) {
    s += fmt::format(
        "           ZeRO-1: AdamW moments of rank 0's shard, 8 B x {} of {} parameters (the first P % {} "
        "ranks "
        "hold one more); weights and grads whole\n",
        ShardElements(static_cast<size_t>(w.params()), p.gpus, 0), static_cast<size_t>(w.params()), p.gpus);
  }
  s += fmt::format(
      "           weights {:.2f} + grads {:.2f} + AdamW {:.2f} + activations {:.2f} = {:.2f} GiB per GPU\n",
      f.used.weights / GiB, f.used.grads / GiB, f.used.optimizer / GiB, f.used.activations / GiB,
      f.used.total() / GiB);
  s += fmt::format(
      "           usable = {:g} GiB x {:g} - {:g} GiB = {:.2f} GiB  -> fits; micro-batch is the largest "
      "power of 2 that does\n",
      o.gpu_mem_gib, d.mem_usable_fraction, d.mem_reserve_gib, f.available / GiB);
  s += fmt::format("           grad accumulation = ceil({:g} / ({} x {} x {} GPUs)) = {}\n",
                   w.global_batch_tokens(), f.micro_batch, w.seq(), p.gpus, f.grad_accum);

  const StepModel& st = p.step;
  const double rc = RecomputeTimeFactor(f.recompute, d);
  s += fmt::format("\n3. Compute peak {:g} TFLOP/s ({} {}) x MFU {:.3f} [{}] = {:.1f} TFLOP/s per GPU\n",
                   st.peak_tflops, o.gpu, PrecisionName(p.precision), st.mfu, st.mfu_source,
                   st.peak_tflops * st.mfu);
  s +=
      fmt::format("           per step = {} x {} x {} tokens x {:.4g} FLOP{} / {:.1f} TFLOP/s = {:.4f} s\n",
                  f.micro_batch, w.seq(), f.grad_accum, w.flops_per_token(),
                  rc != 1.0 ? fmt::format(" x {:.3f} (recompute {})", rc, ActRecomputeName(f.recompute)) : "",
                  st.peak_tflops * st.mfu, st.compute_s);

  s += fmt::format("\n4. Comm    ring all-reduce of {} fp32 gradients over {} GPUs via {}\n",
                   FormatBytes(w.grad_bytes()), p.gpus, p.link.measured ? "a measured link" : p.link.what);
  if (p.gpus > 1 && p.link.measured) {
    const LinkModel& l = p.link;
    s += fmt::format("           measured by tern bench --dist: {}\n", l.source);
    s += fmt::format(
        "           = 2*({}-1)/{} x {} / {:.3g} GB/s (measured bus bandwidth) + latency {:.1f} us x "
        "({}-1)/({}-1) = "
        "{:.4f} s\n",
        p.gpus, p.gpus, FormatBytes(w.grad_bytes()), l.gb_per_s, l.measured_latency_us, p.gpus,
        l.measured_world, st.allreduce_s);
  } else if (p.gpus > 1) {
    s += fmt::format("           = 2*({}-1)/{} x {} / ({:.1f} GB/s after x{:g} efficiency) = {:.4f} s\n",
                     p.gpus, p.gpus, FormatBytes(w.grad_bytes()), p.link.gb_per_s,
                     d.allreduce_link_efficiency, st.allreduce_s);
  }
  if (p.gpus > 1) {
    s += fmt::format(
        "           hidden behind {:g} of the last micro-batch's backward: {:.4f} s; exposed {:.4f} s\n",
        d.overlap_fraction, st.hidden_s, st.exposed_s);
  } else {
    s += "           = 0 (one GPU)\n";
  }
  if (st.allgather_s > 0) {
    s += fmt::format(
        "           ZeRO-1 all-gather of the {} fp32 weights after the update = ({}-1)/{} x {} / {:.3g} "
        "GB/s{} = "
        "{:.4f} s, not hidden\n",
        FormatBytes(w.model_bytes()), p.gpus, p.gpus, FormatBytes(w.model_bytes()), p.link.gb_per_s,
        p.link.latency_s > 0 ? " + latency / 2" : "", st.allgather_s);
    s += fmt::format(
        "           step = {:.4f} + {:.4f} + {:.4f} = {:.4f} s for {:g} tokens -> {:.0f} tokens/s\n",
        st.compute_s, st.exposed_s, st.allgather_s, st.step_s, st.tokens_per_step, st.tokens_per_s);
  } else {
    s += fmt::format("           step = {:.4f} + {:.4f} = {:.4f} s for {:g} tokens -> {:.0f} tokens/s\n",
                     st.compute_s, st.exposed_s, st.step_s, st.tokens_per_step, st.tokens_per_s);
  }
  s += fmt::format("           time = {} / {:.0f} = {:.0f} s = {}\n", FormatCount(w.spec().tokens),
                   st.tokens_per_s, st.wall_s, FormatHours(st.wall_s / 3600));

  if (p.run) s += ExplainRun(*p.run, req);

  s += "\n5. Billing ";
  if (p.billing == Billing::kOnDemand) {
    s += fmt::format("on-demand: ${:g} x {} instance(s) x {:.3f} h = {}\n", p.price_hr, p.nodes,
                     p.wall_s / 3600, FormatUsd(p.compute_usd));
  } else if (p.billing == Billing::kSpot) {
    const SpotModel& sp = p.spot;
    s += fmt::format("spot: hazard {:.4g}/instance-hour{} x {} instance(s) -> job MTBF {:.2f} h\n",
                     sp.hazard_per_hr,
                     req.spot_hazard_per_hr ? " (--spot-mtbf)"
                     : o.spot_hazard_per_hr ? " (catalog)"
                                            : " (default)",
                     p.nodes, sp.job_mtbf_h);
    s += fmt::format(
        "           checkpoint {} in {:.1f} s ({}); Young/Daly interval sqrt(2 x {:.1f} x {:.0f}) = "
        "{:.0f} s ({})\n",
        FormatBytes(w.checkpoint_bytes()), sp.checkpoint_s, sp.checkpoint_source, sp.checkpoint_s,
        sp.job_mtbf_h * 3600, sp.interval_s, FormatHours(sp.interval_s / 3600));
    s += fmt::format(
        "           per preemption: restart {:.0f} s ({}) + half an interval and write {:.0f} s = {:.0f} s\n",
        sp.restart_s, sp.restart_source, (sp.interval_s + sp.checkpoint_s) / 2, sp.lost_per_preemption_s);
    s += fmt::format(
        "           E[T] = {:.0f} x (1 + {:.1f}/{:.0f}) / (1 - {:.3g} x {:.0f}) = {:.0f} s = {}; {:.2f} "
        "preemptions expected\n",
        st.wall_s, sp.checkpoint_s, sp.interval_s, p.nodes * sp.hazard_per_hr / 3600,
        sp.lost_per_preemption_s, sp.expected_wall_s, FormatHours(sp.expected_wall_s / 3600),
        sp.expected_preemptions);
    s += fmt::format("           ${:g} x {} x {:.3f} h = {}\n", p.price_hr, p.nodes, p.wall_s / 3600,
                     FormatUsd(p.compute_usd));
  } else {
    const ReservedModel& rv = p.reserved;
    s += fmt::format(
        "reserved: ${:g} x (1 - {:g}) / utilisation {:.2f} = ${:.4g}/instance-hour; break-even utilisation "
        "{:.2f}\n",
        p.price_hr, rv.discount, rv.utilization, rv.effective_hourly, rv.break_even_utilization);
    s += fmt::format("           ${:.4g} x {} x {:.3f} h = {}; the commitment for the whole term is {}\n",
                     rv.effective_hourly, p.nodes, p.wall_s / 3600, FormatUsd(p.compute_usd),
                     FormatUsd(rv.commitment_usd));
  }
  const StorageEgress& se = p.storage;
  const ProviderRates& rates = d.Rates(o.provider);
  s += fmt::format("\n6. Storage checkpoints {:.3f} GB x {} kept x {:.4f} months x ${:g}/GB-month = {}\n",
                   se.checkpoint_gb, d.checkpoint_retention, p.wall_s / 3600 / 730,
                   rates.storage_usd_per_gb_month, FormatUsd(se.storage_usd));
  s += fmt::format("   Egress  dataset in {:.2f} GB x ${:g} = {}; model out {:.3f} GB x ${:g} = {}\n",
                   se.dataset_gb, se.dataset_gb > 0 ? se.dataset_usd / se.dataset_gb : 0.0,
                   FormatUsd(se.dataset_usd), se.model_gb, rates.egress_usd_per_gb, FormatUsd(se.model_usd));
  s += fmt::format("\n   Total   {} + {} = {} ({} per 1M tokens)\n", FormatUsd(p.compute_usd),
                   FormatUsd(se.total()), FormatUsd(p.total_usd), FormatUsd(p.usd_per_mtok));
  return s;
}

}  // namespace tern::plan
