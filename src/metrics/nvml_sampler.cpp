#include "metrics/nvml_sampler.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

namespace tern {

// The few NVML declarations used (nvml.h is not needed at build time). Signatures as in NVML's header.
namespace {
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
struct nvmlUtilization_t {
  unsigned int gpu, memory;
};
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
constexpr nvmlReturn_t kNvmlSuccess = 0;
}  // namespace

struct NvmlSampler::Api {
  nvmlReturn_t (*Init)() = nullptr;
  nvmlReturn_t (*Shutdown)() = nullptr;
  const char* (*ErrorString)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*GetCount)(unsigned int*) = nullptr;
  nvmlReturn_t (*GetHandleByIndex)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*GetName)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*GetUtilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*GetMemoryInfo)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*GetPowerUsage)(nvmlDevice_t, unsigned int*) = nullptr;
  nvmlReturn_t (*GetTotalEnergy)(nvmlDevice_t, unsigned long long*) = nullptr;
  nvmlReturn_t (*GetHandleByPciBusId)(const char*, nvmlDevice_t*) = nullptr;
};

namespace {

template <typename F>
bool Load(void* lib, const char* name, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
  return *fn != nullptr;
}

int DefaultIndex() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  if (!v || !*v) return 0;
  char* end = nullptr;
  long i = std::strtol(v, &end, 10);
  return (end != v && (*end == '\0' || *end == ',') && i >= 0) ? static_cast<int>(i) : 0;
}

}  // namespace

bool NvmlSampler::Open() {
  // TERN_NVML_LIBRARY names the library to use instead (unusual installs; tests).
  const char* override_path = std::getenv("TERN_NVML_LIBRARY");
  if (override_path && *override_path) {
    lib_ = dlopen(override_path, RTLD_NOW | RTLD_LOCAL);
  } else {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib_) lib_ = dlopen("libnvidia-ml.so", RTLD_NOW | RTLD_LOCAL);
  }
  if (!lib_) {
    status_ = std::string("NVML unavailable: ") +
              (override_path && *override_path ? override_path : "libnvidia-ml.so.1") +
              " not found (no NVIDIA driver on this machine)";
    return false;
  }
  api_ = new Api();
  bool ok = Load(lib_, "nvmlInit_v2", &api_->Init) && Load(lib_, "nvmlShutdown", &api_->Shutdown) &&
            Load(lib_, "nvmlErrorString", &api_->ErrorString) &&
            Load(lib_, "nvmlDeviceGetCount_v2", &api_->GetCount) &&
            Load(lib_, "nvmlDeviceGetHandleByIndex_v2", &api_->GetHandleByIndex) &&
            Load(lib_, "nvmlDeviceGetName", &api_->GetName) &&
            Load(lib_, "nvmlDeviceGetUtilizationRates", &api_->GetUtilization) &&
            Load(lib_, "nvmlDeviceGetMemoryInfo", &api_->GetMemoryInfo) &&
            Load(lib_, "nvmlDeviceGetPowerUsage", &api_->GetPowerUsage);
  Load(lib_, "nvmlDeviceGetTotalEnergyConsumption", &api_->GetTotalEnergy);    // optional
  Load(lib_, "nvmlDeviceGetHandleByPciBusId_v2", &api_->GetHandleByPciBusId);  // optional
  if (!ok) {
    status_ = "NVML unavailable: the library lacks a needed symbol";
    api_->Init = nullptr;
    return false;
  }
  nvmlReturn_t r = api_->Init();
  if (r != kNvmlSuccess) {
    status_ = std::string("NVML unavailable: nvmlInit failed: ") + api_->ErrorString(r);
    api_->Init = nullptr;  // nothing to shut down
    return false;
  }
  return true;
}

void NvmlSampler::SetDevice(void* dev) {
  char name[96] = {0};
  if (api_->GetName(dev, name, sizeof(name)) == kNvmlSuccess) name_ = name;
  device_ = dev;
  status_ = "NVML ok: " + name_;
}

NvmlSampler::NvmlSampler(int device_index) {
  InitByIndex(device_index);
}

NvmlSampler::NvmlSampler(const std::string& pci_bus_id) {
  if (pci_bus_id.empty()) {
    InitByIndex(-1);
  } else {
    InitByBusId(pci_bus_id);
  }
}

void NvmlSampler::InitByIndex(int device_index) {
  if (!Open()) return;
  unsigned int count = 0;
  if (api_->GetCount(&count) != kNvmlSuccess || count == 0) {
    status_ = "NVML unavailable: no GPU";
    return;
  }
  const int index = device_index >= 0 ? device_index : DefaultIndex();
  if (index >= static_cast<int>(count)) {
    status_ =
        "NVML unavailable: GPU index " + std::to_string(index) + " >= " + std::to_string(count) + " GPUs";
    return;
  }
  nvmlDevice_t dev = nullptr;
  nvmlReturn_t r = api_->GetHandleByIndex(static_cast<unsigned>(index), &dev);
  if (r != kNvmlSuccess) {
    status_ = std::string("NVML unavailable: ") + api_->ErrorString(r);
    return;
  }
  SetDevice(dev);
}

void NvmlSampler::InitByBusId(const std::string& pci_bus_id) {
  if (!Open()) return;
  nvmlDevice_t dev = nullptr;
  nvmlReturn_t r = api_->GetHandleByPciBusId ? api_->GetHandleByPciBusId(pci_bus_id.c_str(), &dev) : -1;
  if (r != kNvmlSuccess) {
    status_ =
        "NVML unavailable: no GPU at PCI bus id " + pci_bus_id +
        (api_->GetHandleByPciBusId ? std::string(": ") + api_->ErrorString(r) : std::string(" (old NVML)"));
    return;
  }
  SetDevice(dev);
}

NvmlSampler::~NvmlSampler() {
  if (api_ && api_->Init && api_->Shutdown) api_->Shutdown();
  delete api_;
  if (lib_) dlclose(lib_);
}

GpuSample NvmlSampler::Sample() const {
  GpuSample s;
  if (!device_) return s;
  nvmlUtilization_t util{};
  nvmlMemory_t mem{};
  unsigned int mw = 0;
  if (api_->GetUtilization(device_, &util) != kNvmlSuccess) return s;
  if (api_->GetMemoryInfo(device_, &mem) != kNvmlSuccess) return s;
  if (api_->GetPowerUsage(device_, &mw) != kNvmlSuccess) return s;
  s.util_pct = util.gpu;
  s.mem_used_gb = mem.used / 1e9;
  s.mem_total_gb = mem.total / 1e9;
  s.power_w = mw / 1000.0;
  unsigned long long mj = 0;
  if (api_->GetTotalEnergy && api_->GetTotalEnergy(device_, &mj) == kNvmlSuccess) {
    s.has_energy = true;
    s.energy_j = mj / 1000.0;
  }
  s.ok = true;
  return s;
}

void GpuStepMeter::StepBegin() {
  begin_ = sampler_ ? sampler_->Sample() : GpuSample{};
}

GpuStepMetrics GpuStepMeter::StepEnd(double tokens, double seconds) {
  GpuStepMetrics m;
  GpuSample end = sampler_ ? sampler_->Sample() : GpuSample{};
  if (!end.ok) return m;
  m.ok = true;
  m.util_pct = end.util_pct;
  m.mem_used_gb = end.mem_used_gb;
  m.power_w = end.power_w;
  if (begin_.ok && begin_.has_energy && end.has_energy && end.energy_j >= begin_.energy_j) {
    m.joules = end.energy_j - begin_.energy_j;
  } else {
    const double mean_w = begin_.ok ? 0.5 * (begin_.power_w + end.power_w) : end.power_w;
    m.joules = mean_w * seconds;
  }
  m.joules_per_token = tokens > 0 ? m.joules / tokens : 0;
  return m;
}

}  // namespace tern
