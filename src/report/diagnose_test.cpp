// Every diagnosis rule fires on a synthetic run that has its condition and stays silent on a healthy one; the
// run directory reader (metrics.jsonl through the typed writer and reader, RUN_DIR/ledger.sqlite) feeds them.
#include "report/diagnose.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "report/run_input.h"
#include "run/ledger.h"

namespace tern::report {
namespace {

namespace fs = std::filesystem;

// 40 steps of a healthy GPU run at $4/h: 1% data wait, no communication, 95% utilisation, a smoothly falling
// loss, one quick checkpoint, MFU at the bench's, no work lost.
RunInput Healthy() {
  RunInput in;
  in.run_dir = "runs/healthy";
  StartRecord s;
  s.model = "gpt-tiny";
  s.device = "cuda";
  s.precision = "bf16";
  s.price_per_hour = 4;
  s.batch_size = 8;
  s.seq_len = 64;
  in.start = s;
  for (int i = 1; i <= 40; ++i) {
    StepRecord r;
    r.step = i;
    r.loss = 5.0 - 0.05 * i;
    r.step_ms = 100;
    r.data_wait_ms = 1;
    r.mfu = 0.5;
    r.elapsed_s = 0.1 * i;
    r.gpu = GpuRecord{95, 10, 300, 0.1};
    r.cost_usd = 4.0 * 0.1 * i / 3600;
    in.steps.push_back(r);
  }
  EventRecord ck;
  ck.event = "checkpoint";
  ck.step = 20;
  ck.fields = {{"event", "checkpoint"}, {"step", 20}, {"stall_ms", 1.0}};
  in.events.push_back(ck);
  in.attempts.push_back({1, "done", 0, 0, 0, 0.01});
  in.calibration = MfuCalibration{"bench.json", "cuda", "bf16", 8, 64, 0.55};
  return in;
}

std::vector<std::string> Rules(const RunInput& in) {
  std::vector<std::string> out;
  for (const auto& f : Diagnose(in, DiagnoseOptions{})) out.push_back(f.rule);
  return out;
}

TEST(Diagnose, HealthyRunHasNoFindings) {
  EXPECT_TRUE(Rules(Healthy()).empty());
}

TEST(Diagnose, DataBound) {
  RunInput in = Healthy();
  for (auto& s : in.steps) s.data_wait_ms = 20;  // 20% of 100 ms
  auto f = DataBoundRule(in, DiagnoseOptions{});
  ASSERT_TRUE(f);
  EXPECT_NEAR(f->step_fraction, 0.2, 1e-9);
  EXPECT_NEAR(f->usd_per_hour, 0.8, 1e-9);  // 20% of $4/h
  EXPECT_NE(f->evidence.find("20.0%"), std::string::npos) << f->evidence;
  EXPECT_EQ(Rules(in), std::vector<std::string>{"data_bound"});
}

TEST(Diagnose, CheckpointStall) {
  RunInput in = Healthy();
  in.events[0].fields["stall_ms"] = 200.0;  // 0.2 s of a 4 s run: 5%
  auto f = CheckpointStallRule(in, DiagnoseOptions{});
  ASSERT_TRUE(f);
  EXPECT_NEAR(f->step_fraction, 0.05, 1e-9);
  EXPECT_NE(f->fix.find("ckpt.async"), std::string::npos);
  EXPECT_EQ(Rules(in), std::vector<std::string>{"checkpoint_stall"});
}

TEST(Diagnose, ExposedCommunication) {
  RunInput in = Healthy();
  in.start->world = 2;
  for (auto& s : in.steps) s.comm_ms = 30;
  auto f = ExposedCommRule(in, DiagnoseOptions{});
  ASSERT_TRUE(f);
  EXPECT_NEAR(f->step_fraction, 0.3, 1e-9);
  EXPECT_EQ(Rules(in), std::vector<std::string>{"exposed_comm"});
}

TEST(Diagnose, LowMfuAgainstTheCalibrationOnly) {
  RunInput in = Healthy();
  for (auto& s : in.steps) s.mfu = 0.25;  // half the bench's 0.55 (< 80%)
  auto f = LowMfuRule(in, DiagnoseOptions{});
  ASSERT_TRUE(f);
  EXPECT_NEAR(f->step_fraction, 1 - 0.25 / 0.55, 1e-9);
  EXPECT_EQ(Rules(in), std::vector<std::string>{"low_mfu"});
  in.calibration->precision = "fp32";  // another precision: nothing to compare with
  EXPECT_FALSE(LowMfuRule(in, DiagnoseOptions{}));
  in.calibration.reset();  // no calibration: says nothing
  EXPECT_FALSE(LowMfuRule(in, DiagnoseOptions{}));
}

TEST(Diagnose, GpuIdle) {
  RunInput in = Healthy();
  for (auto& s : in.steps) s.gpu->util_pct = 60;
  auto f = GpuIdleRule(in, DiagnoseOptions{});
  ASSERT_TRUE(f);
  EXPECT_NEAR(f->step_fraction, 0.4, 1e-9);
  EXPECT_EQ(Rules(in), std::vector<std::string>{"gpu_idle"});
  for (auto& s : in.steps) s.gpu.reset();  // a CPU run: no GPU fields, no finding
  EXPECT_FALSE(GpuIdleRule(in, DiagnoseOptions{}));
}

TEST(Diagnose, LossSpike) {
  RunInput in = Healthy();
  in.steps[30].loss = 20;  // > 3x the median of the 20 before
  EXPECT_EQ(Rules(in), std::vector<std::string>{"loss_spike"});
  auto f = LossRules(in, DiagnoseOptions{});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].numbers["worst_step"], 31);
}

TEST(Diagnose, DivergenceNonFinite) {
  RunInput in = Healthy();
  in.steps[35].loss = std::numeric_limits<double>::quiet_NaN();
  auto f = LossRules(in, DiagnoseOptions{});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].rule, "divergence");
  EXPECT_GT(f[0].usd_spent, 0);  // the steps after it were paid for
}

TEST(Diagnose, DivergenceRising) {
  RunInput in = Healthy();
  for (int i = 20; i < 40; ++i) in.steps[i].loss = 4.0 + 0.1 * (i - 19);  // rises after step 20: 1.13x
  EXPECT_EQ(Rules(in), std::vector<std::string>{"divergence"});
}

TEST(Diagnose, PreemptionLoss) {
  RunInput in = Healthy();
  in.attempts = {{1, "preempted", 0, 0, 0, 1.0}, {2, "done", 120, 600, 0.66, 2.0}};
  auto f = PreemptionLossRule(in, DiagnoseOptions{});
  ASSERT_TRUE(f);
  EXPECT_DOUBLE_EQ(f->usd_spent, 0.66);
  EXPECT_EQ(f->numbers["lost_steps"], 120);
  EXPECT_EQ(Rules(in), std::vector<std::string>{"preemption_loss"});
}

TEST(Diagnose, RankedByDollars) {
  RunInput in = Healthy();
  for (auto& s : in.steps) {
    s.data_wait_ms = 8;  // 8%: $0.32/h
    s.comm_ms = 40;      // 40%: $1.60/h
  }
  EXPECT_EQ(Rules(in), (std::vector<std::string>{"exposed_comm", "data_bound"}));
  auto j = ToJson(Diagnose(in, DiagnoseOptions{})[0]);
  EXPECT_EQ(j["rule"], "exposed_comm");
  EXPECT_NEAR(j["usd_per_hour"].get<double>(), 1.6, 1e-9);
}

TEST(Diagnose, HelpListsEveryRule) {
  std::string h = RulesHelp(DiagnoseOptions{});
  for (const char* r : {"data_bound", "checkpoint_stall", "exposed_comm", "low_mfu", "gpu_idle", "loss_spike",
                        "divergence", "preemption_loss", "5%", "2%", "10%", "80%"})
    EXPECT_NE(h.find(r), std::string::npos) << r;
}

class RunDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tern_diagnose_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(RunDirTest, ReadsMetricsAndLedger) {
  RunInput h = Healthy();
  {
    std::ofstream out(dir_ / "metrics.jsonl");
    out << ToJson(RunRecord(*h.start)).dump() << "\n";
    for (auto s : h.steps) {
      s.data_wait_ms = 30;
      out << ToJson(RunRecord(s)).dump() << "\n";
    }
    out << ToJson(RunRecord(h.events[0])).dump() << "\n";
  }
  {
    auto ledger = run::Ledger::Open(run::RunDirLedgerPath(dir_.string()));
    ASSERT_TRUE(ledger.ok()) << ledger.status().ToString();
    run::JobRow job;
    job.job_id = "j1";
    job.run_dir = fs::absolute(dir_).lexically_normal().string();
    ASSERT_TRUE((*ledger)->PutJob(job).ok());
    run::AttemptRow a;
    a.job_id = "j1";
    a.attempt = 2;
    a.reason = "done";
    a.lost_steps = 7;
    a.lost_usd = 0.5;
    ASSERT_TRUE((*ledger)->PutAttempt(a).ok());
  }
  auto in = LoadRunInput(dir_.string(), "");
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  EXPECT_EQ(in->steps.size(), 40u);
  ASSERT_EQ(in->events.size(), 1u);
  ASSERT_EQ(in->attempts.size(), 1u);
  EXPECT_EQ(Rules(*in), (std::vector<std::string>{"data_bound", "preemption_loss"}));  // $1.20/h, then $0.50
}

TEST_F(RunDirTest, MissingMetricsSaysWhatToDo) {
  auto in = LoadRunInput(dir_.string(), "");
  ASSERT_FALSE(in.ok());
  EXPECT_NE(in.status().message().find("metrics.jsonl"), std::string::npos);
  EXPECT_NE(in.status().message().find("tern train"), std::string::npos);
}

}  // namespace
}  // namespace tern::report
