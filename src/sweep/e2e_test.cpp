// Real sweeps: the tern binary runs `tern sweep`, whose trials are `tern run` jobs of the real trainer on a
// tiny model. Eight trials, rungs at 2, 4 and 8 steps (eta 2): the sweep ends within its dollar budget,
// stops the worst trials at the first rung and picks the lowest-loss trial; a small budget stops it
// launching; a sweep killed with -9 and started again finishes the same trials.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "sweep/spec.h"
#include "sweep/store.h"
#include "testing/files.h"
#include "testing/prepared_data.h"
#include "testing/processes.h"
#include "testing/tern_binary.h"
#include "testing/tiny_config.h"

namespace tern::sweep {
namespace {

using nlohmann::json;

class SweepE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tern_ = testing::FindTernBinary().string();
    ASSERT_FALSE(tern_.empty()) << "build the tern binary first";
    const std::string data = testing::SharedSmallPreparedData();
    ASSERT_FALSE(data.empty());
    root_ = tmp_.path();
    testing::WriteFile(root_ + "/tiny.yaml", testing::TinyTrainYaml(data, {.total_batch_tokens = 128,
                                                                           .steps = 100,
                                                                           .warmup_steps = 0,
                                                                           .lr = "1.0e-3",
                                                                           .schedule = "constant",
                                                                           .more = "job: {backoff: 0.2}\n"}));
  }

  // The sweep file: 8 random trials over the learning rate, rungs 2, 4, 8 at $36/h.
  std::string WriteSweep(const std::string& name, double budget, int parallel) {
    const std::string path = root_ + "/" + name + ".yaml";
    testing::WriteFile(path, "base: tiny.yaml\ndir: " + name +
                                 "\nseed: 3\ntrials: 8\nparallel: " + std::to_string(parallel) +
                                 "\nasha: {eta: 2, min_steps: 2, max_steps: 8}\nprice_per_hour: 36\n"
                                 "budget_usd: " +
                                 std::to_string(budget) +
                                 "\nspace:\n  train.lr: {loguniform: [1.0e-5, 3.0e-2]}\n");
    return path;
  }
  std::string Shell(const std::string& args) const {
    return "OMP_NUM_THREADS=1 TERN_HOME=" + root_ + "/home " + tern_ + " " + args;
  }
  json Sweep(const std::string& path) {
    testing::CommandResult r = testing::RunCommand(Shell("sweep " + path + " --json"));
    EXPECT_EQ(r.code, 0) << r.output;
    // RunCommand captures stderr too: the JSON is the text from the first line that opens an object.
    const size_t at = r.output.rfind("\n{\n");
    json j = json::parse(at == std::string::npos ? r.output : r.output.substr(at + 1), nullptr, false);
    EXPECT_TRUE(j.is_object()) << r.output;
    last_output_ = r.output;
    return j;
  }

  testing::TempDir tmp_;
  std::string tern_, root_, last_output_;
};

TEST_F(SweepE2eTest, EightTrialsWithinBudgetWorstStopEarlyBestIsTheLowestLoss) {
  const json j = Sweep(WriteSweep("s", 5.0, 2));
  ASSERT_TRUE(j.is_object());
  ASSERT_EQ(j["trials"].size(), 8u);
  EXPECT_EQ(j["rung_steps"], json({2, 4, 8}));
  EXPECT_LE(j["spent_usd"].get<double>(), 5.0);
  EXPECT_GT(j["spent_usd"].get<double>(), 0.0);
  int worst = -1, early = 0, best = -1;
  double worst_loss = -1, best_loss = 1e9;
  double sum = 0;
  for (const json& t : j["trials"]) {
    const std::string state = t["state"];
    EXPECT_TRUE(state == "done" || state == "stopped") << t.dump();
    ASSERT_FALSE(t["losses"].empty()) << t.dump();
    EXPECT_GT(t["cost_usd"].get<double>(), 0.0);
    sum += t["cost_usd"].get<double>();
    if (t["losses"][0].get<double>() > worst_loss) worst_loss = t["losses"][0], worst = t["id"];
    if (t["steps"].get<int>() < 8) {
      early++;
      EXPECT_EQ(state, "stopped");
      EXPECT_NE(t["reason"].get<std::string>().find("only the top"), std::string::npos) << t.dump();
    }
    if (t["losses"].size() == 3 && t["losses"][2].get<double>() < best_loss)
      best_loss = t["losses"][2], best = t["id"];
  }
  EXPECT_NEAR(sum, j["spent_usd"].get<double>(), 1e-9);
  EXPECT_GE(early, 4) << "half stop at rung 0, at least";
  EXPECT_EQ(j["trials"][worst]["steps"], 2) << "the worst trial at rung 0 is stopped there";
  ASSERT_GE(best, 0);
  EXPECT_EQ(j["best"], best);
  const std::string yaml = testing::ReadFile(root_ + "/s/best.yaml");
  const std::string lr = j["trials"][best]["params"]["train.lr"];
  EXPECT_NE(yaml.find("trial " + std::to_string(best)), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("steps: 8"), std::string::npos) << yaml;
  const std::string html = testing::ReadFile(root_ + "/s/sweep.html");
  EXPECT_NE(html.find("parallel coordinates"), std::string::npos);
  EXPECT_NE(html.find("Chart"), std::string::npos);
  EXPECT_EQ(html.find("<script src"), std::string::npos) << "offline: Chart.js inlined";
}

TEST_F(SweepE2eTest, AnUnknownKeyOrABadValueIsRefusedBeforeAnythingRuns) {
  const std::string head =
      "base: tiny.yaml\ndir: bad\ntrials: 2\nasha: {eta: 2, min_steps: 2, max_steps: 4}\n";
  testing::WriteFile(root_ + "/bad1.yaml", head + "space: {train.nope: {uniform: [0, 1]}}\n");
  testing::CommandResult r = testing::RunCommand(Shell("sweep " + root_ + "/bad1.yaml"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("train.nope"), std::string::npos) << r.output;
  testing::WriteFile(root_ + "/bad2.yaml", head + "space: {train.schedule: {choice: [cosine, sawtooth]}}\n");
  r = testing::RunCommand(Shell("sweep " + root_ + "/bad2.yaml"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("sawtooth"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(root_ + "/bad")) << "nothing ran";
}

TEST_F(SweepE2eTest, ASmallBudgetStopsLaunching) {
  // $0.001 at $36/h is 0.1 s: less than one rung (a tern run start-up alone is longer), whatever the
  // machine's speed, so the measured $/step after the first rung says the next would not fit.
  const json j = Sweep(WriteSweep("b", 0.001, 1));
  ASSERT_TRUE(j.is_object());
  EXPECT_NE(j["stopped"].get<std::string>().find("budget"), std::string::npos) << j.dump(2);
  EXPECT_LT(j["trials"].size(), 8u) << j.dump(2);
  double most = 0;
  for (const json& t : j["trials"]) most = std::max(most, t["cost_usd"].get<double>());
  EXPECT_LE(j["spent_usd"].get<double>(), 0.001 + most) << "at most the estimate's error over the budget";
}

TEST_F(SweepE2eTest, KilledWithSigkillAndRestartedFinishesTheSameTrials) {
  const std::string path = WriteSweep("k", 5.0, 2);
  std::vector<TrialRow> before;
  {
    testing::Child sweep({tern_, "sweep", path}, {{"OMP_NUM_THREADS", "1"}, {"TERN_HOME", root_ + "/home"}},
                         root_ + "/k1.log");
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
      if (auto st = SweepStore::Open(root_ + "/k/sweep.sqlite"); st.ok())
        if (auto t = (*st)->Trials(); t.ok() && t->size() >= 4) {
          before = *t;
          break;
        }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_GE(before.size(), 4u) << testing::ReadFile(root_ + "/k1.log");
    EXPECT_TRUE(std::any_of(before.begin(), before.end(), [](const TrialRow& t) {
      return t.state == "running";
    })) << "killed while a rung was running";
    sweep.Signal(SIGKILL);
    sweep.Wait();
  }
  const json j = Sweep(path);
  ASSERT_TRUE(j.is_object());
  ASSERT_EQ(j["trials"].size(), 8u);
  auto spec = LoadSweepSpec(path);
  ASSERT_TRUE(spec.ok());
  for (const json& t : j["trials"]) {
    EXPECT_TRUE(t["state"] == "done" || t["state"] == "stopped") << t.dump();
    for (const auto& [k, v] : SampleTrial(*spec, t["id"])) EXPECT_EQ(t["params"][k], v);
  }
  for (const TrialRow& b : before)
    EXPECT_EQ(j["trials"][b.id]["params"]["train.lr"], b.params[0].second) << "the same sampled parameters";
  EXPECT_NE(last_output_.find("resuming"), std::string::npos) << last_output_;
}

}  // namespace
}  // namespace tern::sweep
