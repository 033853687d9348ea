// GPU utilisation, memory, power and energy from NVML, loaded with dlopen at run time: no link dependency,
// and on a machine without an NVIDIA driver the sampler reports "unavailable" instead of failing.
//
// Per-step use (the trainer's metrics.jsonl fields gpu_util, gpu_mem_gb, gpu_power_w, joules_per_token):
//   BackgroundGpuSampler gpu(std::make_unique<NvmlSampler>(bus_id));   // once; polls NVML on its own thread
//   GpuStepMeter meter(&gpu);
//   meter.StepBegin();  ...step...  GpuStepMetrics g = meter.StepEnd(tokens_in_step, step_seconds);
//   if (g.ok) row["gpu_util"] = g.util_pct, ...
// The trainer takes any GpuSampler (TrainerEnv::gpu_sampler), so tests drive it with a fake one.
#pragma once

#include <cstdint>
#include <string>

namespace tern {

struct GpuSample {
  bool ok = false;
  double util_pct = 0;     // percent of the last sample period (1/6 s to 1 s, driver-defined) a kernel ran
  double mem_used_gb = 0;  // device memory in use (all processes), GB = 1e9 bytes
  double mem_total_gb = 0;
  double power_w = 0;       // board power draw now
  bool has_energy = false;  // the energy counter exists on Volta and newer
  double energy_j = 0;      // energy since the driver loaded, joules (monotonic)
};

// Where GPU readings come from: NVML on a real GPU, a fake in tests. Sample() may be called from any thread.
class GpuSampler {
 public:
  virtual ~GpuSampler() = default;
  virtual bool available() const = 0;
  // "NVML ok: <device name>" or "NVML unavailable: <reason>" (or the fake's own words).
  virtual const std::string& status() const = 0;
  // One reading; ok == false when the source is unavailable or the query failed.
  virtual GpuSample Sample() const = 0;
};

class NvmlSampler : public GpuSampler {
 public:
  // device_index is NVML's index; -1 = the first entry of CUDA_VISIBLE_DEVICES if it is a number, else 0.
  explicit NvmlSampler(int device_index = -1);
  // The GPU at this PCI bus id ("0000:3B:00.0", from cudaDeviceGetPCIBusId): the one CUDA computes on,
  // whatever the enumeration order. An empty id falls back to NvmlSampler(-1).
  explicit NvmlSampler(const std::string& pci_bus_id);
  ~NvmlSampler() override;
  NvmlSampler(const NvmlSampler&) = delete;
  NvmlSampler& operator=(const NvmlSampler&) = delete;

  bool available() const override { return device_ != nullptr; }
  const std::string& status() const override { return status_; }
  const std::string& device_name() const { return name_; }
  GpuSample Sample() const override;

 private:
  struct Api;
  // Loads the library and initialises NVML; false (with status_ set) when that fails.
  bool Open();
  void InitByIndex(int device_index);
  void InitByBusId(const std::string& pci_bus_id);
  void SetDevice(void* handle);
  void* lib_ = nullptr;
  Api* api_ = nullptr;
  void* device_ = nullptr;
  std::string status_, name_;
};

struct GpuStepMetrics {
  bool ok = false;
  double util_pct = 0, mem_used_gb = 0, power_w = 0;
  double joules = 0;  // energy of the step: the counter's difference, else mean power x seconds
  double joules_per_token = 0;
};

// Energy and utilisation of one training step (or any timed interval) from two samples:
//   joules = energy_end - energy_begin              when both samples carry NVML's energy counter
//          = (power_begin + power_end) / 2 * seconds  otherwise (power_end * seconds without a begin sample)
//   joules_per_token = joules / tokens; util, memory and power are the end sample's.
class GpuStepMeter {
 public:
  explicit GpuStepMeter(const GpuSampler* sampler) : sampler_(sampler) {}
  void StepBegin();
  GpuStepMetrics StepEnd(double tokens, double seconds);

 private:
  const GpuSampler* sampler_;
  GpuSample begin_;
};

}  // namespace tern
