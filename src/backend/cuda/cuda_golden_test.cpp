// The PyTorch golden test (tests/golden/gpt_tiny.bin, see src/model/gpt_golden_test.cpp) on the CUDA
// backend: logits, loss, every parameter gradient, and 10 AdamW steps. Also checks that a training step is
// bitwise reproducible on the GPU, and the same with train.recompute=gelu. Skipped with "skipped: no GPU"
// where no GPU is visible.
//
// Bounds (logits and gradients: max |got - want| / max |want| per tensor; loss: absolute; 10-step losses:
// relative):
//   fp32: logits 1e-4, loss 1e-4, gradients 1e-3, step losses 1e-3 (true fp32 GEMMs, other summation orders)
//   bf16: logits 3e-2, loss 3e-2, gradients 1e-1, step losses 3e-2 (as llm.c's CUDA bf16 test: the loss
//         within a few hundredths; attention GEMMs are bf16 here too, unlike the CPU bf16 path)
//   fp16: logits 1e-2, loss 1e-2, gradients 4e-2, step losses 1e-2 with a loss scale of 1024 (the trainer's
//         loss scaling; 3 more mantissa bits than bf16, attention GEMMs in fp16 too)
//   flash attention (train.attention=flash) in bf16: the bf16 bounds.
// The measured errors are printed, so a failing bound shows by how much.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "backend/cuda/cuda_api.h"
#include "model/gpt.h"
#include "testing/golden.h"
#include "testing/lora_golden.h"

namespace tern {
namespace {

using testing::Golden;
using testing::ReadGolden;
using testing::RelMaxError;

struct Bounds {
  double logits, loss, grads, step_loss;
};

// loss_scale multiplies the loss gradient (fp16's loss scaling) and is divided out again, as the trainer
// does.
void CheckAgainstGolden(Compute compute, Bounds bounds, float loss_scale = 1.0f,
                        const char* attention = "naive") {
  auto backend = MakeCudaBackend();
  ASSERT_TRUE(backend->SetAttentionKernel(attention)) << attention;
  Result<Golden> golden = ReadGolden();
  ASSERT_TRUE(golden.ok()) << golden.status().ToString();
  const Golden& g = *golden;
  Gpt model(backend.get(), g.cfg, g.B, g.T, compute);
  model.SetParameters(g.params);
  const size_t N = static_cast<size_t>(g.B) * g.T;
  const float dloss = 1.0f / N;
  std::printf("[%s] %s, attention %s\n", ComputeName(compute), backend->name().c_str(), attention);

  float loss = model.Forward(g.inputs.data(), g.targets.data(), g.B, g.T, 0.0f);
  EXPECT_NEAR(loss, g.loss, bounds.loss);
  const double worst_logit = WorstLogitError(model, g);
  EXPECT_LT(worst_logit, bounds.logits);
  std::printf("[%s] loss %.6f (golden %.6f, |diff| %.2e), logits rel-max error %.2e\n", ComputeName(compute),
              loss, g.loss, std::fabs(loss - g.loss), worst_logit);

  model.ZeroGrad();
  model.Forward(g.inputs.data(), g.targets.data(), g.B, g.T, dloss * loss_scale);
  model.Backward();
  std::vector<float> grads = model.GetGradients();
  for (float& x : grads) x /= loss_scale;
  double worst_grad = 0;
  for (const auto& t : model.layout()) {
    double err = RelMaxError(grads.data() + t.offset, g.grads.data() + t.offset, t.numel);
    worst_grad = std::max(worst_grad, err);
    EXPECT_LT(err, bounds.grads) << "gradient of " << t.name;
    std::printf("[%s]   grad %-9s rel-max error %.2e\n", ComputeName(compute), t.name.c_str(), err);
  }

  model.SetParameters(g.params);
  double worst_step = 0;
  for (int step = 1; step <= g.steps; step++) {
    model.ZeroGrad();
    float l = model.Forward(g.inputs.data(), g.targets.data(), g.B, g.T, dloss * loss_scale);
    const double rel = std::fabs(l - g.losses[step - 1]) / std::max(1.0f, g.losses[step - 1]);
    worst_step = std::max(worst_step, rel);
    EXPECT_LT(rel, bounds.step_loss) << "step " << step << ": " << l << " vs " << g.losses[step - 1];
    model.Backward();
    model.AdamWStep(g.lr, g.beta1, g.beta2, g.eps, g.wd, 1.0f / loss_scale, step);
  }
  std::printf("[%s] worst gradient error %.2e, worst 10-step loss error %.2e\n", ComputeName(compute),
              worst_grad, worst_step);
}

class CudaGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CudaDevicePresent()) GTEST_SKIP() << "skipped: no GPU";
  }
};

TEST_F(CudaGolden, Fp32) {
  CheckAgainstGolden(Compute::kF32, {1e-4, 1e-4, 1e-3, 1e-3});
}

TEST_F(CudaGolden, Bf16) {
  CheckAgainstGolden(Compute::kBF16, {3e-2, 3e-2, 1e-1, 3e-2});
}

TEST_F(CudaGolden, Fp16LossScaled) {
  CheckAgainstGolden(Compute::kF16, {1e-2, 1e-2, 4e-2, 1e-2}, 1024.0f);
}

// The fused flash-attention kernels (attention_flash.cu) inside the whole model: not verified on a GPU yet.
TEST_F(CudaGolden, FlashAttentionFp32) {
  CheckAgainstGolden(Compute::kF32, {1e-4, 1e-4, 1e-3, 1e-3}, 1.0f, "flash");
}
TEST_F(CudaGolden, FlashAttentionBf16) {
  CheckAgainstGolden(Compute::kBF16, {3e-2, 3e-2, 1e-1, 3e-2}, 1.0f, "flash");
}

// LoRA adapters (train.lora) against the PEFT-style PyTorch golden file, the CPU test's bounds: not run on a
// GPU yet.
TEST_F(CudaGolden, LoraFp32) {
  auto backend = MakeCudaBackend();
  testing::CheckAgainstLoraGolden(backend.get(), Compute::kF32, {1e-4, 1e-3, 1e-3, 1e-3});
}
TEST_F(CudaGolden, LoraBf16) {
  auto backend = MakeCudaBackend();
  testing::CheckAgainstLoraGolden(backend.get(), Compute::kBF16, {3e-2, 1e-1, 3e-2, 1e-1});
}

// Two identical steps from the same state give bitwise identical gradients and parameters.
TEST_F(CudaGolden, TrainingStepIsBitwiseReproducible) {
  auto backend = MakeCudaBackend();
  Result<Golden> golden = ReadGolden();
  ASSERT_TRUE(golden.ok()) << golden.status().ToString();
  const Golden& g = *golden;
  for (Compute compute : {Compute::kF32, Compute::kBF16, Compute::kF16}) {
    Gpt model(backend.get(), g.cfg, g.B, g.T, compute);
    std::vector<float> grads[2], params[2];
    for (int run = 0; run < 2; run++) {
      model.SetParameters(g.params);
      model.SetAdamState(std::vector<float>(2 * model.num_params(), 0.0f));
      model.ZeroGrad();
      model.Forward(g.inputs.data(), g.targets.data(), g.B, g.T, 1.0f / (g.B * g.T));
      model.Backward();
      grads[run] = model.GetGradients();
      model.AdamWStep(g.lr, g.beta1, g.beta2, g.eps, g.wd, 1.0f / static_cast<float>(model.GradNorm() + 1),
                      1);
      params[run] = model.GetParameters();
    }
    EXPECT_EQ(grads[0], grads[1]) << ComputeName(compute);
    EXPECT_EQ(params[0], params[1]) << ComputeName(compute);
  }
}

// train.recompute=gelu (Recompute::kGelu) recomputes the GELU outputs in the backward with the forward's own
// kernel, and train.recompute=blocks (Recompute::kBlocks) re-runs each layer's forward (its ln1 from
// LayerNormForward on the stored residual, which must equal the fused residual + layer norm's output bit for
// bit): the same gradients and parameters bit for bit as keeping everything (model/gpt_recompute_test.cpp
// on the CPU).
TEST_F(CudaGolden, GeluAndBlockRecomputeAreBitwiseTheSame) {
  auto backend = MakeCudaBackend();
  Result<Golden> golden = ReadGolden();
  ASSERT_TRUE(golden.ok()) << golden.status().ToString();
  const Golden& g = *golden;
  for (Compute compute : {Compute::kF32, Compute::kBF16, Compute::kF16}) {
    std::vector<float> grads[3], params[3];
    for (Recompute r : {Recompute::kNone, Recompute::kGelu, Recompute::kBlocks}) {
      Gpt model(backend.get(), g.cfg, g.B, g.T, compute, r);
      const int i = static_cast<int>(r == Recompute::kGelu) + 2 * static_cast<int>(r == Recompute::kBlocks);
      model.SetParameters(g.params);
      for (int step = 1; step <= 2; step++) {
        model.ZeroGrad();
        model.Forward(g.inputs.data(), g.targets.data(), g.B, g.T, 1.0f / (g.B * g.T));
        model.Backward();
        grads[i] = model.GetGradients();
        model.AdamWStep(g.lr, g.beta1, g.beta2, g.eps, g.wd, 1.0f / static_cast<float>(model.GradNorm() + 1),
                        step);
      }
      params[i] = model.GetParameters();
    }
    for (int i : {1, 2}) {
      const char* mode = i == 1 ? "gelu" : "blocks";
      EXPECT_EQ(grads[0], grads[i]) << ComputeName(compute) << " recompute=" << mode;
      EXPECT_EQ(params[0], params[i]) << ComputeName(compute) << " recompute=" << mode;
    }
  }
}

}  // namespace
}  // namespace tern
