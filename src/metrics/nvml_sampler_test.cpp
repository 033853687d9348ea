// The NVML sampler: on a GPU machine it reads sane values; without NVML it reports "unavailable" cleanly.
#include "metrics/nvml_sampler.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

namespace tern {
namespace {

TEST(NvmlSampler, MissingLibraryIsUnavailable) {
  setenv("TERN_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
  NvmlSampler nvml;
  unsetenv("TERN_NVML_LIBRARY");
  EXPECT_FALSE(nvml.available());
  EXPECT_EQ(nvml.status().rfind("NVML unavailable", 0), 0u) << nvml.status();
  EXPECT_FALSE(nvml.Sample().ok);
  GpuStepMeter meter(&nvml);
  meter.StepBegin();
  EXPECT_FALSE(meter.StepEnd(1000, 0.1).ok);
}

TEST(NvmlSampler, ReadsSaneValuesOrReportsUnavailable) {
  NvmlSampler nvml;
  std::printf("%s\n", nvml.status().c_str());
  if (!nvml.available()) {
    EXPECT_EQ(nvml.status().rfind("NVML unavailable", 0), 0u) << nvml.status();
    EXPECT_FALSE(nvml.Sample().ok);
    return;
  }
  GpuSample s = nvml.Sample();
  ASSERT_TRUE(s.ok);
  EXPECT_GE(s.util_pct, 0);
  EXPECT_LE(s.util_pct, 100);
  EXPECT_GT(s.mem_total_gb, 1.0);
  EXPECT_GE(s.mem_used_gb, 0);
  EXPECT_LE(s.mem_used_gb, s.mem_total_gb);
  EXPECT_GE(s.power_w, 0);
  EXPECT_LT(s.power_w, 5000);
  GpuStepMeter meter(&nvml);
  meter.StepBegin();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  GpuStepMetrics m = meter.StepEnd(1000, 0.2);
  ASSERT_TRUE(m.ok);
  EXPECT_GE(m.joules, 0);
  EXPECT_GE(m.joules_per_token, 0);
  std::printf("util %.0f%%  mem %.2f/%.2f GB  power %.1f W  energy counter %s  %.3f J in 0.2 s\n", s.util_pct,
              s.mem_used_gb, s.mem_total_gb, s.power_w, s.has_energy ? "yes" : "no", m.joules);
}

}  // namespace
}  // namespace tern
