// Dynamic loss scaling for fp16 mixed precision (host-side logic, the same on every backend).
//
// fp16 has 5 exponent bits: small gradients underflow to zero unless the loss (and so every gradient) is
// multiplied by a large scale. The scale is dynamic: a step whose gradients overflow (non-finite global
// norm) is skipped and the scale is halved; after `growth_interval` good steps in a row it doubles.
// The scale and the good-step counter are part of the training state (checkpoint them with state()).
//
//   LossScaler scaler;
//   model.Forward(x, y, B, T, dloss * scaler.scale());    // seed the backward with the scaled loss gradient
//   model.Backward();
//   LossScaler::Decision d = scaler.Update(model.GradNorm());   // norm of the *scaled* gradients
//   if (d.apply) model.AdamWStep(lr, ..., /*grad_scale=*/d.unscale * clip_factor(d.grad_norm), t);
#pragma once

#include <cstdint>

namespace tern {

class LossScaler {
 public:
  struct Options {
    double initial_scale = 65536.0;  // 2^16, as PyTorch's GradScaler
    int growth_interval = 2000;      // good steps in a row before the scale doubles
    double growth_factor = 2.0;
    double backoff_factor = 0.5;
    double min_scale = 1.0;
    double max_scale = 16777216.0;  // 2^24
  };
  struct State {
    double scale = 65536.0;
    int good_steps = 0;         // finite steps since the last change of scale
    int64_t skipped_steps = 0;  // total overflowed (skipped) steps, for the logs
  };
  struct Decision {
    bool apply = false;    // false: overflow, skip the optimizer step (gradients are garbage)
    double grad_norm = 0;  // the unscaled global gradient norm (non-finite on overflow)
    float unscale = 1;     // multiply gradients by this (1 / the scale used for this step)
    double scale_used = 1;
  };

  LossScaler();
  explicit LossScaler(const Options& options);

  // The scale for the next forward/backward.
  double scale() const { return state_.scale; }
  // Decides about the step whose scaled gradients have global norm `scaled_grad_norm`, then updates the
  // scale: halves it on overflow (not below min_scale), doubles it after growth_interval good steps.
  Decision Update(double scaled_grad_norm);

  const State& state() const { return state_; }
  void set_state(const State& s) { state_ = s; }
  const Options& options() const { return options_; }

 private:
  Options options_;
  State state_;
};

}  // namespace tern
