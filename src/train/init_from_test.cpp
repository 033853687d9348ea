// train.init_from: a run that starts from another's weights (fine-tuning). The weights arrive bit for bit
// (the source's validation loss is the new run's first), from a run directory or a checkpoint; the position
// table is cropped to a shorter block; a model or tokenizer that differs is refused with the fix; a run that
// resumes from its own checkpoint keeps its own weights, even when the source is gone.
#include "train/init_from.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "data/prepare.h"
#include "model/safetensors.h"
#include "testing/files.h"
#include "testing/prepared_data.h"
#include "train/trainer.h"

namespace tern {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

class InitFromTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = testing::SharedSmallPreparedData();
    ASSERT_FALSE(data_.empty());
  }

  TrainConfig Config(const std::string& run, int steps = 6) {
    TrainConfig c;
    c.model = {2, 2, 32, 0, 32};
    c.data_dir = data_;
    c.batch_size = 4;
    c.seq_len = 32;
    c.steps = steps;
    c.lr = 3e-3;
    c.warmup_steps = 2;
    c.eval_every = 0;
    c.eval_batches = 4;
    c.num_samples = 0;
    c.peak_gflops = 100;  // no probe
    c.run_dir = tmp_ / run;
    return c;
  }

  // Trains `cfg` to the end; returns its final weights.
  std::vector<float> Train(const TrainConfig& cfg) {
    auto t = Trainer::Create(cfg, /*quiet=*/true);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    if (!t.ok()) return {};
    auto s = (*t)->Run();
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return (*t)->model().GetParameters();
  }

  std::string data_;
  TempDir tmp_;
};

TEST_F(InitFromTest, StartsFromTheSourceWeightsBitForBit) {
  TrainConfig base = Config("base");
  base.ckpt.every = 3;
  const std::vector<float> trained = Train(base);
  auto base_run = Trainer::Create(Config("base_eval"), true);  // the source's val loss, measured the same way
  ASSERT_TRUE(base_run.ok());
  (*base_run)->model().SetParameters(trained);
  auto base_loss = (*base_run)->Evaluate();
  ASSERT_TRUE(base_loss.ok());

  for (const std::string& from : {tmp_ / "base", tmp_ / "base/checkpoints/step_00000006"}) {
    TrainConfig ft = Config("ft");
    ft.init_from = from;
    auto t = Trainer::Create(ft, true);
    ASSERT_TRUE(t.ok()) << from << ": " << t.status().ToString();
    EXPECT_TRUE((*t)->model().GetParameters() == trained) << from;
    auto loss = (*t)->Evaluate();
    ASSERT_TRUE(loss.ok());
    EXPECT_EQ(*loss, *base_loss) << from;
    EXPECT_EQ((*t)->step(), 0) << "a fine-tune starts its own schedule at step 0";
  }
  // metrics.jsonl's start row says where the weights came from.
  TrainConfig ft = Config("ft_row", 1);
  ft.init_from = tmp_ / "base";
  Train(ft);
  EXPECT_NE(
      testing::ReadFile(tmp_ / "ft_row/metrics.jsonl").find("\"init_from\":\"" + (tmp_ / "base") + "\""),
      std::string::npos);

  // Training from them starts where the source ended, far below a random start.
  auto fresh = Trainer::Create(Config("fresh"), true);
  ASSERT_TRUE(fresh.ok());
  auto fresh_loss = (*fresh)->Evaluate();
  ASSERT_TRUE(fresh_loss.ok());
  EXPECT_LT(*base_loss, *fresh_loss - 0.3);
}

TEST_F(InitFromTest, ACheckpointOnItsOwnIsTakenWithANote) {
  // A checkpoint copied away from its run has no tokenizer.model beside it: loaded, unchecked, with a note.
  TrainConfig base = Config("base2");
  base.ckpt.every = 6;
  Train(base);
  fs::create_directories(tmp_ / "lone");
  fs::copy(tmp_ / "base2/checkpoints/step_00000006", tmp_ / "lone/step_00000006",
           fs::copy_options::recursive);
  auto tok = Tokenizer::Load(data_ + "/tokenizer.model");
  ASSERT_TRUE(tok.ok());
  GptConfig model{2, 2, 32, 0, 32};
  auto w = LoadInitWeights(tmp_ / "lone/step_00000006", *tok, data_, &model);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_NE(w->note.find("nothing checks"), std::string::npos) << w->note;
  EXPECT_EQ(model.vocab_size, tok->vocab_size()) << "vocab_size 0 is the source's";
}

TEST_F(InitFromTest, AShorterBlockCropsThePositionTable) {
  Train(Config("base"));
  auto src = ReadGptSafetensors(tmp_ / "base/model.safetensors");
  ASSERT_TRUE(src.ok());
  TrainConfig ft = Config("ft");
  ft.init_from = tmp_ / "base";
  ft.model.block_size = 16;
  ft.seq_len = 16;
  auto t = Trainer::Create(ft, true);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const std::vector<float> got = (*t)->model().GetParameters();
  const GptConfig& c = (*t)->model().config();
  const std::vector<ParamTensor> from = GptParamLayout(src->config);
  for (const ParamTensor& p : GptParamLayout(c)) {
    const auto q =
        std::find_if(from.begin(), from.end(), [&](const ParamTensor& x) { return x.name == p.name; });
    ASSERT_NE(q, from.end()) << p.name;
    // wpe [T, C]: the first 16 rows of the source's 32; every other tensor whole.
    EXPECT_TRUE(
        std::equal(got.begin() + p.offset, got.begin() + p.offset + p.numel, src->params.begin() + q->offset))
        << p.name;
  }
  ft.model.block_size = 64;  // longer than the source's: positions never trained
  auto longer = Trainer::Create(ft, true);
  ASSERT_FALSE(longer.ok());
  EXPECT_NE(longer.status().message().find("--set model.block_size=32"), std::string::npos)
      << longer.status().message();
}

TEST_F(InitFromTest, AnotherModelShapeIsRefusedWithTheFix) {
  Train(Config("base"));
  TrainConfig ft = Config("ft");
  ft.init_from = tmp_ / "base";
  ft.model.n_layer = 3;
  ft.model.n_embd = 64;
  auto t = Trainer::Create(ft, true);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Status::Code::kInvalidArgument);
  const std::string& m = t.status().message();
  EXPECT_NE(m.find("model.n_layer is 3 (the source's is 2)"), std::string::npos) << m;
  EXPECT_NE(m.find("--set model.n_layer=2 --set model.n_embd=32"), std::string::npos) << m;
  EXPECT_FALSE(fs::exists(tmp_ / "ft/metrics.jsonl")) << "refused before the run directory is written";
}

TEST_F(InitFromTest, DataFromAnotherTokenizerIsRefusedWithTheFix) {
  Train(Config("base"));
  testing::WriteFile(tmp_ / "other.txt", testing::MakeCorpus(40'000, 9));
  PrepareOptions p;
  p.inputs = {tmp_ / "other.txt"};
  p.out_dir = tmp_ / "other";
  p.vocab_size = 400;
  p.progress = nullptr;
  auto other = Prepare(p);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  TrainConfig ft = Config("ft");
  ft.init_from = tmp_ / "base";
  ft.data_dir = tmp_ / "other";
  auto t = Trainer::Create(ft, true);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("--tokenizer " + (tmp_ / "base")), std::string::npos)
      << t.status().message();

  // The same text prepared with the model's tokenizer is accepted.
  p.out_dir = tmp_ / "same";
  p.vocab_size = 0;
  p.tokenizer = tmp_ / "base/tokenizer.model";
  auto same = Prepare(p);
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  ft.data_dir = tmp_ / "same";
  auto ok = Trainer::Create(ft, true);
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
}

TEST_F(InitFromTest, AResumedRunKeepsItsOwnWeightsEvenWhenTheSourceIsGone) {
  Train(Config("base"));
  TrainConfig ft = Config("ft", 4);
  ft.init_from = tmp_ / "base";
  ft.ckpt.every = 2;
  const std::vector<float> tuned = Train(ft);

  fs::rename(tmp_ / "base", tmp_ / "moved");  // e.g. a relaunch on a machine without the source
  ft.ckpt.resume = ResumeFrom::Auto();
  auto t = Trainer::Create(ft, true);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->resumed_from(), 4);
  EXPECT_TRUE((*t)->model().GetParameters() == tuned);

  // Without a checkpoint to resume, the missing source is the error it is.
  TrainConfig fresh = ft;
  fresh.run_dir = tmp_ / "ft_new";
  auto missing = Trainer::Create(fresh, true);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("train.init_from"), std::string::npos);
}

// A relaunch reads no source it does not use: the shape comes from the earlier attempt's config.yaml, so a
// source vocabulary padded past the tokenizer's survives the source going away, and a source that changed
// in between is not even read while the run's own checkpoint replaces it.
TEST_F(InitFromTest, ARelaunchTakesTheShapeFromItsEarlierAttemptAndReadsNoSource) {
  auto tok = Tokenizer::Load(data_ + "/tokenizer.model");
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  TrainConfig base = Config("base");
  base.model.vocab_size = tok->vocab_size() + 37;  // padded, as GPT-2's 50257 -> 50304
  Train(base);

  TrainConfig ft = Config("ft", 4);  // model.vocab_size 0: the source's
  ft.init_from = tmp_ / "base";
  ft.ckpt.every = 2;
  const std::vector<float> tuned = Train(ft);

  fs::rename(tmp_ / "base", tmp_ / "moved");
  ft.ckpt.resume = ResumeFrom::Auto();
  {
    auto t = Trainer::Create(ft, true);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ((*t)->config().model.vocab_size, base.model.vocab_size);
    EXPECT_EQ((*t)->resumed_from(), 4);
    EXPECT_TRUE((*t)->model().GetParameters() == tuned);
  }

  // A source of another shape in its place is not read (it would be refused): the checkpoint wins.
  TrainConfig other = Config("base");
  other.model.n_embd = 48;
  Train(other);
  {
    auto t = Trainer::Create(ft, true);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ((*t)->resumed_from(), 4);
    EXPECT_TRUE((*t)->model().GetParameters() == tuned);
  }

  // With no checkpoint left, the relaunch loads the source after all, and its new shape is refused.
  fs::remove_all(fs::path(tmp_ / "ft") / "checkpoints");
  auto t = Trainer::Create(ft, true);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("model.n_embd"), std::string::npos) << t.status().ToString();
}

}  // namespace
}  // namespace tern
