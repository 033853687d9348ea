// ckpt.every=auto through the real trainer: the keys parse (auto, a step count, bad values name the fix), a
// short run writes ckpt_interval rows with their inputs and saves exactly at the intervals those rows chose.
#include <gtest/gtest.h>

#include <omp.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "testing/prepared_data.h"
#include "train/trainer.h"

namespace tern {
namespace {

namespace fs = std::filesystem;

TEST(IntervalConfigTest, EveryTakesAutoOrAStepCount) {
  TrainConfig c;
  ASSERT_TRUE(ApplyOverride("ckpt.every=auto", &c).ok());
  EXPECT_TRUE(c.ckpt.every_auto);
  EXPECT_EQ(c.ckpt.every, 0);
  const std::string yaml = TrainConfigToYaml(c);
  EXPECT_NE(yaml.find("every: auto"), std::string::npos) << yaml;
  ASSERT_TRUE(ApplyOverride("ckpt.every=100", &c).ok());
  EXPECT_FALSE(c.ckpt.every_auto) << "a step count turns auto off";
  EXPECT_EQ(c.ckpt.every, 100);
  for (const char* bad : {"ckpt.every=often", "ckpt.every=-5", "ckpt.every=", "ckpt.every=AUTO"}) {
    Status st = ApplyOverride(bad, &c);
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.message().find("ckpt.every"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("auto"), std::string::npos) << "names the fix: " << st.message();
  }
}

TEST(IntervalConfigTest, MtbfTakesADurationAndItsSource) {
  TrainConfig c;
  ASSERT_TRUE(ApplyOverride("ckpt.mtbf=6h", &c).ok());
  EXPECT_DOUBLE_EQ(c.ckpt.mtbf_s, 21600);
  ASSERT_TRUE(ApplyOverride("ckpt.mtbf=5400", &c).ok());
  EXPECT_DOUBLE_EQ(c.ckpt.mtbf_s, 5400);
  ASSERT_TRUE(ApplyOverride("ckpt.mtbf_source=ledger: 2 interruptions in 3.1 h", &c).ok());
  EXPECT_EQ(c.ckpt.mtbf_source, "ledger: 2 interruptions in 3.1 h");
  ASSERT_TRUE(ApplyOverride("ckpt.every_max=500", &c).ok());
  EXPECT_EQ(c.ckpt.every_max, 500);
  // The YAML the run directory keeps loads back to the same values.
  const fs::path yaml = fs::temp_directory_path() / ("tern_interval_cfg_" + std::to_string(::getpid()));
  ASSERT_TRUE(ApplyOverride("ckpt.every=auto", &c).ok());
  std::ofstream(yaml) << TrainConfigToYaml(c);
  TrainConfig back;
  ASSERT_TRUE(LoadTrainConfigFile(yaml.string(), &back).ok());
  fs::remove(yaml);
  EXPECT_TRUE(back.ckpt.every_auto);
  EXPECT_DOUBLE_EQ(back.ckpt.mtbf_s, 5400);
  EXPECT_EQ(back.ckpt.mtbf_source, c.ckpt.mtbf_source);
  ASSERT_TRUE(ApplyOverride("ckpt.mtbf=0", &c).ok());
  EXPECT_EQ(c.ckpt.mtbf_s, 0) << "0 = the default";
  Status st = ApplyOverride("ckpt.mtbf=soon", &c);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("ckpt.mtbf"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("6h"), std::string::npos) << "shows how to write one: " << st.message();
}

std::vector<nlohmann::json> Rows(const std::string& run_dir, const std::string& event) {
  std::vector<nlohmann::json> out;
  std::ifstream in(run_dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.value("event", "") == event) out.push_back(j);
  }
  return out;
}

TEST(IntervalTrainTest, AutoSavesAtTheIntervalsItLogs) {
  omp_set_num_threads(1);
  const std::string data = tern::testing::SharedSmallPreparedData();
  ASSERT_FALSE(data.empty());
  TrainConfig c;
  c.model = {2, 2, 32, 0, 32};
  c.data_dir = data;
  c.batch_size = 4;
  c.seq_len = 32;
  c.steps = 30;
  c.warmup_steps = 3;
  c.eval_every = 0;
  c.eval_batches = 2;
  c.num_samples = 0;
  c.peak_gflops = 100;
  c.run_dir = (fs::temp_directory_path() / ("tern_interval_run_" + std::to_string(::getpid()))).string();
  fs::remove_all(c.run_dir);
  ASSERT_TRUE(ApplyOverride("ckpt.every=auto", &c).ok());
  // A tiny model saves in milliseconds: a one-second MTBF keeps the interval at a few steps, and the cap
  // makes sure several saves fall inside 30 steps however slow this machine is.
  ASSERT_TRUE(ApplyOverride("ckpt.mtbf=1s", &c).ok());
  ASSERT_TRUE(ApplyOverride("ckpt.mtbf_source=the test", &c).ok());
  ASSERT_TRUE(ApplyOverride("ckpt.every_max=6", &c).ok());
  c.ckpt.keep_last = 0;
  auto t = Trainer::Create(c, /*quiet=*/true);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto sum = (*t)->Run();
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();

  const auto decisions = Rows(c.run_dir, "ckpt_interval");
  ASSERT_GE(decisions.size(), 1u);
  const auto& first = decisions[0];
  EXPECT_EQ(first["step"], 1) << "the first decision comes with the first step time";
  EXPECT_EQ(first["delta_from"], "first guess");
  EXPECT_TRUE(first["previous"].is_null());
  EXPECT_DOUBLE_EQ(first["mtbf_s"].get<double>(), 1.0);
  EXPECT_EQ(first["mtbf_source"], "the test");
  for (const char* k : {"every", "tau_s", "young_s", "delta_s", "stall_s", "wait_s", "writer_s",
                        "interference_s", "saves", "step_s", "bound"})
    EXPECT_TRUE(first.contains(k)) << k;
  std::map<int, int> every_from;  // step -> the interval decided at that step
  for (size_t i = 0; i < decisions.size(); i++) {
    const auto& d = decisions[i];
    EXPECT_GE(d["every"].get<int>(), 1);
    EXPECT_LE(d["every"].get<int>(), 6);
    if (i > 0) {
      EXPECT_EQ(d["previous"], decisions[i - 1]["every"]);
      EXPECT_EQ(d["delta_from"], "measured") << "later decisions follow measured saves";
      EXPECT_GE(d["saves"].get<int>(), 1);
    }
    every_from[d["step"].get<int>()] = d["every"].get<int>();
  }

  // Replays the rule (a save when the steps since the last periodic one reach the interval in force) and
  // compares with the saves the run made.
  std::vector<int> want, got;
  int every = 0, last = 0;
  for (int step = 1; step <= c.steps; step++) {
    if (every_from.count(step)) every = every_from[step];
    if (every > 0 && step - last >= every) {
      want.push_back(step);
      last = step;
    }
  }
  for (const auto& r : Rows(c.run_dir, "checkpoint"))
    if (r["tier"] == "fast" && r["kind"] == "periodic") got.push_back(r["step"].get<int>());
  EXPECT_EQ(got, want);
  EXPECT_GE(got.size(), 5u) << "at most 6 steps apart over 30 steps";
  // The last step is saved too (periodic or final), as with a fixed interval.
  EXPECT_TRUE(fs::exists(c.run_dir + "/checkpoints/step_00000030/manifest.json"));
  fs::remove_all(c.run_dir);
}

}  // namespace
}  // namespace tern
