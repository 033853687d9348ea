// One run setup for `tern train` and `tern bench`: the backend for train.device (fp16 matmuls emulated where
// the backend has none, train.attention's kernels), the compute type of the model's matmuls for
// train.precision, and the precision the peak probe measures. The trainer and the bench both build their
// device here, so the bench times the trainer's own configuration.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "core/status.h"
#include "train/train_config.h"

namespace tern {

struct RunSetup {
  std::unique_ptr<Backend> backend;
  Compute compute = Compute::kF32;  // of the model's matmuls
  Compute probe = Compute::kF32;    // of the peak probe, MFU's denominator
};

// fp32 -> kF32, bf16 -> kBF16, fp16 -> kF16.
Compute PrecisionCompute(TrainPrecision precision);

// Uses cfg.device, cfg.precision and cfg.attention. InvalidArgument when the device is unknown or
// unavailable, or lacks the attention kernels asked for.
Result<RunSetup> MakeRunSetup(const TrainConfig& cfg);

// The peak the trainer measures at start when run.peak_gflops is 0: GFLOP/s, about half a second.
double ProbeRunPeak(const RunSetup& setup);

}  // namespace tern
