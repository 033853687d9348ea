// Dynamic loss scaling: an injected overflow skips the step and halves the scale; N good steps double it.
// The overflow is detected through a backend's SumSquares on a gradient buffer, as a trainer would.
#include "backend/loss_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "backend/backend.h"

namespace tern {
namespace {

TEST(LossScaler, OverflowSkipsTheStepAndHalvesTheScale) {
  LossScaler::Options o;
  o.initial_scale = 1024;
  o.growth_interval = 3;
  LossScaler s(o);
  auto backend = MakeCpuReferenceBackend();
  std::vector<float> grads(100, 0.5f);
  grads[17] = std::numeric_limits<float>::infinity();  // the injected overflow
  DeviceBuffer g(backend.get(), grads.size() * sizeof(float));
  backend->Upload(g.data(), grads.data(), grads.size() * sizeof(float));
  double norm = std::sqrt(backend->SumSquares(g.as<float>(), grads.size()));
  LossScaler::Decision d = s.Update(norm);
  EXPECT_FALSE(d.apply);
  EXPECT_EQ(d.scale_used, 1024);
  EXPECT_EQ(s.scale(), 512);
  EXPECT_EQ(s.state().skipped_steps, 1);
  EXPECT_EQ(s.state().good_steps, 0);

  grads[17] = std::numeric_limits<float>::quiet_NaN();  // NaN overflows too
  backend->Upload(g.data(), grads.data(), grads.size() * sizeof(float));
  EXPECT_FALSE(s.Update(std::sqrt(backend->SumSquares(g.as<float>(), grads.size()))).apply);
  EXPECT_EQ(s.scale(), 256);
}

TEST(LossScaler, GoodStepsDoubleTheScaleAndUnscaleIsExact) {
  LossScaler::Options o;
  o.initial_scale = 256;
  o.growth_interval = 3;
  LossScaler s(o);
  for (int i = 0; i < 2; i++) {
    LossScaler::Decision d = s.Update(512.0);
    EXPECT_TRUE(d.apply);
    EXPECT_DOUBLE_EQ(d.grad_norm, 2.0);
    EXPECT_FLOAT_EQ(d.unscale, 1.0f / 256);
    EXPECT_EQ(s.scale(), 256);
  }
  EXPECT_TRUE(s.Update(512.0).apply);
  EXPECT_EQ(s.scale(), 512);  // third good step in a row
  EXPECT_EQ(s.state().good_steps, 0);
  // An overflow resets the run of good steps.
  s.Update(512.0);
  s.Update(std::numeric_limits<double>::infinity());
  EXPECT_EQ(s.scale(), 256);
  s.Update(1.0);
  s.Update(1.0);
  EXPECT_EQ(s.scale(), 256);
  s.Update(1.0);
  EXPECT_EQ(s.scale(), 512);
}

TEST(LossScaler, BoundsAndStateRoundTrip) {
  LossScaler::Options o;
  o.initial_scale = 2;
  o.min_scale = 1;
  o.max_scale = 4;
  o.growth_interval = 1;
  LossScaler s(o);
  s.Update(NAN);
  s.Update(NAN);
  EXPECT_EQ(s.scale(), 1);  // not below min_scale
  for (int i = 0; i < 5; i++) s.Update(1.0);
  EXPECT_EQ(s.scale(), 4);  // not above max_scale

  LossScaler restored(o);
  restored.set_state(s.state());  // the scale is part of the checkpointed training state
  EXPECT_EQ(restored.scale(), 4);
  EXPECT_EQ(restored.state().skipped_steps, 2);
}

}  // namespace
}  // namespace tern
