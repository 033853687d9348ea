#include "backend/loss_scaler.h"

#include <algorithm>
#include <cmath>

namespace tern {

LossScaler::LossScaler() : LossScaler(Options{}) {}

LossScaler::LossScaler(const Options& options) : options_(options) {
  state_.scale = std::clamp(options.initial_scale, options.min_scale, options.max_scale);
}

LossScaler::Decision LossScaler::Update(double scaled_grad_norm) {
  Decision d;
  d.scale_used = state_.scale;
  d.unscale = static_cast<float>(1.0 / state_.scale);
  d.grad_norm = scaled_grad_norm / state_.scale;
  if (!std::isfinite(scaled_grad_norm)) {
    d.apply = false;
    state_.scale = std::max(options_.min_scale, state_.scale * options_.backoff_factor);
    state_.good_steps = 0;
    state_.skipped_steps++;
    return d;
  }
  d.apply = true;
  if (++state_.good_steps >= options_.growth_interval) {
    state_.scale = std::min(options_.max_scale, state_.scale * options_.growth_factor);
    state_.good_steps = 0;
  }
  return d;
}

}  // namespace tern
