// Chat fine-tuning (tern prepare --chat): the trainer learns the assistant's replies only. Its validation
// loss over masked data is the serving forward's loss over the targets learned (infer/evaluate.h, which
// skips the masked ones on its own), and a model trained on conversations whose every reply is the same
// answers an unseen question with it through the chat template tern serve uses.
#include <gtest/gtest.h>

#include <omp.h>

#include "backend/backend.h"
#include "data/chat.h"
#include "infer/evaluate.h"
#include "infer/generate.h"
#include "testing/files.h"
#include "testing/prepared_data.h"
#include "train/trainer.h"

namespace tern {
namespace {

using testing::TempDir;

class TrainerChatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = testing::SharedSmallPreparedData();
    ASSERT_FALSE(base_.empty());
    std::string lines;
    for (int i = 0; i < 200; i++)
      lines += R"({"messages": [{"role": "user", "content": "Verse )" + std::to_string(i * 7 % 1000) +
               R"(: seed and fruit?"}, {"role": "assistant", "content": "Amen, so be it."}]})" + "\n";
    testing::WriteFile(tmp_ / "chats.jsonl", lines);
    ASSERT_TRUE(testing::PrepareChatWithTokenizerOf(base_, tmp_ / "chats.jsonl", tmp_ / "chat", 0.1));
  }

  TrainConfig Config(int steps) {
    TrainConfig c;
    c.model = {2, 2, 64, 0, 64};
    c.data_dir = tmp_ / "chat";
    c.batch_size = 8;
    c.seq_len = 64;
    c.steps = steps;
    c.lr = 1e-2;
    c.warmup_steps = 5;
    c.eval_every = 0;
    c.eval_batches = 2;
    c.num_samples = 0;
    c.peak_gflops = 100;
    c.run_dir = tmp_ / "run";
    return c;
  }

  std::string base_;
  TempDir tmp_;
};

TEST_F(TrainerChatTest, ValidationLossIsTheServingForwardsOverTheTokensLearned) {
  auto t = Trainer::Create(Config(3), true);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE((*t)->Run().ok());
  auto val = (*t)->Evaluate();
  ASSERT_TRUE(val.ok());
  auto shards = FindShards(tmp_ / "chat", "val");
  ASSERT_TRUE(shards.ok());
  std::unique_ptr<Backend> cpu = MakeCpuFastBackend();
  EvalOptions o;
  o.seq_len = 64;
  o.max_windows = 2 * 8;  // eval.batches x B, from the start of the val split
  auto ref = EvaluateShards(cpu.get(), (*t)->config().model, (*t)->model().GetParameters(), *shards, o);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  EXPECT_LT(ref->tokens, ref->windows * 64) << "some targets are masked";
  EXPECT_NEAR(*val, ref->loss, 1e-5 * ref->loss);
}

// The step's loss is the mean over every target learned in its global batch, not a mean of micro-batch means:
// B=8 x 2 accumulation steps trains as B=16 x 1 (the same windows; the micro-batches learn different numbers
// of tokens, so per-micro-batch means would differ). fp32, one thread.
TEST_F(TrainerChatTest, AccumulationTrainsAsOneBatchOverTheTokensLearned) {
  omp_set_num_threads(1);
  auto run = [&](int B, const char* dir) {
    TrainConfig c = Config(4);
    c.batch_size = B;
    c.total_batch_tokens = 16 * 64;
    c.precision = TrainPrecision::kFp32;
    c.run_dir = tmp_ / dir;
    auto t = Trainer::Create(c, true);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    std::vector<double> losses;
    for (int i = 0; i < 4 && t.ok(); i++) {
      auto st = (*t)->Step();
      EXPECT_TRUE(st.ok()) << st.status().ToString();
      if (st.ok()) losses.push_back(st->loss);
    }
    return std::make_pair(losses, t.ok() ? (*t)->model().GetParameters() : std::vector<float>{});
  };
  const auto [acc_losses, acc_w] = run(8, "accum");
  const auto [one_losses, one_w] = run(16, "whole");
  ASSERT_EQ(acc_losses.size(), 4u);
  ASSERT_EQ(one_losses.size(), 4u);
  for (int i = 0; i < 4; i++)
    EXPECT_NEAR(acc_losses[i], one_losses[i], 1e-5 * one_losses[i]) << "step " << i + 1;
  ASSERT_EQ(acc_w.size(), one_w.size());
  double worst = 0;
  for (size_t i = 0; i < acc_w.size(); i++) worst = std::max(worst, double(std::abs(acc_w[i] - one_w[i])));
  EXPECT_LT(worst, 1e-4) << "weights after 4 steps";
}

TEST_F(TrainerChatTest, ATrainedModelAnswersThroughTheServingTemplate) {
  auto t = Trainer::Create(Config(150), true);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto sum = (*t)->Run();
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();
  EXPECT_LT(sum->val_loss, 0.5) << "the reply is always the same: its loss falls near 0";
  auto tok = Tokenizer::Load(tmp_ / "chat/tokenizer.model");
  ASSERT_TRUE(tok.ok());
  GenerationRequest r;
  r.prompt = tok->Encode(ApplyChatTemplate({{"user", "Verse 3: heaven and earth?"}}));
  r.max_tokens = 20;
  r.sampling.temperature = 0;
  r.stop = {kChatStop};
  auto gen = GenerateOnce((*t)->config().model, (*t)->model().GetParameters(), *tok, r, 64);
  ASSERT_TRUE(gen.ok()) << gen.status().ToString();
  EXPECT_EQ((*gen)[0].text, " Amen, so be it.\n") << "and then end-of-text, which it learned to write";
  EXPECT_EQ((*gen)[0].finish, FinishReason::kStop);
  EXPECT_EQ((*gen)[0].tokens.back(), tok->eos_id());
}

}  // namespace
}  // namespace tern
