// What data parallel needs from the model: Backward announces every gradient exactly once and only once it is
// final (so an all-reduce may start on it), and a ZeRO-1 optimizer shard updates exactly its part of the
// weights, as the whole update would (bf16 copy included).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "model/gpt.h"

namespace tern {
namespace {

const GptConfig kCfg{3, 2, 16, 50, 16};  // 3 layers, 2 heads, C 16, vocab 50, block 16

void Batch(std::vector<int32_t>* in, std::vector<int32_t>* tg, int n, int seed) {
  in->resize(n);
  tg->resize(n);
  for (int i = 0; i < n; i++) {
    (*in)[i] = (i * 7 + seed) % kCfg.vocab_size;
    (*tg)[i] = (i * 11 + 3 * seed) % kCfg.vocab_size;
  }
}

TEST(GptDistHooks, BackwardAnnouncesEveryGradientOnceWhenItIsFinal) {
  auto be = MakeCpuFastBackend();
  const int B = 2, T = 8;
  Gpt model(be.get(), kCfg, B, T, Compute::kF32);
  model.InitWeights(5);
  std::vector<int32_t> in, tg;
  Batch(&in, &tg, B * T, 1);
  model.ZeroGrad();
  model.Forward(in.data(), tg.data(), B, T, 1.0f / (B * T));
  std::vector<std::pair<GradRange, std::vector<float>>> seen;  // each range and its values when announced
  int calls = 0;
  model.Backward([&](std::span<const GradRange> ranges) {
    calls++;
    const std::vector<float> now = model.GetGradients();
    for (const GradRange& r : ranges)
      seen.push_back({r, std::vector<float>(now.begin() + r.offset, now.begin() + r.offset + r.count)});
  });
  EXPECT_EQ(calls, kCfg.n_layer + 2) << "the head, each layer, the embeddings";
  const std::vector<float> final_grads = model.GetGradients();
  std::vector<int> covered(model.num_params(), 0);
  for (const auto& [r, values] : seen) {
    for (size_t i = 0; i < r.count; i++) covered[r.offset + i]++;
    EXPECT_TRUE(std::equal(values.begin(), values.end(), final_grads.begin() + r.offset))
        << "range at " << r.offset << " changed after it was announced";
  }
  EXPECT_TRUE(std::all_of(covered.begin(), covered.end(), [](int c) { return c == 1; }))
      << "every gradient exactly once";
  // Without a callback the gradients are the same (the hook observes, never changes).
  Gpt again(be.get(), kCfg, B, T, Compute::kF32);
  again.InitWeights(5);
  again.ZeroGrad();
  again.Forward(in.data(), tg.data(), B, T, 1.0f / (B * T));
  again.Backward();
  EXPECT_EQ(again.GetGradients(), final_grads);
}

TEST(GptDistHooks, AnOptimizerShardUpdatesExactlyItsPart) {
  for (Compute compute : {Compute::kF32, Compute::kBF16}) {
    auto be = MakeCpuFastBackend();
    const int B = 2, T = 8;
    Gpt whole(be.get(), kCfg, B, T, compute), part(be.get(), kCfg, B, T, compute);
    const size_t n = whole.num_params();
    const GradRange shard{n / 3 + 5, n / 3};  // starts and ends inside tensors
    part.SetOptimizerShard(shard);
    EXPECT_EQ(part.optimizer_shard().count, shard.count);
    EXPECT_EQ(part.memory().adam_state, 2 * shard.count * sizeof(float));
    std::vector<int32_t> in, tg;
    for (Gpt* m : {&whole, &part}) {
      m->InitWeights(9);
      for (int step = 1; step <= 2; step++) {
        Batch(&in, &tg, B * T, step);
        m->ZeroGrad();
        m->Forward(in.data(), tg.data(), B, T, 1.0f / (B * T));
        m->Backward();
        m->AdamWStep(1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, step);
      }
    }
    const std::vector<float> init = [&] {
      Gpt fresh(be.get(), kCfg, B, T, compute);
      fresh.InitWeights(9);
      return fresh.GetParameters();
    }();
    const std::vector<float> p = part.GetParameters();
    size_t changed_outside = 0;
    for (size_t i = 0; i < n; i++) {
      const bool inside = i >= shard.offset && i < shard.offset + shard.count;
      if (!inside && p[i] != init[i]) changed_outside++;
    }
    EXPECT_EQ(changed_outside, 0u) << "a shard leaves the other weights alone";
    EXPECT_EQ(part.GetAdamState().size(), 2 * shard.count);
    EXPECT_NE(whole.GetParameters(), init) << "the whole model did train";
  }
}

// One step: the shard's update equals the whole update's on the same range (moments and weights).
TEST(GptDistHooks, AShardStepEqualsTheWholeStepOnItsRange) {
  auto be = MakeCpuFastBackend();
  const int B = 2, T = 8;
  Gpt whole(be.get(), kCfg, B, T, Compute::kBF16), part(be.get(), kCfg, B, T, Compute::kBF16);
  const size_t n = whole.num_params();
  const GradRange shard{n / 2 - 7, n / 2};
  part.SetOptimizerShard(shard);
  std::vector<int32_t> in, tg;
  Batch(&in, &tg, B * T, 3);
  for (Gpt* m : {&whole, &part}) {
    m->InitWeights(4);
    m->ZeroGrad();
    m->Forward(in.data(), tg.data(), B, T, 1.0f / (B * T));
    m->Backward();
    m->AdamWStep(1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 1);
  }
  const std::vector<float> w = whole.GetParameters(), p = part.GetParameters();
  const std::vector<float> mw = whole.GetAdamState(), mp = part.GetAdamState();
  for (size_t i = 0; i < shard.count; i++) {
    ASSERT_EQ(w[shard.offset + i], p[shard.offset + i]) << i;
    ASSERT_EQ(mw[shard.offset + i], mp[i]) << "m " << i;
    ASSERT_EQ(mw[n + shard.offset + i], mp[shard.count + i]) << "v " << i;
  }
}

}  // namespace
}  // namespace tern
