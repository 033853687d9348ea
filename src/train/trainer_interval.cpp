// ckpt.every=auto (docs/checkpoints.md): the fast tier's interval, tuned by ckpt/interval.h from the steps
// and the saves this trainer measures, and every change written to metrics.jsonl as a "ckpt_interval" row.
#include <fmt/format.h>

#include "train/trainer.h"

namespace tern {

void Trainer::OpenIntervalTuner() {
  // Rank 0 alone saves, so it alone measures saves; the other ranks never consult an interval (see
  // trainer.h).
  if (!cfg_.ckpt.every_auto || !writer()) return;
  ckpt::IntervalOptions o;
  const CheckpointConfig& c = cfg_.ckpt;
  if (c.mtbf_s > 0) {
    o.mtbf_s = c.mtbf_s;
    o.mtbf_source = c.mtbf_source.empty() ? "ckpt.mtbf" : c.mtbf_source;
  } else {
    o.mtbf_s = ckpt::kDefaultMtbfS;
    o.mtbf_source = "default: 6 h, the planner's spot MTBF (no ckpt.mtbf given)";
    if (!quiet_) {
      std::fprintf(stderr,
                   "tern train: ckpt.every=auto without ckpt.mtbf: assuming one interruption every 6 h (the "
                   "planner's spot default; on-demand machines are interrupted far less often). Set "
                   "ckpt.mtbf, or let `tern run` set it from the job's history\n");
    }
  }
  o.max_steps = c.every_max > 0 ? c.every_max : cfg_.steps;
  // Weights and both AdamW moments, fp32, written at the planner's assumed bandwidth.
  o.first_guess_save_s = 12.0 * static_cast<double>(model_->num_params()) / ckpt::kAssumedSaveBytesPerS;
  interval_ = std::make_unique<ckpt::IntervalTuner>(std::move(o));
}

int Trainer::Cadence(int tier) const {
  if (interval_ && tier == ckpt_->FindTier("fast")) return interval_->every();
  return ckpt_->tier(tier).every;
}

bool Trainer::PeriodicDue(int tier, int step) const {
  const int every = Cadence(tier);
  if (every <= 0) return false;
  if (interval_ && tier == ckpt_->FindTier("fast")) {
    // The interval moves, so it counts from the last periodic save (or the step resumed from).
    return step - std::max(interval_last_, resumed_from_) >= every;
  }
  return step % every == 0;
}

void Trainer::IntervalSaveStarted(int step, const std::vector<int>& tiers) {
  const int fast = ckpt_->FindTier("fast");
  if (!interval_ || std::find(tiers.begin(), tiers.end(), fast) == tiers.end() || !PeriodicDue(fast, step))
    return;
  interval_last_ = step;
  interval_->SaveStarted();
}

void Trainer::ObserveIntervalSave(const ckpt::SaveEvent& e) {
  // Only the saves the interval schedules: emergency and manual saves are synchronous, best ones elsewhere.
  if (!interval_ || e.tier != "fast" || e.kind != "periodic" || e.skipped || !e.status.ok()) return;
  interval_->ObserveSave(e.stall_ms / 1e3, e.wait_ms / 1e3, (e.copy_ms + e.persist_ms) / 1e3);
}

Status Trainer::TuneInterval(double step_s, ProgressBar* bar) {
  if (!interval_) return Status::Ok();
  interval_->ObserveStep(step_s, ckpt_->busy());
  const std::optional<ckpt::IntervalDecision> d = interval_->Retune();
  if (!d) return Status::Ok();
  nlohmann::json row = {{"event", "ckpt_interval"},
                        {"step", step_},
                        {"every", d->every},
                        {"previous", d->previous > 0 ? nlohmann::json(d->previous) : nlohmann::json()},
                        {"tau_s", d->tau_s},
                        {"young_s", d->young_s},
                        {"delta_s", d->delta_s},
                        {"delta_from", d->measured ? "measured" : "first guess"},
                        {"stall_s", d->stall_s},
                        {"wait_s", d->wait_s},
                        {"writer_s", d->writer_s},
                        {"interference_s", d->interference_s},
                        {"saves", d->saves},
                        {"mtbf_s", d->mtbf_s},
                        {"mtbf_source", d->mtbf_source},
                        {"step_s", d->step_s},
                        {"bound", d->bound}};
  const std::string text = fmt::format(
      "checkpoint interval: every {} steps{} ({}: Daly {:.3g} s from delta {:.3g} s ({}), M {:.3g} h ({}), "
      "step {:.3g} s)",
      d->every, d->previous > 0 ? fmt::format(" (was {})", d->previous) : "", d->bound, d->tau_s, d->delta_s,
      d->measured ? fmt::format("{} saves measured", d->saves) : "first guess", d->mtbf_s / 3600,
      d->mtbf_source, d->step_s);
  if (bar && !quiet_) bar->Print(text);
  return log_.Write(row);
}

}  // namespace tern
