// Learning rate at a step: linear warmup, then cosine decay to a floor (or constant).
#pragma once

#include <cmath>
#include <string>

namespace tern {

struct LrSchedule {
  double lr = 6e-4;
  double min_lr_ratio = 0.1;
  int warmup_steps = 0;
  int total_steps = 1;
  bool cosine = true;

  // step is 0-based.
  double At(int step) const {
    if (step < warmup_steps) return lr * (step + 1) / warmup_steps;
    if (!cosine) return lr;
    double min_lr = lr * min_lr_ratio;
    double progress = static_cast<double>(step - warmup_steps) / std::max(1, total_steps - warmup_steps);
    progress = std::min(1.0, progress);
    return min_lr + 0.5 * (1.0 + std::cos(M_PI * progress)) * (lr - min_lr);
  }
};

}  // namespace tern
