// The GPT against an independent PyTorch implementation (tests/golden/make_golden.py): logits, loss,
// every parameter gradient, and the losses of 10 AdamW steps, on both CPU backends.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "model/gpt.h"
#include "testing/golden.h"

namespace tern {
namespace {

using testing::Golden;
using testing::ReadGolden;
using testing::RelMaxError;

struct Bounds {
  double logits, loss, grads, step_loss;
};

void CheckAgainstGolden(Backend* backend, Compute compute, Bounds bounds) {
  Result<Golden> golden = ReadGolden();
  ASSERT_TRUE(golden.ok()) << golden.status().ToString();
  const Golden& g = *golden;
  Gpt model(backend, g.cfg, g.B, g.T, compute);
  model.SetParameters(g.params);
  const size_t N = static_cast<size_t>(g.B) * g.T;
  const float dloss = 1.0f / N;

  float loss = model.Forward(g.inputs.data(), g.targets.data(), g.B, g.T, 0.0f);
  EXPECT_NEAR(loss, g.loss, bounds.loss);
  const double worst_logit = WorstLogitError(model, g);
  EXPECT_LT(worst_logit, bounds.logits);

  model.ZeroGrad();
  model.Forward(g.inputs.data(), g.targets.data(), g.B, g.T, dloss);
  model.Backward();
  std::vector<float> grads = model.GetGradients();
  for (const auto& t : model.layout()) {
    double err = RelMaxError(grads.data() + t.offset, g.grads.data() + t.offset, t.numel);
    EXPECT_LT(err, bounds.grads) << "gradient of " << t.name;
  }

  // Ten AdamW steps on the same batch, as the script did.
  model.SetParameters(g.params);
  for (int step = 1; step <= g.steps; step++) {
    model.ZeroGrad();
    float l = model.Forward(g.inputs.data(), g.targets.data(), g.B, g.T, dloss);
    EXPECT_NEAR(l, g.losses[step - 1], bounds.step_loss * std::max(1.0f, g.losses[step - 1]))
        << "step " << step;
    model.Backward();
    model.AdamWStep(g.lr, g.beta1, g.beta2, g.eps, g.wd, 1.0f, step);
  }
}

TEST(GptGolden, ReferenceBackendFp32) {
  auto backend = MakeCpuReferenceBackend();
  CheckAgainstGolden(backend.get(), Compute::kF32, {1e-5, 1e-5, 1e-4, 1e-4});
}

TEST(GptGolden, FastBackendFp32) {
  auto backend = MakeCpuFastBackend();
  CheckAgainstGolden(backend.get(), Compute::kF32, {1e-5, 1e-5, 1e-4, 1e-4});
}

// bf16 operands round weights and activations to 8 bits of mantissa: logits and loss agree to about
// 1e-2, gradients to a few percent of their tensor's scale, and the 10-step trajectory to 2% (llm.c's
// CUDA bf16 test uses similar bounds).
TEST(GptGolden, FastBackendBf16) {
  auto backend = MakeCpuFastBackend();
  CheckAgainstGolden(backend.get(), Compute::kBF16, {2e-2, 2e-2, 6e-2, 2e-2});
}

TEST(GptGolden, ReferenceBackendBf16) {
  auto backend = MakeCpuReferenceBackend();
  CheckAgainstGolden(backend.get(), Compute::kBF16, {2e-2, 2e-2, 6e-2, 2e-2});
}

// A damaged golden file is an error that names it (ReadGolden), never a half-read Golden the checks go on
// with.
TEST(GoldenFile, ADamagedFileStopsTheTest) {
  const char* src = std::getenv("TERN_SOURCE_DIR");
  const std::string real = std::string(src ? src : TERN_TEST_SOURCE_DIR) + "/tests/golden/gpt_tiny.bin";
  std::ifstream in(real, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 1000u);
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("tern_golden_" + std::to_string(::getpid()));
  fs::create_directories(root / "tests/golden");
  ::setenv("TERN_SOURCE_DIR", root.c_str(), 1);
  for (const auto& [damage, want] : std::vector<std::pair<std::string, std::string>>{
           {bytes.substr(0, 1000), "1000 bytes, its header says"},
           {bytes + "x", "its header says"},
           {"XXXX" + bytes.substr(4), "magic"},
           {bytes.substr(0, 20), "shorter than a header"}}) {
    std::ofstream(root / "tests/golden/gpt_tiny.bin", std::ios::binary) << damage;
    Result<Golden> g = ReadGolden();
    ASSERT_FALSE(g.ok()) << want;
    EXPECT_NE(g.status().message().find(want), std::string::npos) << g.status().ToString();
    EXPECT_NE(g.status().message().find("make_golden.py"), std::string::npos) << g.status().ToString();
  }
  fs::remove_all(root);
  EXPECT_FALSE(ReadGolden().ok()) << "a missing file";
  if (src)
    ::setenv("TERN_SOURCE_DIR", src, 1);
  else
    ::unsetenv("TERN_SOURCE_DIR");
  EXPECT_TRUE(ReadGolden().ok()) << ReadGolden().status().ToString();
}

// k micro-batches with dloss = 1/(k*B*T) accumulate the same gradient as one batch k times larger.
TEST(GptGradAccumulation, MicroBatchesEqualOneBigBatch) {
  auto backend = MakeCpuReferenceBackend();
  GptConfig cfg{2, 2, 20, 31, 9};
  const int B = 4, T = 9, k = 2;
  Gpt model(backend.get(), cfg, B, T, Compute::kF32);
  model.InitWeights(7);
  std::vector<int32_t> x(B * T), y(B * T);
  for (int i = 0; i < B * T; i++) {
    x[i] = (i * 7 + 3) % cfg.vocab_size;
    y[i] = (i * 5 + 1) % cfg.vocab_size;
  }
  model.ZeroGrad();
  model.Forward(x.data(), y.data(), B, T, 1.0f / (B * T));
  model.Backward();
  std::vector<float> big = model.GetGradients();

  model.ZeroGrad();
  const int mb = B / k;
  for (int i = 0; i < k; i++) {
    model.Forward(x.data() + i * mb * T, y.data() + i * mb * T, mb, T, 1.0f / (k * mb * T));
    model.Backward();
  }
  std::vector<float> acc = model.GetGradients();
  EXPECT_LT(RelMaxError(acc.data(), big.data(), big.size()), 1e-5);
}

}  // namespace
}  // namespace tern
