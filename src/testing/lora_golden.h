// Test-only: tests/golden/gpt_tiny_lora.bin (written by tests/golden/make_golden_lora.py: PEFT-style adapters
// on make_golden.py's PyTorch GPT-2) and the check every backend's LoRA golden test runs (model/lora_test.cpp
// on both CPU paths, backend/cuda/cuda_golden_test.cpp on a GPU).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "model/lora.h"
#include "testing/golden.h"

namespace tern::testing {

struct LoraGolden {
  GptConfig cfg;
  LoraSpec spec;
  int B = 0, T = 0, steps = 0;
  float lr = 0, beta1 = 0, beta2 = 0, eps = 0, wd = 0, loss = 0;
  std::vector<float> base, lora, grads, losses, lora_final;
  std::vector<int32_t> inputs, targets;
};

inline LoraGolden ReadLoraGolden() {
  const char* dir = std::getenv("TERN_SOURCE_DIR");
  const std::string path = std::string(dir ? dir : TERN_TEST_SOURCE_DIR) + "/tests/golden/gpt_tiny_lora.bin";
  std::ifstream in(path, std::ios::binary);
  LoraGolden g;
  int32_t h[11] = {};
  float f[6] = {};
  in.read(reinterpret_cast<char*>(h), sizeof h);
  in.read(reinterpret_cast<char*>(f), sizeof f);
  EXPECT_TRUE(in && h[0] == 0x746c7261 && h[1] == 1)
      << path << " (tests/golden/make_golden_lora.py writes it)";
  g.cfg = {h[2], h[3], h[4], h[5], h[6]};
  g.B = h[7], g.T = h[8], g.steps = h[9];
  g.spec.rank = h[10];
  g.spec.alpha = f[0];
  g.lr = f[1], g.beta1 = f[2], g.beta2 = f[3], g.eps = f[4], g.wd = f[5];
  const size_t P = GptParamCount(g.cfg), A = LoraParamCount(g.cfg, g.spec),
               N = static_cast<size_t>(g.B) * g.T;
  auto read = [&](auto& v, size_t n) {
    v.resize(n);
    in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(v[0])));
  };
  read(g.base, P);
  read(g.lora, A);
  read(g.inputs, N);
  read(g.targets, N);
  in.read(reinterpret_cast<char*>(&g.loss), 4);
  read(g.grads, A);
  read(g.losses, g.steps);
  read(g.lora_final, A);
  EXPECT_TRUE(in && in.peek() == EOF) << path << ": not the size its header implies";
  return g;
}

inline std::vector<float> Joined(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

struct LoraBounds {
  double loss, grads, step_loss, weights;
};

// The loss and every adapter gradient of one batch, ten AdamW steps' losses, the adapters after them, and the
// frozen base bit for bit.
inline void CheckAgainstLoraGolden(Backend* backend, Compute compute, LoraBounds bounds) {
  const LoraGolden g = ReadLoraGolden();
  ASSERT_FALSE(::testing::Test::HasFailure());
  Gpt model(backend, g.cfg, g.B, g.T, compute, Recompute::kNone, kDefaultLogitsChunk, g.spec);
  ASSERT_EQ(model.trainable().offset, g.base.size());
  ASSERT_EQ(model.trainable().count, g.lora.size());
  model.SetParameters(Joined(g.base, g.lora));
  const size_t N = static_cast<size_t>(g.B) * g.T;
  model.ZeroGrad();
  const float loss = model.Forward(g.inputs.data(), g.targets.data(), g.B, g.T, 1.0f / N);
  EXPECT_NEAR(loss, g.loss, bounds.loss);
  model.Backward();
  const std::vector<float> grads = model.GetGradients();
  for (const auto& t : model.layout()) {
    if (t.offset < model.trainable().offset) continue;
    const size_t at = t.offset - model.trainable().offset;
    EXPECT_LT(RelMaxError(grads.data() + at, g.grads.data() + at, t.numel), bounds.grads)
        << "gradient of " << t.name;
  }
  for (int step = 1; step <= g.steps; step++) {
    model.ZeroGrad();
    const float l = model.Forward(g.inputs.data(), g.targets.data(), g.B, g.T, 1.0f / N);
    EXPECT_NEAR(l, g.losses[step - 1], bounds.step_loss * std::max(1.0f, g.losses[step - 1]))
        << "step " << step;
    model.Backward();
    model.AdamWStep(g.lr, g.beta1, g.beta2, g.eps, g.wd, 1.0f, step);
  }
  const std::vector<float> after = model.GetParameters();
  EXPECT_EQ(0, std::memcmp(after.data(), g.base.data(), g.base.size() * sizeof(float)))
      << "a frozen weight moved";
  EXPECT_LT(RelMaxError(after.data() + g.base.size(), g.lora_final.data(), g.lora_final.size()),
            bounds.weights);
}

}  // namespace tern::testing
