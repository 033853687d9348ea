#include "run/live_policy.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace tern::run {

bool TraceSpotMarket::SpotUp(double now) {
  if (trace_.ticks() == 0 || trace_.gap_s <= 0) return false;
  const double t = std::max(0.0, now - start_unix_);
  return trace_.Up(start_tick_ + static_cast<size_t>(std::floor(t / trace_.gap_s + 1e-9)));
}

long LivePolicy::Tick(double now) const {
  if (o_.tick_s <= 0) return 0;
  return static_cast<long>(std::floor((now - o_.start_unix) / o_.tick_s + 1e-9));
}

plan::Cluster LivePolicy::Decide(const LiveView& v) {
  using plan::Cluster;
  plan::PolicyView p;
  p.t_h = std::max(0.0, v.now_unix - o_.start_unix) / 3600;
  p.deadline_h = std::max(0.0, o_.deadline_unix - o_.start_unix) / 3600;
  const double total = std::max(1, o_.total_steps);
  const double done = std::clamp(static_cast<double>(v.steps_done), 0.0, total);
  // Work in hours at the measured step time; before a step was measured only the fraction done is known:
  // the straight line is the same in any unit, and the safety net waits for a measurement (half the window
  // stands in for the work until then).
  p.work_h = v.step_s > 0 ? total * v.step_s / 3600 : p.deadline_h / 2;
  p.done_h = p.work_h * done / total;
  p.at_risk_h = 0;  // the trainer saves on the spot notice (ckpt.on_notice): a preemption loses nothing
  p.switch_h = 0;   // a switch's save is the same emergency save
  p.restart_h = o_.restart_s / 3600;
  p.tick_h = o_.tick_s / 3600;
  p.current = v.current;
  p.spot_up = v.spot_up;
  const bool net_before = up_.safety_net();
  const Cluster next = up_.Decide(p);
  const double expected = p.deadline_h > 0 ? p.work_h * std::min(1.0, p.t_h / p.deadline_h) : p.work_h;
  const std::string where =
      fmt::format("{:.1f}% done, {:.1f}% expected by the straight line at {:.2f} h", 100 * done / total,
                  100 * expected / std::max(p.work_h, 1e-12), p.t_h);
  if (up_.safety_net()) {
    why_ = fmt::format("safety net{}: {:.2f} h left to the deadline, {:.2f} h of work left + 2 x restart",
                       net_before ? " (held)" : "", p.deadline_h - p.t_h, p.work_h - p.done_h);
  } else if (next == Cluster::kSpot) {
    why_ = fmt::format("spot is up: take it ({})", where);
  } else if (next == Cluster::kOnDemand) {
    why_ = v.current == Cluster::kOnDemand
               ? fmt::format("behind the straight line 2 x restart ahead, or no spot ({})", where)
               : fmt::format("behind the straight line and no spot: on-demand ({})", where);
  } else {
    why_ = fmt::format("no spot and ahead of the straight line: wait ({})", where);
  }
  return next;
}

}  // namespace tern::run
