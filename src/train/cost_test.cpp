// The cost fields of a training run priced by the hour (run.price_per_hour): each metrics.jsonl step row
// has cost_usd = elapsed hours x price and usd_per_mtok = the step's cost / its tokens x 1e6 (the price at
// that step's throughput); summary.json has cost_usd = wall hours x price. Without a price the fields are
// absent. A tiny run on the shared small corpus.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "testing/prepared_data.h"
#include "train/trainer.h"

namespace tern {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class CostTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("tern_cost_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    data_ = testing::SharedSmallPreparedData();
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }
  void SetUp() override { ASSERT_FALSE(data_.empty()) << "preparing the small corpus failed"; }

  static TrainConfig Config(const std::string& name, double price) {
    TrainConfig c;
    c.model = {2, 2, 32, 0, 32};
    c.data_dir = data_;
    c.batch_size = 4;
    c.seq_len = 32;
    c.total_batch_tokens = 128;
    c.steps = 6;
    c.warmup_steps = 0;
    c.eval_every = 3;  // time that is not a step: elapsed runs ahead of the steps' own time
    c.eval_batches = 2;
    c.num_samples = 0;
    c.peak_gflops = 100;
    c.price_per_hour = price;
    c.run_dir = (root_ / name).string();
    return c;
  }

  static std::vector<json> StepRows(const std::string& run_dir) {
    std::vector<json> out;
    std::ifstream in(run_dir + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      json j = json::parse(line);
      if (!j.contains("event") && j.contains("loss")) out.push_back(j);
    }
    return out;
  }

  static fs::path root_;
  static std::string data_;
};
fs::path CostTest::root_;
std::string CostTest::data_;

TEST_F(CostTest, CostIsElapsedHoursTimesPriceAndPerTokenFromTheStep) {
  const double price = 36.0;  // $/h: one cent a second
  TrainerEnv env;
  env.handle_signals = false;
  auto t = Trainer::Create(Config("priced", price), true, env);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const auto t0 = std::chrono::steady_clock::now();
  auto sum = (*t)->Run();
  const double measured_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();

  const std::vector<json> rows = StepRows(sum->run_dir);
  ASSERT_EQ(rows.size(), 6u);
  uint64_t tokens_before = 0;
  double steps_s = 0, last_cost = 0;
  for (const json& r : rows) {
    SCOPED_TRACE(r.dump());
    ASSERT_TRUE(r.contains("cost_usd") && r.contains("usd_per_mtok"));
    const double elapsed_s = r["elapsed_s"].get<double>(), cost = r["cost_usd"].get<double>();
    EXPECT_NEAR(cost, elapsed_s / 3600 * price, 1e-12 * price);
    EXPECT_GE(cost, last_cost) << "the cost only grows";
    last_cost = cost;
    // The step's own cost over the step's own tokens, from the row's step_ms and its token count.
    const uint64_t tokens = r["tokens"].get<uint64_t>();
    const double step_tokens = static_cast<double>(tokens - tokens_before);
    EXPECT_EQ(step_tokens, 128.0);
    tokens_before = tokens;
    const double step_s = r["step_ms"].get<double>() / 1e3;
    steps_s += step_s;
    const double want = step_s / 3600 * price / step_tokens * 1e6;
    EXPECT_NEAR(r["usd_per_mtok"].get<double>(), want, 1e-9 * want);
    // elapsed covers this and every earlier step (and the eval between them), within the run's wall time.
    EXPECT_GE(elapsed_s, steps_s * (1 - 1e-9));
    EXPECT_LE(elapsed_s, measured_s);
  }

  // summary.json (and the end row of metrics.jsonl): the whole run's wall time, priced.
  std::ifstream in(fs::path(sum->run_dir) / "summary.json");
  const json summary = json::parse(in, nullptr, false);
  ASSERT_TRUE(summary.is_object());
  const double wall_s = summary["wall_s"].get<double>();
  EXPECT_NEAR(summary["cost_usd"].get<double>(), wall_s / 3600 * price, 1e-12 * price);
  EXPECT_NEAR(sum->cost_usd, summary["cost_usd"].get<double>(), 1e-12 * price);
  EXPECT_GE(summary["cost_usd"].get<double>(), last_cost);
  EXPECT_LE(wall_s, measured_s);
}

// Under `tern run` the cost is the job's: what earlier attempts cost (run.cost_offset_usd) plus this attempt
// from its launch (run.billing_start_unix), so its start-up is billed too.
TEST_F(CostTest, TheJobsEarlierSpendAndThisAttemptsStartUpAreBilled) {
  const double price = 36.0;
  TrainConfig c = Config("job", price);
  c.cost_offset_usd = 1.25;
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  c.billing_start_unix = now - 100;  // launched 100 s ago
  TrainerEnv env;
  env.handle_signals = false;
  auto t = Trainer::Create(c, true, env);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const auto t0 = std::chrono::steady_clock::now();
  auto sum = (*t)->Run();
  const double measured_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();
  for (const json& r : StepRows(sum->run_dir)) {
    SCOPED_TRACE(r.dump());
    const double elapsed_s = r["elapsed_s"].get<double>(), cost = r["cost_usd"].get<double>();
    // 100 s before Run began, plus the time Create took (at most the whole test so far).
    EXPECT_GE(cost, 1.25 + (100 + elapsed_s) / 3600 * price - 1e-9);
    EXPECT_LE(cost, 1.25 + (100 + measured_s + 60) / 3600 * price);
  }
  EXPECT_GE(sum->cost_usd, 1.25 + (100 + sum->wall_s) / 3600 * price - 1e-9);
}

TEST_F(CostTest, NoPriceNoCostFields) {
  TrainerEnv env;
  env.handle_signals = false;
  TrainConfig c = Config("unpriced", 0);
  c.steps = 2;
  c.eval_every = 0;
  auto t = Trainer::Create(c, true, env);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto sum = (*t)->Run();
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();
  const std::vector<json> rows = StepRows(sum->run_dir);
  ASSERT_EQ(rows.size(), 2u);
  for (const json& r : rows) {
    EXPECT_FALSE(r.contains("cost_usd")) << r.dump();
    EXPECT_FALSE(r.contains("usd_per_mtok")) << r.dump();
  }
  EXPECT_EQ(sum->cost_usd, 0);
}

}  // namespace
}  // namespace tern
