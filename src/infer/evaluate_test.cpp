// tern eval's numbers against the training model's forward (model/gpt.h, itself checked against PyTorch in
// src/model/): the same windows give the same cross-entropy, and a prompt's log-probability is its tokens'
// loss times their count.
#include "infer/evaluate.h"

#include <gtest/gtest.h>

#include <cmath>

#include "backend/registry.h"
#include "data/shard.h"
#include "model/gpt.h"
#include "testing/test_run.h"

namespace tern {
namespace {

class EvaluateTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { run_ = testing::MakeTestRun().release(); }
  static void TearDownTestSuite() { delete run_; }

  // Writes `tokens` as DIR/val_<i>.bin, cut into shards of `per_shard` tokens.
  static std::vector<std::string> WriteShards(const std::vector<int32_t>& tokens, size_t per_shard,
                                              uint32_t vocab) {
    std::vector<std::string> paths;
    for (size_t at = 0, i = 0; at < tokens.size(); at += per_shard, i++) {
      paths.push_back(dir_.path() + "/val_00" + std::to_string(i) + ".bin");
      auto w = ShardWriter::Create(paths.back(), vocab);
      EXPECT_TRUE(w.ok());
      const size_t n = std::min(per_shard, tokens.size() - at);
      EXPECT_TRUE((*w)->Append(tokens.data() + at, n).ok());
      EXPECT_TRUE((*w)->Finish().ok());
    }
    return paths;
  }
  static std::vector<int32_t> CorpusTokens(size_t n) {
    std::vector<int32_t> t = run_->tok->Encode(testing::MakeCorpus(20 * 1000));
    t.resize(std::min(n, t.size()));
    return t;
  }
  // The training forward's mean loss over the windows a shard of `tokens` holds (inputs [i*T, i*T+T),
  // targets one later), the first `windows` of them.
  static double TrainingLoss(const std::vector<int32_t>& tokens, int T, int windows) {
    auto be = MakeCpuFastBackend();
    Gpt gpt(be.get(), run_->cfg, windows, T, Compute::kF32);
    gpt.SetParameters(run_->params);
    std::vector<int32_t> in, tg;
    for (int w = 0; w < windows; w++) {
      in.insert(in.end(), tokens.begin() + w * T, tokens.begin() + w * T + T);
      tg.insert(tg.end(), tokens.begin() + w * T + 1, tokens.begin() + w * T + T + 1);
    }
    return gpt.Forward(in.data(), tg.data(), windows, T);
  }

  static testing::TestRun* run_;
  static testing::TempDir dir_;
};
testing::TestRun* EvaluateTest::run_ = nullptr;
testing::TempDir EvaluateTest::dir_;

TEST_F(EvaluateTest, LossIsTheTrainingForwardsOnTheSameWindows) {
  auto be = MakeCpuFastBackend();
  const std::vector<int32_t> tokens = CorpusTokens(32 * 70 + 1);
  const auto shards = WriteShards(tokens, tokens.size(), run_->cfg.vocab_size);
  EvalOptions o;
  o.seq_len = 32;
  o.max_windows = 70;  // 2048 / 32 = 64 windows per forward: two forwards, the second partial
  auto r = EvaluateShards(be.get(), run_->cfg, run_->params, shards, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->windows, 70);
  EXPECT_EQ(r->tokens, 70 * 32);
  const double want = TrainingLoss(tokens, 32, 70);
  EXPECT_NEAR(r->loss, want, 1e-5 * want);
  EXPECT_NEAR(r->perplexity(), std::exp(want), 1e-4 * std::exp(want));
  EXPECT_GT(r->loss, 4.0) << "random weights over a 400-token vocabulary: about ln(400) = 6";

  // The full context, every window of the shard (the default), and int8 weights within 2% of fp32.
  o.seq_len = 0;
  o.max_windows = 0;
  auto full = EvaluateShards(be.get(), run_->cfg, run_->params, shards, o);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  const int T = run_->cfg.block_size, n = static_cast<int>((tokens.size() - 1) / T);
  EXPECT_EQ(full->windows, n);
  EXPECT_NEAR(full->loss, TrainingLoss(tokens, T, n), 1e-5 * full->loss);
  o.quantize = Quantize::kInt8;
  auto q = EvaluateShards(be.get(), run_->cfg, run_->params, shards, o);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_NE(q->loss, full->loss) << "the int8 weights were used";
  EXPECT_NEAR(q->loss, full->loss, 0.02 * full->loss);
}

TEST_F(EvaluateTest, WindowsNeverCrossShards) {
  auto be = MakeCpuFastBackend();
  const std::vector<int32_t> tokens = CorpusTokens(3 * 50);
  // Shards of 50 tokens hold one window of 33 each: 3 windows, not the 4 that 150 contiguous tokens hold.
  const auto shards = WriteShards(tokens, 50, run_->cfg.vocab_size);
  EvalOptions o;
  o.seq_len = 32;
  auto r = EvaluateShards(be.get(), run_->cfg, run_->params, shards, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->windows, 3);
  double want = 0;
  for (int s = 0; s < 3; s++)
    want += TrainingLoss({tokens.begin() + 50 * s, tokens.begin() + 50 * s + 33}, 32, 1) / 3;
  EXPECT_NEAR(r->loss, want, 1e-5 * want);
}

TEST_F(EvaluateTest, PromptLogprobIsItsTokensLoss) {
  auto be = MakeCpuFastBackend();
  const std::vector<std::string> prompts = {"In the beginning", "and the earth was without form"};
  auto s = ScorePrompts(be.get(), run_->cfg, run_->params, *run_->tok, prompts, Quantize::kNone);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->size(), 2u);
  for (size_t i = 0; i < prompts.size(); i++) {
    std::vector<int32_t> t{run_->tok->eos_id()};
    run_->tok->EncodeAppend(prompts[i], &t);
    const int P = static_cast<int>(t.size()) - 1;
    EXPECT_EQ((*s)[i].tokens, P);
    EXPECT_EQ((*s)[i].text, prompts[i]);
    const double want = -TrainingLoss(t, P, 1) * P;
    EXPECT_NEAR((*s)[i].logprob, want, 1e-5 * std::fabs(want));
    EXPECT_LT((*s)[i].mean(), 0);
  }
}

TEST_F(EvaluateTest, BadInputsAreErrorsThatSayWhy) {
  auto be = MakeCpuFastBackend();
  const auto shards = WriteShards(CorpusTokens(400), 400, run_->cfg.vocab_size);
  EvalOptions o;
  o.seq_len = run_->cfg.block_size + 1;
  auto r = EvaluateShards(be.get(), run_->cfg, run_->params, shards, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("context"), std::string::npos) << r.status().ToString();

  // Shards of a larger vocabulary come from another tokenizer.
  std::vector<std::string> other = {dir_.path() + "/other_000.bin"};
  auto w = ShardWriter::Create(other[0], run_->cfg.vocab_size + 100);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Append(CorpusTokens(400)).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  o.seq_len = 32;
  r = EvaluateShards(be.get(), run_->cfg, run_->params, other, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("another tokenizer"), std::string::npos) << r.status().ToString();

  auto s = ScorePrompts(be.get(), run_->cfg, run_->params, *run_->tok, {""}, Quantize::kNone);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("empty"), std::string::npos);
}

}  // namespace
}  // namespace tern
