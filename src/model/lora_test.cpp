// LoRA (model/lora.h): the model against PEFT-style adapters in PyTorch (tests/golden/make_golden_lora.py),
// the merged export, the frozen base, recomputation, the gradient announcements and the memory model.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "backend/registry.h"
#include "model/gpt.h"
#include "model/lora.h"
#include "testing/golden.h"
#include "testing/lora_golden.h"

namespace tern {
namespace {

using testing::RelMaxError;

TEST(LoraGolden, ReferenceBackendFp32) {
  auto backend = MakeCpuReferenceBackend();
  testing::CheckAgainstLoraGolden(backend.get(), Compute::kF32, {1e-5, 1e-4, 1e-4, 1e-4});
}

TEST(LoraGolden, FastBackendFp32) {
  auto backend = MakeCpuFastBackend();
  testing::CheckAgainstLoraGolden(backend.get(), Compute::kF32, {1e-5, 1e-4, 1e-4, 1e-4});
}

// bf16 operands: the bounds of the plain golden test (gpt_golden_test.cpp); the adapters after ten AdamW
// steps within 8% of their tensor's largest element (Adam's normalised steps turn the small gradients'
// rounding into whole steps of lr; 3.2% measured on an AVX2 CPU).
TEST(LoraGolden, FastBackendBf16) {
  auto backend = MakeCpuFastBackend();
  testing::CheckAgainstLoraGolden(backend.get(), Compute::kBF16, {2e-2, 6e-2, 2e-2, 8e-2});
}

constexpr int kB = 3, kT = 7;
const GptConfig kLoraCfg{2, 2, 18, 41, 9};

std::vector<int32_t> Ids(int salt, int V) {
  std::vector<int32_t> v(kB * kT);
  for (size_t i = 0; i < v.size(); i++) v[i] = static_cast<int32_t>((i * 7 + salt * 13 + 3) % V);
  return v;
}

// A model that has trained its adapters a few steps (non-zero B), fp32 or bf16.
void TrainAdapters(Gpt* m, int steps) {
  const auto x = Ids(1, kLoraCfg.vocab_size), y = Ids(2, kLoraCfg.vocab_size);
  for (int s = 1; s <= steps; s++) {
    m->ZeroGrad();
    m->Forward(x.data(), y.data(), kB, kT, 1.0f / (kB * kT));
    m->Backward();
    m->AdamWStep(1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, s);
  }
}

// Step 0 is the base model bit for bit (B starts at zero), and after training, the exported merged weights
// in a plain model give the adapted model's logits bit for bit: what serve, generate and eval read is what
// was trained. The device merge agrees with the host's (double) to rounding.
TEST(Lora, StartsAsTheBaseAndExportsWhatItComputes) {
  for (Compute compute : {Compute::kF32, Compute::kBF16}) {
    SCOPED_TRACE(ComputeName(compute));
    auto backend = MakeCpuFastBackend();
    LoraSpec spec{4, 8.0f, kLoraAllTargets};
    Gpt adapted(backend.get(), kLoraCfg, kB, kT, compute, Recompute::kNone, kDefaultLogitsChunk, spec);
    Gpt plain(backend.get(), kLoraCfg, kB, kT, compute);
    adapted.InitWeights(5);
    plain.InitWeights(5);
    const auto x = Ids(3, kLoraCfg.vocab_size);
    std::vector<float> a(kLoraCfg.vocab_size), p(kLoraCfg.vocab_size);
    auto same_logits = [&](const char* when) {
      adapted.Forward(x.data(), nullptr, kB, kT);
      plain.Forward(x.data(), nullptr, kB, kT);
      for (int b = 0; b < kB; b++)
        for (int t = 0; t < kT; t++) {
          adapted.GetLogits(b, t, a.data());
          plain.GetLogits(b, t, p.data());
          ASSERT_EQ(0, std::memcmp(a.data(), p.data(), a.size() * sizeof(float)))
              << when << " b" << b << " t" << t;
        }
    };
    same_logits("at step 0");
    TrainAdapters(&adapted, 4);
    const std::vector<float> exported = adapted.ExportParameters();
    ASSERT_EQ(exported.size(), GptParamCount(kLoraCfg));
    const std::vector<float> host = MergeLoraOnHost(kLoraCfg, spec, adapted.GetParameters());
    EXPECT_LT(RelMaxError(exported.data(), host.data(), host.size()), 1e-6);
    EXPECT_NE(0, std::memcmp(exported.data(), plain.GetParameters().data(), exported.size() * 4))
        << "the adapters changed nothing";
    plain.SetParameters(exported);
    same_logits("after 4 steps");
  }
}

// Gradient announcements (data parallel's buckets) cover the adapters' gradients exactly once; nothing is
// announced for the frozen weights.
TEST(Lora, AnnouncesEachAdapterGradientOnce) {
  auto backend = MakeCpuReferenceBackend();
  LoraSpec spec{2, 4.0f, kLoraQkv | kLoraFcproj};
  Gpt m(backend.get(), kLoraCfg, kB, kT, Compute::kF32, Recompute::kNone, kDefaultLogitsChunk, spec);
  m.InitWeights(1);
  std::vector<int> seen(m.trainable().count, 0);
  const auto x = Ids(1, kLoraCfg.vocab_size), y = Ids(2, kLoraCfg.vocab_size);
  m.ZeroGrad();
  m.Forward(x.data(), y.data(), kB, kT, 1.0f);
  m.Backward([&](std::span<const GradRange> ranges) {
    for (const GradRange& r : ranges) {
      ASSERT_LE(r.offset + r.count, seen.size());
      for (size_t i = 0; i < r.count; i++) seen[r.offset + i]++;
    }
  });
  for (size_t i = 0; i < seen.size(); i++) ASSERT_EQ(seen[i], 1) << "gradient " << i;
  EXPECT_EQ(m.trainable().count, LoraParamCount(kLoraCfg, spec));
}

// Recomputation (GELU, whole blocks) gives the adapters' gradients bit for bit, as without LoRA.
TEST(Lora, RecomputeGivesTheSameGradients) {
  auto backend = MakeCpuFastBackend();
  LoraSpec spec{3, 6.0f, kLoraAllTargets};
  std::vector<std::vector<float>> grads;
  for (Recompute r : {Recompute::kNone, Recompute::kGelu, Recompute::kBlocks}) {
    Gpt m(backend.get(), kLoraCfg, kB, kT, Compute::kBF16, r, kDefaultLogitsChunk, spec);
    m.InitWeights(9);
    TrainAdapters(&m, 2);
    const auto x = Ids(4, kLoraCfg.vocab_size), y = Ids(5, kLoraCfg.vocab_size);
    m.ZeroGrad();
    m.Forward(x.data(), y.data(), kB, kT, 1.0f);
    m.Backward();
    grads.push_back(m.GetGradients());
  }
  EXPECT_EQ(grads[0], grads[1]) << "recompute gelu";
  EXPECT_EQ(grads[0], grads[2]) << "recompute blocks";
}

// What the model allocates with LoRA is Allocation() and the planner's model (GptMemoryEstimate + WithLora):
// the gradients and moments are the adapters' only.
TEST(Lora, MemoryIsWhatThePlannerCounts) {
  auto backend = MakeCpuReferenceBackend();
  for (Compute compute : {Compute::kF32, Compute::kBF16})
    for (Recompute r : {Recompute::kNone, Recompute::kBlocks})
      for (uint8_t targets : {uint8_t{kLoraAllTargets}, uint8_t{kLoraQkv}}) {
        const LoraSpec spec{5, 10.0f, targets};
        Gpt m(backend.get(), kLoraCfg, kB, kT, compute, r, 16, spec);
        const GptMemory got = m.memory();
        const GptMemory alloc =
            Gpt::Allocation(kLoraCfg, kB, kT, compute, r, AttentionKind::kNaive, 16, spec);
        const GptMemory est = WithLora(
            GptMemoryEstimate(kLoraCfg, kB, kT, compute == Compute::kBF16, r, AttentionKind::kNaive, 16),
            kLoraCfg, spec, compute == Compute::kBF16, kB * kT);
        for (const GptMemory& want : {alloc, est}) {
          EXPECT_EQ(got.params, want.params);
          EXPECT_EQ(got.params_bf16, want.params_bf16);
          EXPECT_EQ(got.grads, want.grads);
          EXPECT_EQ(got.adam_state, want.adam_state);
          EXPECT_EQ(got.activations, want.activations);
          EXPECT_EQ(got.scratch, want.scratch);
        }
        EXPECT_EQ(got.grads, LoraParamCount(kLoraCfg, spec) * 4);
      }
}

// FLOPs per token: full training's without LoRA; with it, 4 (12LC^2 + CV) + 12LTC plus 4 r (in + out) per
// adapted matrix and layer, by hand for GPT-2 124M at T = 1024, r = 16, every matrix (16 r C per layer).
TEST(LoraSpec, FlopsPerTokenByHand) {
  const GptConfig gpt2{12, 12, 768, 50257, 1024};
  EXPECT_EQ(LoraFlopsPerToken(gpt2, LoraSpec{}, 1024), GptFlopsPerToken(gpt2, 1024));
  const double L = 12, C = 768, V = 50257, T = 1024, r = 16;
  const double want = 4 * (12 * L * C * C + C * V) + 12 * L * T * C + L * 4 * r * 16 * C;
  EXPECT_DOUBLE_EQ(LoraFlopsPerToken(gpt2, LoraSpec{16, 32.0f, kLoraAllTargets}, 1024), want);
  EXPECT_NEAR(want / GptFlopsPerToken(gpt2, 1024), 0.722, 0.001);  // 28% fewer than full training
}

TEST(LoraSpec, ParsesAndRefusesWithTheFix) {
  auto bits = [](const std::string& s) {
    const Result<uint8_t> r = ParseLoraTargets(s);
    return r.ok() ? static_cast<int>(r.value()) : -1;
  };
  EXPECT_EQ(bits("qkv,fcproj"), kLoraQkv | kLoraFcproj);
  EXPECT_EQ(bits(" fc , attproj "), kLoraFc | kLoraAttproj);
  EXPECT_EQ(bits("all"), kLoraAllTargets);
  EXPECT_EQ(LoraTargetNames(kLoraAllTargets), "qkv,attproj,fc,fcproj");
  const Result<uint8_t> bad = ParseLoraTargets("qkv,c_attn");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'c_attn'"), std::string::npos);
  EXPECT_NE(bad.status().message().find("qkv, attproj, fc, fcproj"), std::string::npos);
  EXPECT_FALSE(ParseLoraTargets(",").ok());
  EXPECT_TRUE((LoraSpec{8, 16.0f, kLoraAllTargets}.Validate(kLoraCfg).ok()));
  EXPECT_TRUE(LoraSpec{}.Validate(kLoraCfg).ok());  // off
  EXPECT_FALSE((LoraSpec{-1, 16.0f, kLoraAllTargets}.Validate(kLoraCfg).ok()));
  EXPECT_FALSE((LoraSpec{8, 0.0f, kLoraAllTargets}.Validate(kLoraCfg).ok()));
  const Status wide = LoraSpec{19, 16.0f, kLoraAllTargets}.Validate(kLoraCfg);
  EXPECT_NE(wide.message().find("n_embd 18"), std::string::npos) << wide.ToString();
  EXPECT_EQ((LoraSpec{8, 16.0f, kLoraQkv | kLoraFc}.ToString()), "r8 alpha16 qkv,fc");
  // Layout: A [L, r, in] then B [L, out, r] per adapted matrix, after the base.
  const auto layout = LoraParamLayout(kLoraCfg, LoraSpec{2, 4.0f, kLoraFcproj}, 100);
  ASSERT_EQ(layout.size(), 2u);
  EXPECT_EQ(layout[0].name, "lora_a.fcprojw");
  EXPECT_EQ(layout[0].shape, (std::vector<int64_t>{2, 2, 72}));
  EXPECT_EQ(layout[0].offset, 100u);
  EXPECT_EQ(layout[1].shape, (std::vector<int64_t>{2, 18, 2}));
  EXPECT_EQ(layout[1].offset, 100u + 2 * 2 * 72);
}

}  // namespace
}  // namespace tern
