// fp16 mixed precision against the PyTorch golden values (tests/golden/gpt_tiny.bin, fp32): the same check
// as the bf16 golden test (src/model/gpt_golden_test.cpp), with the trainer's loss scaling in the loop. Runs
// on the reference backend (fp16 rounding in OperandAt) and on the fast backend through WithF16Emulation.
//
// Bounds: fp16 keeps 11 significant bits to bf16's 8, so the errors are several times below bf16's
// (logits and loss 2e-2, gradients 6e-2, 10-step losses 2e-2): logits 5e-3, loss 1e-3, gradients 6e-3,
// 10-step losses 2e-3 relative: about 4x what was measured on both backends (logits 1.3e-3, loss 5.5e-5,
// gradients 1.5e-3, 10-step losses 4.8e-4). The measured errors are printed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "backend/loss_scaler.h"
#include "model/gpt.h"
#include "testing/golden.h"

namespace tern {
namespace {

using testing::Golden;
using testing::ReadGolden;
using testing::RelMaxError;

void CheckFp16(Backend* backend) {
  Result<Golden> golden = ReadGolden();
  ASSERT_TRUE(golden.ok()) << golden.status().ToString();
  const Golden& g = *golden;
  Gpt model(backend, g.cfg, g.B, g.T, Compute::kF16);
  model.SetParameters(g.params);
  const int N = g.B * g.T;
  const float dloss = 1.0f / N;

  const float loss = model.Forward(g.inputs.data(), g.targets.data(), g.B, g.T, 0.0f);
  const double worst_logit = WorstLogitError(model, g);
  EXPECT_NEAR(loss, g.loss, 1e-3);
  EXPECT_LT(worst_logit, 5e-3);

  // Gradients of the scaled loss, unscaled on the host, against PyTorch's.
  LossScaler::Options o;
  o.initial_scale = 1024;  // no overflow on this model: every step must apply (a skip would shift the run)
  LossScaler scaler(o);
  model.ZeroGrad();
  model.Forward(g.inputs.data(), g.targets.data(), g.B, g.T, static_cast<float>(dloss * scaler.scale()));
  model.Backward();
  const std::vector<float> grads = model.GetGradients();
  double worst_grad = 0;
  for (const auto& t : model.layout()) {
    const double err =
        RelMaxError(grads.data() + t.offset, g.grads.data() + t.offset, t.numel, 1.0 / scaler.scale());
    worst_grad = std::max(worst_grad, err);
    EXPECT_LT(err, 6e-3) << "gradient of " << t.name;
  }

  // Ten steps as the trainer takes them: scaled loss, decision, unscale folded into AdamW's grad_scale.
  model.SetParameters(g.params);
  double worst_step = 0;
  for (int step = 1; step <= g.steps; step++) {
    model.ZeroGrad();
    const float l = model.Forward(g.inputs.data(), g.targets.data(), g.B, g.T,
                                  static_cast<float>(dloss * scaler.scale()));
    const double rel = std::fabs(l - g.losses[step - 1]) / std::max(1.0f, g.losses[step - 1]);
    worst_step = std::max(worst_step, rel);
    EXPECT_LT(rel, 2e-3) << "step " << step << ": " << l << " vs " << g.losses[step - 1];
    model.Backward();
    const LossScaler::Decision d = scaler.Update(model.GradNorm());
    ASSERT_TRUE(d.apply) << "step " << step << " overflowed at scale " << d.scale_used;
    model.AdamWStep(g.lr, g.beta1, g.beta2, g.eps, g.wd, d.unscale, step);
  }
  std::printf("[fp16 %s] loss |diff| %.2e, logits %.2e, worst gradient %.2e, worst 10-step loss %.2e\n",
              backend->name().c_str(), std::fabs(loss - g.loss), worst_logit, worst_grad, worst_step);
}

TEST(Fp16Golden, ReferenceBackend) {
  auto backend = MakeCpuReferenceBackend();
  CheckFp16(backend.get());
}

TEST(Fp16Golden, FastBackendEmulated) {
  auto backend = WithF16Emulation(MakeCpuFastBackend());
  CheckFp16(backend.get());
}

}  // namespace
}  // namespace tern
