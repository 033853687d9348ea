// Learning rate at a step: linear warmup, then one of
//   cosine    half a cosine from lr down to the floor (lr * min_lr_ratio) at the last step (GPT-2, llm.c);
//   linear    a straight line from lr down to the floor at the last step;
//   wsd       warmup-stable-decay: lr held until the last decay_fraction of the steps, then a straight line
//             down to the floor (MiniCPM, nanochat's warmdown): a checkpoint of the stable phase can be
//             trained on for longer, and decayed from later, without starting over;
//   constant  lr after warmup.
#pragma once

#include <algorithm>
#include <cmath>

namespace tern {

enum class LrScheduleKind { kCosine, kConstant, kLinear, kWsd };  // train.schedule

struct LrSchedule {
  double lr = 6e-4;
  double min_lr_ratio = 0.1;
  int warmup_steps = 0;
  int total_steps = 1;
  LrScheduleKind kind = LrScheduleKind::kCosine;
  double decay_fraction = 0.2;  // wsd: the share of total_steps at the end over which lr decays

  // step is 0-based.
  double At(int step) const {
    if (step < warmup_steps) return lr * (step + 1) / warmup_steps;
    const double min_lr = lr * min_lr_ratio;
    switch (kind) {
      case LrScheduleKind::kConstant:
        return lr;
      case LrScheduleKind::kCosine:
        return min_lr + 0.5 * (1.0 + std::cos(M_PI * Progress(step, warmup_steps))) * (lr - min_lr);
      case LrScheduleKind::kLinear:
        return lr - Progress(step, warmup_steps) * (lr - min_lr);
      case LrScheduleKind::kWsd: {
        // The decay takes the last round(decay_fraction * total_steps) steps, never the warmup's.
        const int decay = static_cast<int>(std::lround(decay_fraction * total_steps));
        const int start = std::max(warmup_steps, total_steps - decay);
        return step < start ? lr : lr - Progress(step, start) * (lr - min_lr);
      }
    }
    return lr;
  }

 private:
  // How far `step` is from `from` towards the last step (total_steps - 1 reaches 1 only past it: the
  // floor is reached at total_steps, as GPT-2's schedule), clamped to [0, 1].
  double Progress(int step, int from) const {
    return std::clamp(static_cast<double>(step - from) / std::max(1, total_steps - from), 0.0, 1.0);
  }
};

}  // namespace tern
