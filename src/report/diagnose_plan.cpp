// The two rules that ask the planner (src/plan/, as `tern plan` does): memory headroom (its memory model,
// the one of the memory-fit check, says a larger micro-batch fits the run's device) and a cheaper instance
// (the catalog's offers, the measured throughput scaled by their peak FLOPs). docs/report.md, "Diagnosis".
#include <algorithm>
#include <cstdio>
#include <regex>

#include <fmt/format.h>

#include "plan/defaults.h"
#include "plan/workload.h"
#include "report/diagnose.h"

namespace tern::report {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

// The start row's `model`, "L4 H4 C256 V4096 T128" (GptConfig::ToString, the tokenizer's vocabulary
// resolved).
std::optional<GptConfig> ParseShape(const std::string& model) {
  GptConfig c;
  if (std::sscanf(model.c_str(), "L%d H%d C%d V%d T%d", &c.n_layer, &c.n_head, &c.n_embd, &c.vocab_size,
                  &c.block_size) != 5 ||
      !c.Validate().ok())
    return std::nullopt;
  return c;
}

// The start row's `device` of a GPU run, the backend's name "cuda (NVIDIA H200, sm_90, 140 GiB)".
std::optional<double> DeviceMemGib(const std::string& device) {
  static const std::regex re(R"(,\s*([0-9]+(\.[0-9]+)?)\s*GiB\)\s*$)");
  std::smatch m;
  if (!std::regex_search(device, m, re)) return std::nullopt;
  return std::stod(m[1].str());
}

// The planner's workload for the run's shape and batch (nullopt when the start row lacks them).
struct RunShape {
  plan::Workload workload;
  plan::Precision precision;
  bool zero1;
  plan::ActRecompute recompute;
  int world, batch, accum;
  double Bytes(int micro_batch) const {
    return workload.Memory(precision, micro_batch, zero1, recompute, world).total();
  }
};
std::optional<RunShape> ShapeOf(const StartRecord& s) {
  const auto cfg = ParseShape(s.model);
  if (!cfg || s.batch_size <= 0 || s.seq_len <= 0 || s.seq_len > cfg->block_size) return std::nullopt;
  plan::WorkloadSpec spec;
  spec.cfg = *cfg;
  spec.seq = s.seq_len;
  spec.tokens = 1e9;  // not used by the memory model
  const int accum = std::max(1, s.grad_accum_steps), world = std::max(1, s.world);
  spec.global_batch_tokens = static_cast<double>(s.batch_size) * s.seq_len * accum * world;
  spec.micro_batch = s.batch_size;
  auto w = plan::Workload::Make(spec, plan::PlanDefaults{});
  if (!w.ok()) return std::nullopt;
  // fp16 keeps a 16-bit working copy as bf16 does.
  const plan::Precision p = s.precision == "fp32" ? plan::Precision::kFp32 : plan::Precision::kBf16;
  Result<Recompute> recompute = ParseRecompute(s.recompute);  // the start row's name
  return RunShape{std::move(w).value(),
                  p,
                  s.zero >= 1 && world > 1,
                  plan::PlanRecompute(recompute.ok() ? *recompute : Recompute::kNone),
                  world,
                  s.batch_size,
                  accum};
}

double UsableBytes(double gpu_mem_gib) {
  const plan::PlanDefaults d;
  return (gpu_mem_gib * d.mem_usable_fraction - d.mem_reserve_gib) * kGiB;
}

double MedianTokensPerSecond(const RunInput& run) {
  std::vector<double> v;
  for (size_t i = 0; i < run.steps.size(); ++i)
    if ((i > 0 || run.steps.size() < 10) && run.steps[i].tokens_per_s > 0)
      v.push_back(run.steps[i].tokens_per_s);
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

std::optional<Finding> MemoryHeadroomRule(const RunInput& run, const DiagnoseOptions& o) {
  if (!run.start) return std::nullopt;
  const auto mem_gib = DeviceMemGib(run.start->device);
  const auto shape = ShapeOf(*run.start);
  if (!mem_gib || !shape) return std::nullopt;  // a CPU run, or a start row without the shape
  const double usable = UsableBytes(*mem_gib), now = shape->Bytes(shape->batch);
  if (now > usable) return std::nullopt;  // the model says it does not fit, yet it ran: do not advise on it
  // The largest power-of-two multiple of the micro-batch that fits and keeps the total batch: the
  // accumulation steps must divide by it (total_batch_tokens stays, so the trainer lowers the accumulation).
  const int per_step = shape->batch * shape->accum;
  int n = shape->batch;
  while (per_step % (n * 2) == 0 && shape->Bytes(n * 2) <= usable) n *= 2;
  if (n < o.headroom_factor * shape->batch) return std::nullopt;
  Finding f;
  f.rule = "memory_headroom";
  f.title = "memory headroom: a larger micro-batch fits the device";
  const int accum = per_step / n;
  f.evidence = fmt::format(
      "the planner's memory model: train.batch_size {} needs {:.1f} GiB a GPU, {} needs {:.1f} GiB of the "
      "{:.1f} GiB usable ({:g} GiB device, {} {}, seq {}, world {}); gradient accumulation {} -> {}",
      shape->batch, now / kGiB, n, shape->Bytes(n) / kGiB, usable / kGiB, *mem_gib, run.start->model,
      run.start->precision, run.start->seq_len, shape->world, shape->accum, accum);
  f.numbers = {
      {"batch_size", shape->batch},    {"fits_batch_size", n},       {"grad_accum_steps", shape->accum},
      {"new_grad_accum_steps", accum}, {"bytes_now", now},           {"bytes_fits", shape->Bytes(n)},
      {"usable_bytes", usable},        {"device_mem_gib", *mem_gib}, {"factor", o.headroom_factor}};
  f.fix = fmt::format(
      "--set train.batch_size={} (keep train.total_batch_tokens: the accumulation goes from {} to {} steps, "
      "the optimisation stays the same); fewer, larger micro-batches use the GPU better — measure with "
      "`tern bench` or compare runs with `tern report A B`",
      n, shape->accum, accum);
  return f;
}

std::optional<Finding> CheaperInstanceRule(const RunInput& run, const DiagnoseOptions& o) {
  if (!run.start || !run.instance || run.instance->price_per_hour <= 0) return std::nullopt;
  const InstanceOption& self = *run.instance;
  const std::string& precision = run.start->precision;
  const double peak = self.PeakTflops(precision), tps = MedianTokensPerSecond(run);
  if (peak <= 0 || tps <= 0 || self.gpus <= 0) return std::nullopt;
  const auto shape = ShapeOf(*run.start);
  const double usd_per_mtok = self.price_per_hour / (tps * 3600) * 1e6;
  const InstanceOption* best = nullptr;
  double best_tps = 0, best_usd_per_mtok = usd_per_mtok;
  for (const InstanceOption& c : run.offers) {
    // The same job layout (GPUs a node) and billing; the run's micro-batch must fit (the planner's memory
    // model when the start row names the shape, else at least this GPU's memory).
    if (c.key == self.key || c.billing != self.billing || c.gpus != self.gpus || c.price_per_hour <= 0)
      continue;
    const double c_peak = c.PeakTflops(precision);
    if (c_peak <= 0) continue;
    if (shape ? shape->Bytes(shape->batch) > UsableBytes(c.gpu_mem_gib) : c.gpu_mem_gib < self.gpu_mem_gib)
      continue;
    const double c_tps = tps * c_peak / peak;  // the measured MFU carried over, as the planner's calibration
    const double c_usd_per_mtok = c.price_per_hour / (c_tps * 3600) * 1e6;
    if (c_usd_per_mtok < best_usd_per_mtok) {
      best = &c;
      best_tps = c_tps;
      best_usd_per_mtok = c_usd_per_mtok;
    }
  }
  if (!best || best_usd_per_mtok > (1 - o.cheaper_fraction) * usd_per_mtok) return std::nullopt;
  // This run's hour of work, done on the other instance: it takes tps / best_tps hours there.
  const double saved_per_hour = self.price_per_hour - best->price_per_hour * tps / best_tps;
  Finding f;
  f.rule = "cheaper_instance";
  f.title = "a cheaper instance for the measured throughput";
  f.evidence = fmt::format(
      "{} at ${:.2f}/h measured {:.0f} tokens/s: ${:.4f} per 1M tokens; {} ({} x {}, {:g} vs {:g} TFLOP/s "
      "{} a GPU) at ${:.2f}/h would do {:.0f} tokens/s: ${:.4f} per 1M tokens ({:.0f}% less; threshold "
      "{:.0f}%)",
      self.key, self.price_per_hour, tps, usd_per_mtok, best->key, best->gpus, best->gpu,
      best->PeakTflops(precision), peak, precision == "fp32" ? "fp32" : "bf16", best->price_per_hour,
      best_tps, best_usd_per_mtok, 100 * (1 - best_usd_per_mtok / usd_per_mtok), 100 * o.cheaper_fraction);
  f.numbers = {{"instance", self.key},
               {"tokens_per_s", tps},
               {"usd_per_mtok", usd_per_mtok},
               {"cheaper", best->key},
               {"cheaper_tokens_per_s", best_tps},
               {"cheaper_usd_per_mtok", best_usd_per_mtok},
               {"saved_usd_per_hour", saved_per_hour},
               {"saved_usd_per_mtok", usd_per_mtok - best_usd_per_mtok},
               {"threshold", o.cheaper_fraction}};
  f.usd_per_hour = saved_per_hour;
  f.fix = fmt::format(
      "tern run CONFIG --instance {} (saves ${:.2f} per hour of this run's work, ${:.4f} per 1M tokens); "
      "`tern plan --config CONFIG` ranks every option, with the preemption risk and the interconnect",
      best->key, saved_per_hour, usd_per_mtok - best_usd_per_mtok);
  return f;
}

}  // namespace tern::report
