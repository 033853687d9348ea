// `tern train --metrics-port N`, end to end: a real trainer on the small corpus serves /metrics while it
// trains; a real HTTP client fetches it; `promtool check metrics` accepts the text; its values are those of
// metrics.jsonl's rows of the same step (read with the typed reader). A port in use stops the run at start
// with exit 2 and a clear message.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "metrics/run_record.h"
#include "testing/prepared_data.h"
#include "testing/processes.h"
#include "testing/skip.h"
#include "testing/tern_binary.h"
#include "testing/tiny_config.h"

namespace tern {
namespace {

namespace fs = std::filesystem;

class MetricsPortTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tern_ = testing::FindTernBinary();
    ASSERT_FALSE(tern_.empty()) << "build the tern binary first (cmake --build build --target tern)";
    data_ = testing::SharedSmallPreparedData();
    ASSERT_FALSE(data_.empty()) << "preparing the small corpus failed";
    root_ = fs::temp_directory_path() / ("tern_metrics_port_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    std::ofstream(root_ / "tiny.yaml") << testing::TinyTrainYaml(
        data_,
        {.steps = 100000, .warmup_steps = 10, .eval_every = 3, .more = "ckpt: {every: 4, keep_last: 1}\n"});
  }
  void TearDown() override { fs::remove_all(root_); }

  std::vector<std::string> Argv(const std::string& run, int port) const {
    return {tern_.string(),
            "train",
            (root_ / "tiny.yaml").string(),
            "--quiet",
            "--metrics-port",
            std::to_string(port),
            "--price-per-hour",
            "3.6",
            "--set",
            "run.dir=" + (root_ / run).string()};
  }

  fs::path tern_, root_;
  std::string data_;
};

// name -> value of the samples without labels.
std::map<std::string, double> Samples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#' || line.find('{') != std::string::npos) continue;
    const size_t sp = line.find(' ');
    out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

TEST_F(MetricsPortTest, ServesPrometheusTextThatMatchesTheRows) {
  const int port = testing::FreePort();
  testing::Child train(Argv("live", port), {{"OMP_NUM_THREADS", "1"}}, (root_ / "train.log").string());
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(2, 0);
  std::string text;
  std::map<std::string, double> m;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline && train.Running()) {
    if (auto res = client.Get("/metrics"); res && res->status == 200) {
      text = res->body;
      m = Samples(text);
      // Past a checkpoint and an evaluation.
      if (m.count("tern_step") && m["tern_step"] >= 9 && m.count("tern_val_loss")) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(m.count("tern_step") && m["tern_step"] >= 9)
      << "no step 9 served; last text:\n"
      << text << "\ntrain log:\n"
      << testing::RunCommand("cat " + (root_ / "train.log").string()).output;
  train.Signal(SIGKILL);
  train.Wait();

  // The rows up to and including the served step, in the order written (the order the server saw them).
  auto rows = ReadMetricsFile((root_ / "live/metrics.jsonl").string());
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  const int step = static_cast<int>(m["tern_step"]);
  const StepRecord* row = nullptr;
  const EvalRecord* eval = nullptr;
  double wait_s = 0, stall_before = 0, stall_after = 0;
  bool past = false;
  for (const RunRow& r : *rows) {
    if (const auto* s = std::get_if<StepRecord>(&r.record)) {
      if (s->step > step) break;
      wait_s += s->data_wait_ms / 1e3;
      if (s->step == step) row = s, past = true;
    } else if (const auto* e = std::get_if<EvalRecord>(&r.record)) {
      if (e->step == static_cast<int>(m["tern_val_step"])) eval = e;
    } else if (const auto* c = std::get_if<EventRecord>(&r.record); c && c->event == "checkpoint") {
      const double s = (c->Number("stall_ms") + c->Number("wait_ms")) / 1e3;
      stall_after += s;
      if (!past) stall_before += s;
    }
  }
  ASSERT_TRUE(row) << "metrics.jsonl has no row of step " << step;
  EXPECT_EQ(m["tern_train_loss"], row->loss);  // the same double: both print it shortest-exact
  EXPECT_EQ(m["tern_tokens_total"], static_cast<double>(row->tokens));
  EXPECT_EQ(m["tern_tokens_per_second"], row->tokens_per_s);
  EXPECT_EQ(m["tern_mfu_ratio"], row->mfu);
  EXPECT_EQ(m["tern_learning_rate"], row->lr);
  EXPECT_EQ(m["tern_grad_norm"], row->grad_norm);
  EXPECT_EQ(m["tern_step_duration_seconds"], row->step_ms / 1e3);
  EXPECT_EQ(m["tern_step_data_wait_seconds"], row->data_wait_ms / 1e3);
  EXPECT_EQ(m["tern_step_communication_seconds"], row->comm_ms / 1e3);
  ASSERT_TRUE(row->cost_usd);
  EXPECT_EQ(m["tern_cost_usd_total"], *row->cost_usd);
  EXPECT_EQ(m["tern_cost_usd_per_million_tokens"], *row->usd_per_mtok);
  EXPECT_NEAR(m["tern_data_wait_seconds_total"], wait_s, 1e-12);
  ASSERT_TRUE(eval) << "no eval row of step " << m["tern_val_step"];
  EXPECT_EQ(m["tern_val_loss"], eval->val_loss);
  // Checkpoint rows come between steps: the served total is at least theirs before the step's row and at
  // most theirs before the next step's row.
  EXPECT_GE(m["tern_checkpoints_total"], 1);
  EXPECT_GE(m["tern_checkpoint_stall_seconds_total"], stall_before - 1e-12);
  EXPECT_LE(m["tern_checkpoint_stall_seconds_total"], stall_after + 1e-12);
  EXPECT_NE(text.find("tern_run_info{model=\"L1 H2 C32 V300 T32\",precision=\"fp32\""), std::string::npos)
      << text;

  const std::string promtool = testing::FindProgram("promtool");
  if (promtool.empty())
    TERN_SKIP_OR_FAIL_IN_CI(
        "promtool is not on PATH: install Debian's prometheus package "
        "(scripts/install-deps) to check the exposition format");
  std::ofstream(root_ / "metrics.txt") << text;
  const auto check = testing::RunCommand(promtool + " check metrics < " + (root_ / "metrics.txt").string());
  EXPECT_EQ(check.code, 0) << check.output << "\n" << text;
  EXPECT_EQ(check.output, "") << "promtool's lint found problems";
}

TEST_F(MetricsPortTest, APortInUseIsAUsageErrorAtStart) {
  httplib::Server taken;
  const int port = taken.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serving([&] { taken.listen_after_bind(); });
  testing::Child train(Argv("clash", port), {{"OMP_NUM_THREADS", "1"}}, (root_ / "clash.log").string());
  EXPECT_EQ(train.Wait(), 2);
  taken.stop();
  serving.join();
  std::ifstream log(root_ / "clash.log");
  const std::string out((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(out.find("tern train: cannot serve live metrics on 127.0.0.1:" + std::to_string(port) +
                     ": the port is in use"),
            std::string::npos)
      << out;
  EXPECT_FALSE(fs::exists(root_ / "clash/metrics.jsonl"));
}

}  // namespace
}  // namespace tern
