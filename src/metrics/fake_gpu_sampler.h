// A scripted GpuSampler for tests (header-only): the n-th reading (0-based) has energy_j = n *
// joules_per_call and otherwise the fixed values below, so a test knows exactly what each step's fields must
// be.
#pragma once

#include <mutex>
#include <string>

#include "metrics/nvml_sampler.h"

namespace tern::testing {

class FakeGpuSampler : public GpuSampler {
 public:
  struct Script {
    bool available = true;
    double util_pct = 87, mem_used_gb = 12.5, power_w = 300;
    bool has_energy = true;
    double joules_per_call = 50;
  };
  explicit FakeGpuSampler(Script s) : script_(s), status_(s.available ? "fake ok" : "fake unavailable") {}

  bool available() const override { return script_.available; }
  const std::string& status() const override { return status_; }
  GpuSample Sample() const override {
    std::lock_guard<std::mutex> lock(mu_);
    const long long n = calls_++;
    GpuSample s;
    if (!script_.available) return s;
    s.ok = true;
    s.util_pct = script_.util_pct;
    s.mem_used_gb = script_.mem_used_gb;
    s.mem_total_gb = 80;
    s.power_w = script_.power_w;
    s.has_energy = script_.has_energy;
    s.energy_j = script_.has_energy ? n * script_.joules_per_call : 0;
    return s;
  }
  long long calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 private:
  Script script_;
  std::string status_;
  mutable std::mutex mu_;
  mutable long long calls_ = 0;
};

}  // namespace tern::testing
