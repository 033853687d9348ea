#include "ckpt/interval.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <utility>

#include <fmt/format.h>

namespace tern::ckpt {
namespace {

double Average(double avg, int n, double x, double weight) {
  return n == 0 ? x : (1 - weight) * avg + weight * x;
}

}  // namespace

double YoungInterval(double delta_s, double mtbf_s) {
  if (!(delta_s > 0) || !(mtbf_s > 0)) return 0;
  return std::sqrt(2 * delta_s * mtbf_s);
}

double DalyInterval(double delta_s, double mtbf_s) {
  if (!(delta_s > 0) || !(mtbf_s > 0)) return 0;
  if (delta_s >= 2 * mtbf_s) return mtbf_s;
  const double r = delta_s / (2 * mtbf_s);
  return std::sqrt(2 * delta_s * mtbf_s) * (1 + std::sqrt(r) / 3 + r / 9) - delta_s;  // r/9 = delta/(18M)
}

Result<double> ParseDurationSeconds(std::string_view text, std::string_view what) {
  const auto bad = [&] {
    return Status::InvalidArgument(
        fmt::format("{}: '{}' is not a duration; write seconds or a number with s, m, h or d, e.g. 6h, 90m, "
                    "21600",
                    what, text));
  };
  double v = 0;
  const char* begin = text.data();
  const char* end = begin + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, v);
  if (ec != std::errc() || ptr == begin) return bad();
  const std::string_view unit(ptr, static_cast<size_t>(end - ptr));
  double scale = 0;
  if (unit.empty() || unit == "s")
    scale = 1;
  else if (unit == "m" || unit == "min")
    scale = 60;
  else if (unit == "h")
    scale = 3600;
  else if (unit == "d")
    scale = 86400;
  if (scale == 0) return bad();
  if (!(v > 0) || !std::isfinite(v))
    return Status::InvalidArgument(fmt::format("{}: must be a positive duration, got '{}'", what, text));
  return v * scale;
}

void IntervalTuner::ObserveStep(double step_s, bool writer_busy) {
  if (!(step_s > 0)) return;
  step_s_ = Average(step_s_, steps_++, step_s, o_.step_weight);
  if (std::exchange(skip_next_, false)) return;
  if (writer_busy) {
    busy_step_s_ = Average(busy_step_s_, busy_steps_++, step_s, o_.step_weight);
  } else {
    idle_step_s_ = Average(idle_step_s_, idle_steps_++, step_s, o_.step_weight);
  }
}

void IntervalTuner::ObserveSave(double stall_s, double wait_s, double writer_s) {
  wait_s = std::clamp(wait_s, 0.0, std::max(0.0, stall_s));
  stall_s_ = Average(stall_s_, saves_, std::max(0.0, stall_s) - wait_s, o_.save_weight);
  wait_s_ = Average(wait_s_, saves_, wait_s, o_.save_weight);
  writer_s_ = Average(writer_s_, saves_, std::max(0.0, writer_s), o_.save_weight);
  saves_++;
  pending_ = true;
}

IntervalDecision IntervalTuner::Compute() const {
  IntervalDecision d;
  d.previous = current_.every;
  d.mtbf_s = o_.mtbf_s;
  d.mtbf_source = o_.mtbf_source;
  d.step_s = step_s_;
  d.saves = saves_;
  d.measured = saves_ > 0;
  if (d.measured) {
    d.stall_s = stall_s_;
    d.wait_s = wait_s_;
    d.writer_s = writer_s_;
    // The share of the writer's time the steps beside it lost: 1 - idle/busy step time (0 without both).
    if (busy_steps_ > 0 && idle_steps_ > 0 && busy_step_s_ > idle_step_s_)
      d.interference_s = writer_s_ * (1 - idle_step_s_ / busy_step_s_);
    d.delta_s = d.stall_s + d.interference_s;
  } else {
    d.delta_s = o_.first_guess_save_s;
  }
  d.young_s = YoungInterval(d.delta_s, d.mtbf_s);
  d.tau_s = DalyInterval(d.delta_s, d.mtbf_s);
  if (!(step_s_ > 0)) return d;  // no step time yet: no interval
  const double daly_steps = std::round(d.tau_s / step_s_);
  const double writer_steps = std::ceil(d.writer_s / step_s_);
  double every = daly_steps;
  d.bound = "daly";
  if (writer_steps > every) {
    every = writer_steps;
    d.bound = "writer";
  }
  if (every < 1) {
    every = 1;
    d.bound = "min";
  }
  if (o_.max_steps > 0 && every > o_.max_steps) {
    every = o_.max_steps;
    d.bound = "max";
  }
  d.every = static_cast<int>(std::min(every, 1e9));
  return d;
}

std::optional<IntervalDecision> IntervalTuner::Retune() {
  if (current_.every > 0 && !std::exchange(pending_, false)) return std::nullopt;
  IntervalDecision d = Compute();
  if (d.every == 0) return std::nullopt;
  const int old = current_.every;
  if (old > 0 && (d.every == old || std::abs(d.every - old) < o_.hysteresis * old)) return std::nullopt;
  current_ = d;
  return d;
}

}  // namespace tern::ckpt
