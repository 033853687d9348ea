#include "train/run_setup.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/peak_probe.h"
#include "backend/registry.h"

namespace tern {

Compute PrecisionCompute(TrainPrecision precision) {
  switch (precision) {
    case TrainPrecision::kBf16:
      return Compute::kBF16;
    case TrainPrecision::kFp16:
      return Compute::kF16;
    case TrainPrecision::kFp32:
      break;
  }
  return Compute::kF32;
}

Result<RunSetup> MakeRunSetup(const TrainConfig& cfg) {
  RunSetup s;
  TERN_ASSIGN_OR_RETURN(s.backend, MakeBackend(DeviceName(cfg.device)));
  s.compute = PrecisionCompute(cfg.precision);
  // The fast CPU path has no fp16 matmul: emulate it (operands rounded to fp16, fp32 products) so the fp16
  // trainer runs, and is tested, on every backend.
  if (s.compute == Compute::kF16) s.backend = WithF16Emulation(std::move(s.backend));
  if (!s.backend->SetAttentionKernel(AttentionKindName(cfg.attention))) {
    return Status::InvalidArgument(fmt::format(
        "train.attention={} is not available on {} (it has {}); use train.attention=naive or another device",
        AttentionKindName(cfg.attention), s.backend->name(),
        fmt::join(s.backend->capabilities().attention_kinds, ", ")));
  }
  // fp16 and bf16 tensor cores have the same peak on every supported GPU, and the probe's bf16 path is the
  // one that pre-casts its operands; on the CPU fp16 runs at the fp32 matmul's speed (emulated).
  s.probe = s.compute != Compute::kF16              ? s.compute
            : s.backend->capabilities().native_fp16 ? Compute::kBF16
                                                    : Compute::kF32;
  return s;
}

double ProbeRunPeak(const RunSetup& setup) {
  return MeasurePeakGflops(setup.backend.get(), setup.probe, 0.5);
}

}  // namespace tern
