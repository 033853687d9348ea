// `tern eval`, end to end: a tiny run trained by the tern binary, then evaluated by it. With the run's own
// defaults the loss is the last val_loss the trainer logged (the same windows and weights, through the
// serving forward instead of the training one); other options change what is scored.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "testing/prepared_data.h"
#include "testing/processes.h"
#include "testing/tern_binary.h"
#include "testing/tiny_config.h"

namespace tern {
namespace {

namespace fs = std::filesystem;

class EvalCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tern_ = testing::FindTernBinary().string();
    data_ = testing::SharedSmallPreparedData();
    root_ = fs::temp_directory_path() / ("tern_eval_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    std::ofstream(root_ / "tiny.yaml")
        << testing::TinyTrainYaml(data_, {.seq_len = 24,
                                          .steps = 12,
                                          .warmup_steps = 2,
                                          .eval_every = 6,
                                          .eval_batches = 3,
                                          .run_dir = (root_ / "run").string()});
    train_ = testing::RunCommand("OMP_NUM_THREADS=1 " + tern_ + " train " + (root_ / "tiny.yaml").string() +
                                 " --quiet 2>&1");
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }
  void SetUp() override {
    ASSERT_FALSE(tern_.empty()) << "build the tern binary first (cmake --build build --target tern)";
    ASSERT_FALSE(data_.empty()) << "preparing the small corpus failed";
    ASSERT_EQ(train_.code, 0) << train_.output;
  }
  static nlohmann::json Eval(const std::string& args) {
    auto r = testing::RunCommand("(" + tern_ + " eval " + (root_ / "run").string() + " " + args +
                                 " --json 2>/dev/null)");
    EXPECT_EQ(r.code, 0) << r.output;
    return r.code == 0 ? nlohmann::json::parse(r.output) : nlohmann::json();
  }
  // A copy of the run named `name` whose config.yaml names `data_dir` as its data; "" on failure.
  static fs::path CopyRunWithDataDir(const std::string& name, const std::string& data_dir) {
    const fs::path copy = root_ / name;
    fs::remove_all(copy);
    fs::copy(root_ / "run", copy, fs::copy_options::recursive);
    std::ifstream in(copy / "config.yaml");
    std::string yaml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    const size_t at = yaml.find(data_);
    EXPECT_NE(at, std::string::npos) << "the run's config names its data directory";
    if (at == std::string::npos) return {};
    yaml.replace(at, data_.size(), data_dir);
    std::ofstream(copy / "config.yaml") << yaml;
    return copy;
  }
  // The last evaluation the trainer logged.
  static double LastValLoss() {
    std::ifstream in(root_ / "run" / "metrics.jsonl");
    double v = -1;
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line);
      if (j.contains("val_loss") && !j.contains("event")) v = j["val_loss"];
    }
    return v;
  }

  static std::string tern_, data_;
  static fs::path root_;
  static testing::CommandResult train_;
};
std::string EvalCliTest::tern_, EvalCliTest::data_;
fs::path EvalCliTest::root_;
testing::CommandResult EvalCliTest::train_;

TEST_F(EvalCliTest, TheRunsDefaultsGiveItsLastValLoss) {
  const nlohmann::json j = Eval("");
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["seq_len"], 24);
  EXPECT_EQ(j["windows"], 12) << "eval.batches 3 x batch_size 4";
  const double want = LastValLoss();
  ASSERT_GT(want, 0);
  EXPECT_NEAR(j["loss"].get<double>(), want, 1e-4 * want);
  EXPECT_NEAR(j["perplexity"].get<double>(), std::exp(want), 1e-3 * std::exp(want));
}

TEST_F(EvalCliTest, OptionsChooseWhatIsScored) {
  const nlohmann::json all = Eval("--windows 0 --seq-len 32");
  EXPECT_EQ(all["seq_len"], 32);
  EXPECT_GT(all["windows"].get<int>(), 12) << "every window of the val shards";
  std::ofstream(root_ / "prompts.txt") << "In the beginning\n\nAnd God said\n";
  const nlohmann::json p = Eval("--prompts " + (root_ / "prompts.txt").string());
  ASSERT_EQ(p["prompts"].size(), 2u) << "the empty line is skipped";
  EXPECT_EQ(p["prompts"][0]["text"], "In the beginning");
  EXPECT_LT(p["prompts"][0]["logprob"].get<double>(), 0);
  const nlohmann::json q = Eval("--quantize int8");
  EXPECT_EQ(q["weights"], "int8");
  EXPECT_NE(q["loss"], Eval("")["loss"]);
  // int4 takes a scale per 64 weights: this model's 32-wide rows are refused, naming the format that fits.
  auto int4 = testing::RunCommand(tern_ + " eval " + (root_ / "run").string() + " --weights int4 2>&1");
  EXPECT_EQ(int4.code, 1);
  EXPECT_NE(int4.output.find("n_embd divisible by 64"), std::string::npos) << int4.output;
  EXPECT_NE(int4.output.find("--weights int8"), std::string::npos) << int4.output;

  auto bad = testing::RunCommand(tern_ + " eval " + (root_ / "run").string() + " --data /nonexistent 2>&1");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.output.find("--data /nonexistent"), std::string::npos) << bad.output;
}

// --choices: a multiple-choice set scored by the run's model. Right endings are the corpus's own words after
// its "Verse N:", wrong ones letters it never has in that order; even this briefly trained model tells them
// apart. A run whose data is not here is still scored (no loss, a note saying so), and a malformed line is
// an error naming it.
TEST_F(EvalCliTest, ChoicesGiveTheAccuracyOfTheRunsModel) {
  {
    std::ofstream f(root_ / "choices.jsonl");
    for (int i = 0; i < 20; i++) {
      nlohmann::json endings = {"light and darkness.", "Qzx vjk Zqx jvq zq."};  // the same length
      if (i % 2) std::swap(endings[0], endings[1]);
      f << nlohmann::json{{"ctx", "Verse " + std::to_string(100 + i) + ":"},
                          {"endings", endings},
                          {"label", i % 2}}
               .dump()
        << "\n";
    }
  }
  const nlohmann::json j = Eval("--choices " + (root_ / "choices.jsonl").string());
  ASSERT_TRUE(j.contains("choices")) << j.dump();
  const nlohmann::json& c = j["choices"];
  EXPECT_EQ(c["items"], 20);
  EXPECT_EQ(c["truncated"], 0);
  EXPECT_GE(c["acc"].get<double>(), 0.9) << c.dump();
  EXPECT_GE(c["acc_norm"].get<double>(), 0.9) << c.dump();
  EXPECT_GE(c["acc_stderr"].get<double>(), 0);
  EXPECT_TRUE(j.contains("loss")) << "the run's data is here: its loss too";

  // The same run without its data: choices only.
  const fs::path copy = CopyRunWithDataDir("run_nodata", (root_ / "gone").string());
  ASSERT_FALSE(copy.empty());
  auto r = testing::RunCommand(tern_ + " eval " + copy.string() + " --quiet --choices " +
                               (root_ / "choices.jsonl").string() + " 2>&1");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("no loss: the run's data.dir"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("acc "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("over 20 items"), std::string::npos) << r.output;

  std::ofstream(root_ / "bad.jsonl") << R"({"ctx": "a", "endings": ["x", "y"], "label": 0})"
                                        "\n"
                                     << R"({"ctx": "a", "endings": ["x", "y"], "label": 5})"
                                        "\n";
  auto bad = testing::RunCommand(tern_ + " eval " + (root_ / "run").string() + " --choices " +
                                 (root_ / "bad.jsonl").string() + " 2>&1");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.output.find("bad.jsonl line 2"), std::string::npos) << bad.output;
}

// The run's data.dir is read relative to where tern eval runs: when it is not there, the error says whose
// path it is, relative to what, and that --data takes another.
TEST_F(EvalCliTest, AMissingRelativeDataDirOfTheRunNamesItsOriginAndTheFix) {
  const fs::path copy = CopyRunWithDataDir("run_rel", "no/such/prepared");
  ASSERT_FALSE(copy.empty());
  auto r = testing::RunCommand("cd " + root_.string() + " && " + tern_ + " eval run_rel 2>&1");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("the run's data.dir no/such/prepared"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--data DIR"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("relative to the current directory, " + root_.string()), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace tern
