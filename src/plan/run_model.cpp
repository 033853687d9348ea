#include "plan/run_model.h"

#include <algorithm>

namespace tern::plan {

int RunSchedule::tier_writes() const {
  int n = 0;
  for (const auto& s : saves) n += s.tiers;
  return n;
}

RunSchedule ScheduleRun(const TrainRunSpec& spec) {
  RunSchedule r;
  r.steps = std::max(0, spec.steps);
  r.eval_batches = spec.eval_batches;
  // Trainer::Samples keeps prompt + completion within the trained context (the prompt is a few tokens).
  r.sample_tokens = std::max(0, std::min(spec.sample_tokens, spec.seq - 1));
  r.samples_end = r.sample_tokens > 0 ? std::max(0, spec.num_samples) : 0;
  // The trainer's Run() loop, step by step: the counts follow its conditions exactly.
  for (int s = 1; s <= r.steps; ++s) {
    const bool last = s == r.steps;
    const bool eval = (spec.eval_every > 0 && s % spec.eval_every == 0) || last;
    if (eval) ++r.evals;
    if (spec.sample_every > 0 && s % spec.sample_every == 0 && !last && r.sample_tokens > 0)
      ++r.samples_during;
    int tiers = 0;
    if (spec.ckpt_every > 0 && (s % spec.ckpt_every == 0 || last)) ++tiers;
    if (spec.durable_every > 0 && (s % spec.durable_every == 0 || last)) ++tiers;
    if (spec.best_k > 0 && eval)
      ++tiers;  // assumes each evaluation is a new best (loss falls): an upper bound
    if (tiers > 0) r.saves.push_back({s, tiers});
  }
  return r;
}

RunOverheads DefaultRunOverheads(const PlanDefaults& d) {
  RunOverheads o;
  o.source = "defaults";
  o.startup_s = d.startup_s;
  o.peak_probe_s = d.peak_probe_s;
  o.forward_fraction = d.forward_fraction;
  o.sample_token_s = d.sample_token_s;
  o.state_copy_gb_per_s = d.state_copy_gb_per_s;
  o.ckpt_write_gb_per_s = d.checkpoint_write_gb_per_s;
  o.model_write_gb_per_s = d.checkpoint_write_gb_per_s;
  return o;
}

RunBreakdown ModelRun(const TrainRunSpec& spec, const RunSchedule& schedule, const RunOverheads& o,
                      double steps_s, double step_s, double tokens_per_step, double state_bytes,
                      double model_bytes) {
  RunBreakdown b;
  b.schedule = schedule;
  b.source = o.source;
  b.step_s = step_s;
  b.steps_s = steps_s;
  b.startup_s = o.startup_s;
  b.probe_s = spec.probe_peak ? o.peak_probe_s : 0;
  // Evaluation runs forward only, over micro-batches of the training shape.
  const double eval_tokens =
      static_cast<double>(schedule.evals) * schedule.eval_batches * spec.micro_batch * spec.seq;
  b.eval_s = eval_tokens * o.forward_fraction * step_s / tokens_per_step;
  b.sample_s = static_cast<double>(schedule.sample_calls()) * schedule.sample_tokens * o.sample_token_s;
  const double copy_s = state_bytes / (o.state_copy_gb_per_s * 1e9);
  const double tier_s = state_bytes / (o.ckpt_write_gb_per_s * 1e9);
  for (size_t i = 0; i < schedule.saves.size(); ++i) {
    const auto& save = schedule.saves[i];
    const double persist_s = save.tiers * tier_s;
    if (!spec.ckpt_async || i + 1 == schedule.saves.size()) {
      b.ckpt_final_s += copy_s + persist_s;  // waited for in full
      continue;
    }
    // Async: the copy competes with training (counted whole); the persist hides behind the steps until the
    // next save, which waits for it (ckpt.when_busy=wait).
    b.ckpt_copy_s += copy_s;
    const double gap_s = (schedule.saves[i + 1].step - save.step) * step_s;
    b.ckpt_stall_s += std::max(0.0, copy_s + persist_s - gap_s);
  }
  b.model_save_s = model_bytes / (o.model_write_gb_per_s * 1e9);
  return b;
}

}  // namespace tern::plan
