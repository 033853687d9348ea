// GPU utilisation, memory, power and energy from NVML, loaded with dlopen at run time: no link dependency,
// and on a machine without an NVIDIA driver the sampler reports "unavailable" instead of failing.
//
// Per-step use (the trainer's metrics.jsonl fields gpu_util, gpu_mem_gb, gpu_power_w, joules_per_token):
//   NvmlSampler nvml;                       // once
//   GpuStepMeter meter(&nvml);
//   meter.StepBegin();  ...step...  GpuStepMetrics g = meter.StepEnd(tokens_in_step, step_seconds);
//   if (g.ok) row["gpu_util"] = g.util_pct, ...
#pragma once

#include <cstdint>
#include <string>

namespace tern {

struct GpuSample {
  bool ok = false;
  double util_pct = 0;       // percent of the last sample period (1/6 s to 1 s, driver-defined) a kernel ran
  double mem_used_gb = 0;    // device memory in use (all processes), GB = 1e9 bytes
  double mem_total_gb = 0;
  double power_w = 0;        // board power draw now
  bool has_energy = false;   // the energy counter exists on Volta and newer
  double energy_j = 0;       // energy since the driver loaded, joules (monotonic)
};

class NvmlSampler {
 public:
  // device_index is NVML's index; -1 = the first entry of CUDA_VISIBLE_DEVICES if it is a number, else 0.
  explicit NvmlSampler(int device_index = -1);
  ~NvmlSampler();
  NvmlSampler(const NvmlSampler&) = delete;
  NvmlSampler& operator=(const NvmlSampler&) = delete;

  bool available() const { return device_ != nullptr; }
  // "NVML ok: <device name>" or "NVML unavailable: <reason>".
  const std::string& status() const { return status_; }
  const std::string& device_name() const { return name_; }
  // One reading; ok == false when NVML is unavailable or the query failed.
  GpuSample Sample() const;

 private:
  struct Api;
  void* lib_ = nullptr;
  Api* api_ = nullptr;
  void* device_ = nullptr;
  std::string status_, name_;
};

struct GpuStepMetrics {
  bool ok = false;
  double util_pct = 0, mem_used_gb = 0, power_w = 0;
  double joules = 0;            // energy of the step: the counter's difference, else mean power x seconds
  double joules_per_token = 0;
};

// Energy and utilisation of one training step (or any timed interval) from two samples.
class GpuStepMeter {
 public:
  explicit GpuStepMeter(const NvmlSampler* sampler) : sampler_(sampler) {}
  void StepBegin();
  GpuStepMetrics StepEnd(double tokens, double seconds);

 private:
  const NvmlSampler* sampler_;
  GpuSample begin_;
};

}  // namespace tern
