// data.mix: other prepared datasets mixed into data.dir's training windows. The mixed-in data is trained on
// (its validation loss falls with its share) and validated apart from data.dir (val_loss_mix = a run on
// that data's own val split, exactly); resume is bit-exact; a dataset with another tokenizer and a bad
// spec are refused before anything runs, with the fix.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "testing/files.h"
#include "testing/prepared_data.h"
#include "train/trainer.h"

namespace tern {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

class TrainerMixTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = testing::SharedSmallPreparedData();
    ASSERT_FALSE(data_.empty());
    testing::WriteFile(tmp_ / "numbers.txt", testing::NumbersCorpus(60'000));
    numbers_ = tmp_ / "numbers";
    ASSERT_TRUE(testing::PrepareWithTokenizerOf(data_, tmp_ / "numbers.txt", numbers_));
  }

  TrainConfig Config(const std::string& run, const std::string& mix, int steps = 16) {
    TrainConfig c;
    c.model = {2, 2, 32, 0, 32};
    c.data_dir = data_;
    c.data_mix = mix;
    c.batch_size = 4;
    c.seq_len = 32;
    c.steps = steps;
    c.lr = 3e-3;
    c.warmup_steps = 2;
    c.eval_every = 8;
    c.eval_batches = 4;
    c.num_samples = 0;
    c.peak_gflops = 100;  // no probe
    c.run_dir = tmp_ / run;
    return c;
  }

  Result<TrainSummary> Train(const TrainConfig& cfg, std::vector<float>* weights = nullptr) {
    TERN_ASSIGN_OR_RETURN(auto t, Trainer::Create(cfg, /*quiet=*/true));
    TERN_ASSIGN_OR_RETURN(TrainSummary s, t->Run());
    if (weights) *weights = t->model().GetParameters();
    return s;
  }

  std::string data_, numbers_;
  TempDir tmp_;
};

TEST_F(TrainerMixTest, MixedInDataIsTrainedOnAndValidatedApart) {
  std::vector<float> w;
  auto little = Train(Config("little", numbers_ + ":0.01"));
  auto much = Train(Config("much", numbers_ + ":0.6"), &w);
  ASSERT_TRUE(little.ok()) << little.status().ToString();
  ASSERT_TRUE(much.ok()) << much.status().ToString();
  ASSERT_EQ(much->val_loss_mix.size(), 1u);
  EXPECT_EQ(much->val_loss_mix[0].first, numbers_);
  const double little_numbers = little->val_loss_mix[0].second, much_numbers = much->val_loss_mix[0].second;
  EXPECT_LT(much_numbers, little_numbers - 0.3) << "a 60% share of the numbers trains on them";
  EXPECT_GT(much->val_loss, little->val_loss) << "and leaves less of the steps to data.dir's text";

  // val_loss_mix is the loss a run on that dataset alone measures for the same weights, exactly.
  TrainConfig alone = Config("alone", "");
  alone.data_dir = numbers_;
  auto t = Trainer::Create(alone, true);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  (*t)->model().SetParameters(w);
  auto direct = (*t)->Evaluate();
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(*direct, much_numbers);

  // metrics.jsonl's evaluation rows and summary.json carry it by directory.
  std::ifstream in(tmp_ / "much/metrics.jsonl");
  std::string line;
  int rows = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("val_loss") && !j.contains("event") && j.contains("eval_ms")) {
      ASSERT_TRUE(j.contains("val_loss_mix")) << line;
      EXPECT_TRUE(j["val_loss_mix"][numbers_].is_number()) << line;
      rows++;
    }
  }
  EXPECT_EQ(rows, 2) << "steps 8 and 16";
  auto summary = nlohmann::json::parse(testing::ReadFile(tmp_ / "much/summary.json"));
  EXPECT_DOUBLE_EQ(summary["val_loss_mix"][numbers_].get<double>(), much_numbers);
}

TEST_F(TrainerMixTest, ResumeIsBitExactAndTheShareMayChange) {
  std::vector<float> straight, resumed;
  ASSERT_TRUE(Train(Config("straight", numbers_ + ":0.3", 6), &straight).ok());
  TrainConfig half = Config("halves", numbers_ + ":0.3", 3);
  half.ckpt.every = 3;
  ASSERT_TRUE(Train(half).ok());
  half.steps = 6;
  half.ckpt.resume = ResumeFrom::Auto();
  auto again = Train(half, &resumed);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->resumed_from, 3);
  EXPECT_TRUE(straight == resumed) << "the mixed stream continues where the checkpoint left it";

  // A new share is a change (curricula anneal on another mix), reported in the resume row.
  half.steps = 8;
  half.data_mix = numbers_ + ":0.5";
  auto changed = Train(half);
  ASSERT_TRUE(changed.ok()) << changed.status().ToString();
  EXPECT_NE(testing::ReadFile(tmp_ / "halves/metrics.jsonl").find("data.mix: " + numbers_ + ":0.3 -> "),
            std::string::npos);
}

TEST_F(TrainerMixTest, AnotherTokenizerOrABadSpecIsRefusedBeforeAnythingRuns) {
  testing::WriteFile(tmp_ / "other.txt", testing::MakeCorpus(40'000, 9));
  PrepareOptions p;
  p.inputs = {tmp_ / "other.txt"};
  p.out_dir = tmp_ / "own";
  p.vocab_size = 400;
  p.progress = nullptr;
  auto own = Prepare(p);
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  auto t = Trainer::Create(Config("r", (tmp_ / "own") + ":0.2"), true);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("--tokenizer " + data_), std::string::npos) << t.status().message();
  EXPECT_FALSE(fs::exists(tmp_ / "r/metrics.jsonl"));

  for (const auto& [spec, says] :
       std::vector<std::pair<std::string, std::string>>{{numbers_, "is not DIR:SHARE"},
                                                        {numbers_ + ":x", "is not DIR:SHARE"},
                                                        {numbers_ + ":1.5", "between 0 and 1"},
                                                        {numbers_ + ":0.6," + numbers_ + "/:0.1", "twice"},
                                                        {numbers_ + ":0.6,other:0.4", "leaving data.dir"},
                                                        {data_ + ":0.5", "names data.dir"},
                                                        {(tmp_ / "missing") + ":0.5", "missing"}}) {
    auto bad = Trainer::Create(Config("bad", spec), true);
    ASSERT_FALSE(bad.ok()) << spec;
    EXPECT_NE(bad.status().message().find(says), std::string::npos) << spec << ": " << bad.status().message();
  }
}

TEST(DataMixSpec, ParsesSharesAndSpaces) {
  auto m = ParseDataMix(" data/web:0.3 , data/code : 0.05", "data/main");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(*m, (std::vector<DataMixEntry>{{"data/web", 0.3}, {"data/code", 0.05}}));
  auto colon = ParseDataMix("runs/a:b/data:0.2", "x");  // the share follows the last ':'
  ASSERT_TRUE(colon.ok());
  EXPECT_EQ((*colon)[0].dir, "runs/a:b/data");
  EXPECT_TRUE(ParseDataMix("", "x")->empty());
  EXPECT_FALSE(ParseDataMix("a:0.5,", "x").ok()) << "an empty item";
}

}  // namespace
}  // namespace tern
