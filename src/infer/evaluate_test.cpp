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

// The training forward's log-probability of tokens[from..] given what precedes them (one sequence).
double TrainingEndingLogprob(const testing::TestRun& run, const std::vector<int32_t>& tokens, int from) {
  auto be = MakeCpuFastBackend();
  const int n = static_cast<int>(tokens.size()) - 1;
  Gpt gpt(be.get(), run.cfg, 1, n, Compute::kF32);
  gpt.SetParameters(run.params);
  std::vector<int32_t> in(tokens.begin(), tokens.end() - 1), tg(tokens.begin() + 1, tokens.end());
  for (int p = 0; p + 1 < from; p++) tg[p] = -1;  // the context's own tokens are not scored
  return -static_cast<double>(gpt.Forward(in.data(), tg.data(), 1, n)) * n;  // the mean is over all B*T rows
}

// Each ending's score is its tokens' log-probability after the context (end-of-text first, a space between
// them), as the training forward computes it; the prediction is the best sum, acc_norm's the best per byte;
// all items in one forward give what each alone gives.
TEST_F(EvaluateTest, ChoiceScoresAreTheEndingsLogprobsAfterTheirContext) {
  auto be = MakeCpuFastBackend();
  const std::vector<ChoiceItem> items = {
      {"In the beginning God created", {"the heaven and the earth.", "waters", "darkness upon the face"}, 0},
      {"And the earth was ", {"without form", "void, and darkness"}, 1},
      {"", {"light", "firmament in the midst of the waters"}, 1},
  };
  auto r = ScoreChoices(be.get(), run_->cfg, run_->params, *run_->tok, items, Quantize::kNone);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->items, 3);
  EXPECT_EQ(r->truncated, 0);
  ASSERT_EQ(r->per_item.size(), 3u);
  int correct = 0, correct_norm = 0;
  for (size_t i = 0; i < items.size(); i++) {
    const ChoiceItemScore& sc = r->per_item[i];
    ASSERT_EQ(sc.logprob.size(), items[i].endings.size());
    int best = 0, best_norm = 0;
    for (size_t e = 0; e < items[i].endings.size(); e++) {
      std::vector<int32_t> t{run_->tok->eos_id()};
      run_->tok->EncodeAppend(items[i].context, &t);
      const int from = static_cast<int>(t.size());
      // A space joins a context and an ending unless one of them has it.
      const bool space = i == 0;
      run_->tok->EncodeAppend(space ? " " + items[i].endings[e] : items[i].endings[e], &t);
      EXPECT_EQ(sc.tokens[e], static_cast<int>(t.size()) - from);
      const double want = TrainingEndingLogprob(*run_, t, from);
      EXPECT_NEAR(sc.logprob[e], want, 1e-5 * std::fabs(want)) << "item " << i << " ending " << e;
      if (sc.logprob[e] > sc.logprob[best]) best = static_cast<int>(e);
      auto norm = [&](size_t k) { return sc.logprob[k] / items[i].endings[k].size(); };
      if (norm(e) > norm(best_norm)) best_norm = static_cast<int>(e);
    }
    EXPECT_EQ(sc.predicted, best);
    EXPECT_EQ(sc.predicted_norm, best_norm);
    correct += best == items[i].label;
    correct_norm += best_norm == items[i].label;
    // Alone, the same numbers.
    auto alone = ScoreChoices(be.get(), run_->cfg, run_->params, *run_->tok, {items[i]}, Quantize::kNone);
    ASSERT_TRUE(alone.ok()) << alone.status().ToString();
    for (size_t e = 0; e < items[i].endings.size(); e++)
      EXPECT_NEAR(alone->per_item[0].logprob[e], sc.logprob[e], 1e-9 * std::fabs(sc.logprob[e]));
  }
  EXPECT_EQ(r->correct, correct);
  EXPECT_EQ(r->correct_norm, correct_norm);
  EXPECT_DOUBLE_EQ(r->acc(), correct / 3.0);
  EXPECT_NEAR(r->StdErr(0.5), std::sqrt(0.25 / 2), 1e-12);
}

// Each item's context runs once (whole KV blocks) and its endings attend to it: the same log-probabilities,
// bit for bit, as running every ending with its whole context, in every weight format; contexts of 0 to 8
// blocks, one cut to fit the window (not shared), items spread over several groups of forwards.
TEST_F(EvaluateTest, SharedContextsScoreBitForBitAsWholeSequences) {
  auto be = MakeCpuFastBackend();
  std::vector<ChoiceItem> items;
  std::string ctx;
  for (int i = 0; i < 40; i++) {
    ctx += i % 3 ? "and the evening " : "and God saw the light ";
    if (run_->tok->Encode(ctx).size() > static_cast<size_t>(run_->cfg.block_size) + 8)
      ctx = "In the beginning";
    items.push_back(
        {ctx, {"that it was good.", "waters", "the firmament in the midst of the waters", "light"}, i % 4});
  }
  size_t longest = 0;
  for (const auto& it : items) longest = std::max(longest, run_->tok->Encode(it.context).size());
  ASSERT_GT(longest, static_cast<size_t>(run_->cfg.block_size)) << "one context is cut";
  for (Quantize q : {Quantize::kNone, Quantize::kBF16, Quantize::kInt8}) {
    auto shared = ScoreChoices(be.get(), run_->cfg, run_->params, *run_->tok, items, q);
    auto whole = ScoreChoices(be.get(), run_->cfg, run_->params, *run_->tok, items, q, nullptr, false);
    ASSERT_TRUE(shared.ok()) << shared.status().ToString();
    ASSERT_TRUE(whole.ok()) << whole.status().ToString();
    EXPECT_GT(shared->truncated, 0);
    EXPECT_EQ(shared->truncated, whole->truncated);
    EXPECT_EQ(shared->correct, whole->correct);
    EXPECT_EQ(shared->correct_norm, whole->correct_norm);
    for (size_t i = 0; i < items.size(); i++) {
      EXPECT_EQ(shared->per_item[i].tokens, whole->per_item[i].tokens);
      for (size_t e = 0; e < items[i].endings.size(); e++)
        EXPECT_EQ(shared->per_item[i].logprob[e], whole->per_item[i].logprob[e])
            << WeightsName(q) << " item " << i << " ending " << e;
    }
  }
}

// A context longer than the model's window loses its oldest tokens; the ending is scored after what is left.
TEST_F(EvaluateTest, ATooLongContextIsCutFromTheFront) {
  auto be = MakeCpuFastBackend();
  std::string ctx;
  while (run_->tok->Encode(ctx).size() < static_cast<size_t>(run_->cfg.block_size) * 2)
    ctx += "and the evening and the morning were the first day ";
  const std::vector<ChoiceItem> items = {{ctx, {"light", "seed of the fruit"}, 0}};
  auto r = ScoreChoices(be.get(), run_->cfg, run_->params, *run_->tok, items, Quantize::kNone);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->truncated, 1);
  EXPECT_TRUE(r->per_item[0].truncated);
  for (int e = 0; e < 2; e++) {
    std::vector<int32_t> t{run_->tok->eos_id()};
    run_->tok->EncodeAppend(ctx, &t);
    const std::vector<int32_t> end = run_->tok->Encode(items[0].endings[e]);
    const int keep = run_->cfg.block_size + 1 - static_cast<int>(end.size());
    std::vector<int32_t> seq(t.end() - keep, t.end());
    seq.insert(seq.end(), end.begin(), end.end());
    ASSERT_EQ(static_cast<int>(seq.size()) - 1, run_->cfg.block_size) << "the whole window used";
    const double want = TrainingEndingLogprob(*run_, seq, keep);
    EXPECT_NEAR(r->per_item[0].logprob[e], want, 1e-5 * std::fabs(want));
  }
  // An ending longer than the context window cannot be scored.
  const std::vector<ChoiceItem> huge = {{"a", {"light", ctx}, 0}};
  auto bad = ScoreChoices(be.get(), run_->cfg, run_->params, *run_->tok, huge, Quantize::kNone);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("item 1 ending 2"), std::string::npos) << bad.status().ToString();
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
