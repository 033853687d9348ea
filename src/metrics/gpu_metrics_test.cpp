// The GPU step meter's arithmetic and the background sampler, with a scripted sampler (no GPU needed).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "metrics/fake_gpu_sampler.h"
#include "metrics/gpu_sampler_thread.h"
#include "metrics/nvml_sampler.h"

namespace tern {
namespace {

using testing::FakeGpuSampler;

TEST(GpuStepMeter, EnergyCounterDifferencePerToken) {
  FakeGpuSampler fake({});
  GpuStepMeter meter(&fake);
  meter.StepBegin();                             // reading 0: 0 J
  GpuStepMetrics m = meter.StepEnd(1000, 0.25);  // reading 1: 50 J
  ASSERT_TRUE(m.ok);
  EXPECT_DOUBLE_EQ(m.joules, 50);
  EXPECT_DOUBLE_EQ(m.joules_per_token, 0.05);
  EXPECT_DOUBLE_EQ(m.util_pct, 87);
  EXPECT_DOUBLE_EQ(m.mem_used_gb, 12.5);
  EXPECT_DOUBLE_EQ(m.power_w, 300);
}

TEST(GpuStepMeter, FallsBackToPowerTimesTime) {
  FakeGpuSampler::Script s;
  s.has_energy = false;
  s.power_w = 200;
  FakeGpuSampler fake(s);
  GpuStepMeter meter(&fake);
  meter.StepBegin();
  GpuStepMetrics m = meter.StepEnd(400, 0.5);
  ASSERT_TRUE(m.ok);
  EXPECT_DOUBLE_EQ(m.joules, 100);  // mean of 200 W and 200 W over 0.5 s
  EXPECT_DOUBLE_EQ(m.joules_per_token, 0.25);
}

TEST(GpuStepMeter, UnavailableGivesNothing) {
  FakeGpuSampler::Script s;
  s.available = false;
  FakeGpuSampler fake(s);
  GpuStepMeter meter(&fake);
  meter.StepBegin();
  EXPECT_FALSE(meter.StepEnd(100, 0.1).ok);
  GpuStepMeter none(nullptr);
  none.StepBegin();
  EXPECT_FALSE(none.StepEnd(100, 0.1).ok);
}

TEST(BackgroundGpuSampler, PollsOnItsOwnThreadAndAnswersAtOnce) {
  auto fake = std::make_unique<FakeGpuSampler>(FakeGpuSampler::Script{});
  FakeGpuSampler* raw = fake.get();
  BackgroundGpuSampler bg(std::move(fake), std::chrono::milliseconds(2));
  EXPECT_TRUE(bg.available());
  EXPECT_EQ(bg.status(), "fake ok");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (raw->calls() < 5 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_GE(raw->calls(), 5) << "the thread does not poll";
  const long long before = raw->calls();
  GpuSample a = bg.Sample();
  ASSERT_TRUE(a.ok);
  // The cached reading's counter (a multiple of 50 J) plus power x age: never below the cached value.
  EXPECT_GE(a.energy_j, 50.0 * (before - 2));
  EXPECT_DOUBLE_EQ(a.power_w, 300);
  // Sample() itself never queries the inner sampler (the step never waits on the driver)... except through
  // the thread: at most a few polls happen meanwhile, never one per Sample() call.
  for (int i = 0; i < 1000; i++) bg.Sample();
  EXPECT_LT(raw->calls() - before, 1000);
}

TEST(BackgroundGpuSampler, NoThreadWhenUnavailable) {
  FakeGpuSampler::Script s;
  s.available = false;
  BackgroundGpuSampler bg(std::make_unique<FakeGpuSampler>(s), std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(bg.polls(), 1);
  EXPECT_FALSE(bg.Sample().ok);
}

}  // namespace
}  // namespace tern
