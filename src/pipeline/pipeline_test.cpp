// `tern pipeline`, end to end through the binary: tiny runs trained by `tern run`, judged on the same
// validation windows, registered; the first version and a better one take `production`, a worse one is
// registered and refused (exit 3), and a failure registers nothing and moves no alias (exit 1).
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

class PipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tern_ = testing::FindTernBinary().string();
    ASSERT_FALSE(tern_.empty()) << "build the tern binary first (cmake --build build --target tern)";
    data_ = testing::SharedSmallPreparedData();
    ASSERT_FALSE(data_.empty()) << "preparing the small corpus failed";
    root_ = fs::temp_directory_path() / ("tern_pipeline_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    std::ofstream(root_ / "tiny.yaml") << testing::TinyTrainYaml(data_, {.warmup_steps = 2, .lr = "0.003"});
  }
  void TearDown() override { fs::remove_all(root_); }

  // Writes PIPELINE.yaml with `train` and `extra` sections and runs it; its JSON decision.
  nlohmann::json Pipeline(const std::string& train, const std::string& extra, int want_code,
                          const std::string& evaluate = "{windows: 40}") {
    const fs::path spec = root_ / "pipeline.yaml";
    std::ofstream(spec) << "name: tiny\ntrain: " << train << "\nevaluate: " << evaluate << "\n"
                        << "register: {registry: " << (root_ / "registry").string() << "}\n"
                        << extra;
    auto r =
        testing::RunCommand("TERN_HOME=" + (root_ / "home").string() + " OMP_NUM_THREADS=1 " + tern_ +
                            " pipeline " + spec.string() + " --quiet --report " +
                            (root_ / "d.json").string() + " > /dev/null 2> " + (root_ / "err.txt").string());
    std::ifstream err(root_ / "err.txt");
    const std::string errors((std::istreambuf_iterator<char>(err)), {});
    EXPECT_EQ(r.code, want_code) << errors;
    std::ifstream in(root_ / "d.json");
    auto j = nlohmann::json::parse(in, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << errors;
    return j;
  }
  std::string Train(const std::string& run, int steps) const {
    return "{config: " + (root_ / "tiny.yaml").string() + ", set: [train.steps=" + std::to_string(steps) +
           ", run.dir=" + (root_ / run).string() + "], run_args: [--price-per-hour, \"0.5\"]}";
  }

  std::string tern_, data_;
  fs::path root_;
};

TEST_F(PipelineTest, PromotesTheBetterRefusesTheWorseAndAFailureMovesNothing) {
  // The first version holds no rival: promoted.
  nlohmann::json first = Pipeline(Train("first", 10), "", 0);
  EXPECT_EQ(first["version"], 1);
  EXPECT_TRUE(first["promoted"].get<bool>());
  EXPECT_FALSE(first.contains("baseline_version"));
  EXPECT_GT(first["candidate"]["loss"].get<double>(), 0);

  // Two steps of training are worse: registered as v2, production stays on v1.
  nlohmann::json worse = Pipeline(Train("worse", 2), "", 3);
  EXPECT_EQ(worse["version"], 2);
  EXPECT_EQ(worse["baseline_version"], 1);
  EXPECT_FALSE(worse["promoted"].get<bool>());
  EXPECT_GT(worse["candidate"]["loss"].get<double>(), worse["baseline"]["loss"].get<double>());
  EXPECT_DOUBLE_EQ(worse["baseline"]["loss"].get<double>(), first["candidate"]["loss"].get<double>())
      << "the baseline is judged on the same windows as the candidate was";

  // Forty steps are better: v3 takes production.
  nlohmann::json better = Pipeline(Train("better", 40), "compare: {margin: 0.01}\n", 0);
  EXPECT_EQ(better["version"], 3);
  EXPECT_EQ(better["baseline_version"], 1);
  EXPECT_TRUE(better["promoted"].get<bool>());
  EXPECT_LT(better["candidate"]["loss"].get<double>(), 0.99 * better["baseline"]["loss"].get<double>());

  // Evaluation on data that does not exist fails: nothing registered, no alias moved.
  nlohmann::json failed =
      Pipeline("{model: " + (root_ / "worse").string() + "}", "", 1, "{windows: 40, data: /nonexistent}");
  EXPECT_FALSE(failed.contains("version"));
  EXPECT_NE(failed["decision"].get<std::string>().find("failed at evaluate"), std::string::npos) << failed;

  // A trained run judged again (no training): production is still v3, and v2 does not beat it.
  nlohmann::json again = Pipeline("{model: " + (root_ / "worse").string() + "}", "", 3);
  EXPECT_EQ(again["baseline_version"], 3);
  EXPECT_EQ(again["version"], 4) << "registered again as a new version (same weights, one blob)";
}

// compare.metric choice_acc_norm: a multiple-choice set decides. The first version takes production with
// its accuracy in the decision; the same run judged again ties, which is not better.
TEST_F(PipelineTest, AMultipleChoiceSetCanDecide) {
  std::ofstream(root_ / "choices.jsonl")
      << R"({"ctx": "Verse 12:", "endings": ["light and darkness.", "Qzx vjk Zqx jvq zq."], "label": 0})"
         "\n"
      << R"({"ctx": "Verse 40:", "endings": ["Qzx vjk Zqx jvq zq.", "the earth and seed."], "label": 1})"
         "\n";
  const std::string evaluate = "{windows: 20, choices: " + (root_ / "choices.jsonl").string() + "}";
  nlohmann::json first = Pipeline(Train("first", 10), "compare: {metric: choice_acc_norm}\n", 0, evaluate);
  EXPECT_EQ(first["metric"], "choice_acc_norm");
  EXPECT_TRUE(first["promoted"].get<bool>());
  EXPECT_EQ(first["candidate"]["choice_items"], 2);
  const double acc = first["candidate"]["choice_acc_norm"].get<double>();
  EXPECT_GE(acc, 0.0);
  EXPECT_LE(acc, 1.0);
  EXPECT_NE(first["decision"].get<std::string>().find("choice_acc_norm"), std::string::npos) << first;

  nlohmann::json again = Pipeline("{model: " + (root_ / "first").string() + "}",
                                  "compare: {metric: choice_acc_norm}\n", 3, evaluate);
  EXPECT_EQ(again["baseline_version"], 1);
  EXPECT_DOUBLE_EQ(again["baseline"]["choice_acc_norm"].get<double>(), acc);
}

TEST_F(PipelineTest, ABadPipelineFileIsExitTwo) {
  std::ofstream(root_ / "bad.yaml") << "name: x\ntrain: {model: r}\ncompare: {alais: prod}\n";
  auto r = testing::RunCommand(tern_ + " pipeline " + (root_ / "bad.yaml").string() + " 2>&1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("unknown key `compare.alais`"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tern
