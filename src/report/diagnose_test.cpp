// Every diagnosis rule fires on a synthetic run that has its condition and stays silent on a healthy one; the
// run directory reader (metrics.jsonl through the typed writer and reader, RUN_DIR/ledger.sqlite) feeds them.
#include "report/diagnose.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "plan/defaults.h"
#include "plan/workload.h"
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

// data.dir on S3: three attempts each fetched 2 GB for 2 s of 4 s of training (steps 0.1 s x 40): the copy
// did not outlive the machines; one attempt's 0.1 s fetch is not worth a finding.
TEST(Diagnose, DataFetchedByEveryAttempt) {
  RunInput in = Healthy();
  in.attempts_started = 3;
  in.data_fetch_attempts = 3;
  in.data_fetch_s = 2;
  in.data_fetch_bytes = 2'000'000'000;
  auto f = DataFetchRule(in, DiagnoseOptions{});
  ASSERT_TRUE(f);
  EXPECT_NE(f->evidence.find("3 of 3 attempt(s)"), std::string::npos) << f->evidence;
  EXPECT_NE(f->evidence.find("1000.0 MB/s"), std::string::npos) << f->evidence;
  EXPECT_NE(f->evidence.find("33.3%"), std::string::npos) << f->evidence;  // 2 of 2 + 4 s
  EXPECT_NEAR(f->usd_spent, 4.0 * 2 / 3600, 1e-12);
  EXPECT_NE(f->fix.find("data.cache_dir"), std::string::npos) << f->fix;
  EXPECT_EQ(Rules(in), std::vector<std::string>{"data_fetch"});
  in.data_fetch_attempts = 1;
  EXPECT_NE(DataFetchRule(in, DiagnoseOptions{})->fix.find("network"), std::string::npos);
  in.data_fetch_s = 0.1;
  EXPECT_FALSE(DataFetchRule(in, DiagnoseOptions{})) << "2.4% of the time";
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

// data.mix: the replayed dataset's val loss falls to its best at step 20, then climbs 10% while data.dir's
// keeps falling; a climb under the threshold, or a dataset only improving, is no finding.
TEST(Diagnose, ForgettingAMixedInDataset) {
  RunInput in = Healthy();
  in.evals = {{10, 4.0, 50, std::nullopt, std::nullopt, {{"data/web", 3.0}, {"data/code", 2.0}}},
              {20, 3.8, 50, std::nullopt, std::nullopt, {{"data/web", 2.9}, {"data/code", 1.9}}},
              {40, 3.5, 50, std::nullopt, std::nullopt, {{"data/web", 3.19}, {"data/code", 1.8}}}};
  EXPECT_EQ(Rules(in), std::vector<std::string>{"forgetting"});
  auto f = ForgettingRule(in, DiagnoseOptions{});
  ASSERT_TRUE(f);
  EXPECT_EQ(f->numbers["dataset"], "data/web");
  EXPECT_EQ(f->numbers["best_step"], 20);
  EXPECT_NEAR(f->numbers["rise"].get<double>(), 0.1, 1e-9);
  EXPECT_NE(f->fix.find("data/web's share in data.mix"), std::string::npos) << f->fix;
  EXPECT_GT(f->usd_spent, 0) << "the steps since its best were paid for";
  in.evals[2].val_loss_mix[0].second = 3.0;  // +3.4%: under 5%
  EXPECT_TRUE(Rules(in).empty());
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

// GPT-2 124M, bf16, micro-batch 8 x 1024 with 8 accumulation steps on one 80 GiB H100.
RunInput Gpt2OnH100() {
  RunInput in = Healthy();
  in.start->model = "L12 H12 C768 V50257 T1024";
  in.start->device = "cuda (NVIDIA H100 80GB HBM3, sm_90, 80 GiB)";
  in.start->batch_size = 8;
  in.start->seq_len = 1024;
  in.start->grad_accum_steps = 8;
  return in;
}

// The bytes the planner's memory model gives the run above at micro-batch b (as the rule asks it).
double Gpt2Bytes(int b) {
  plan::WorkloadSpec spec;
  spec.cfg = GptConfig{12, 12, 768, 50257, 1024};
  spec.seq = 1024;
  spec.tokens = 1e9;
  spec.global_batch_tokens = 8.0 * 1024 * 8;
  spec.micro_batch = 8;
  auto w = plan::Workload::Make(spec, plan::PlanDefaults{});
  EXPECT_TRUE(w.ok());
  return w->Memory(plan::Precision::kBf16, b, false, plan::ActRecompute::kNone, 1).total();
}

TEST(Diagnose, MemoryHeadroom) {
  const double usable = (80 * 0.95 - 1.0) * 1024.0 * 1024 * 1024;  // PlanDefaults' usable fraction, reserve
  int want = 8;
  while (want * 2 <= 64 && Gpt2Bytes(want * 2) <= usable) want *= 2;
  ASSERT_GE(want, 16) << "the memory model no longer leaves headroom here: pick another shape";
  RunInput in = Gpt2OnH100();
  auto f = MemoryHeadroomRule(in, DiagnoseOptions{});
  ASSERT_TRUE(f);
  EXPECT_EQ(f->numbers["fits_batch_size"], want);
  EXPECT_EQ(f->numbers["new_grad_accum_steps"], 64 / want);  // total_batch_tokens stays: 8 x 8 = 64 sequences
  EXPECT_NE(f->fix.find("--set train.batch_size=" + std::to_string(want)), std::string::npos) << f->fix;
  EXPECT_NE(f->fix.find("total_batch_tokens"), std::string::npos);
  EXPECT_EQ(Rules(in), std::vector<std::string>{"memory_headroom"}) << f->evidence;
  // Silent: a 16 GiB device where 2x does not fit; no accumulation to trade; a CPU run; a start row without
  // the shape (the healthy run's).
  in.start->device = "cuda (Tesla T4, sm_75, 16 GiB)";
  ASSERT_GT(Gpt2Bytes(16), (16 * 0.95 - 1.0) * 1024.0 * 1024 * 1024);
  EXPECT_FALSE(MemoryHeadroomRule(in, DiagnoseOptions{}));
  in = Gpt2OnH100();
  in.start->grad_accum_steps = 1;
  EXPECT_FALSE(MemoryHeadroomRule(in, DiagnoseOptions{}));
  in = Gpt2OnH100();
  in.start->device = "cpu";
  EXPECT_FALSE(MemoryHeadroomRule(in, DiagnoseOptions{}));
  EXPECT_FALSE(MemoryHeadroomRule(Healthy(), DiagnoseOptions{}));
}

InstanceOption Offer(const std::string& key, const std::string& billing, const std::string& gpu, int gpus,
                     double mem, double bf16, double price) {
  InstanceOption o;
  o.key = key;
  o.billing = billing;
  o.gpu = gpu;
  o.gpus = gpus;
  o.gpu_mem_gib = mem;
  o.bf16_tflops = bf16;
  o.fp32_tflops = bf16 / 16;
  o.price_per_hour = price;
  return o;
}

// 10,000 tokens/s on 8 A100s at $32/h; the catalog has 8 H100s at $60/h, and offers the rule must pass over:
// a spot price (another billing), 4 GPUs (another layout), T4s without bf16, 16 GiB GPUs (too small).
RunInput OnA100() {
  RunInput in = Healthy();
  for (auto& s : in.steps) s.tokens_per_s = 10000;
  in.instance = Offer("aws:us-east-1:p4d.24xlarge:on-demand", "on-demand", "A100", 8, 40, 312, 32);
  in.offers = {*in.instance,
               Offer("x:r:h100x8:on-demand", "on-demand", "H100", 8, 80, 989, 60),
               Offer("x:r:h100x8:spot", "spot", "H100", 8, 80, 989, 20),
               Offer("x:r:h100x4:on-demand", "on-demand", "H100", 4, 80, 989, 10),
               Offer("x:r:t4x8:on-demand", "on-demand", "T4", 8, 16, 0, 1),
               Offer("x:r:small:on-demand", "on-demand", "L4", 8, 16, 900, 5)};
  return in;
}

TEST(Diagnose, CheaperInstance) {
  RunInput in = OnA100();
  auto f = CheaperInstanceRule(in, DiagnoseOptions{});
  ASSERT_TRUE(f);
  EXPECT_EQ(f->numbers["cheaper"], "x:r:h100x8:on-demand");
  const double tps = 10000.0 * 989 / 312;  // the measured MFU carried over to the H100's peak
  EXPECT_NEAR(f->numbers["cheaper_tokens_per_s"].get<double>(), tps, 1e-6);
  EXPECT_NEAR(f->numbers["usd_per_mtok"].get<double>(), 32 / (10000 * 3600.0) * 1e6, 1e-9);  // $0.8889
  EXPECT_NEAR(f->numbers["cheaper_usd_per_mtok"].get<double>(), 60 / (tps * 3600) * 1e6, 1e-9);
  EXPECT_NEAR(f->usd_per_hour, 32 - 60 * 10000 / tps, 1e-9);  // $13.07 saved per hour of this run's work
  EXPECT_NE(f->fix.find("--instance x:r:h100x8:on-demand"), std::string::npos) << f->fix;
  EXPECT_EQ(Rules(in), std::vector<std::string>{"cheaper_instance"});
  // Silent: only 1.4% cheaper (under the 10% threshold); no known instance; the healthy run.
  in.offers[1].price_per_hour = 100;
  EXPECT_FALSE(CheaperInstanceRule(in, DiagnoseOptions{}));
  in = OnA100();
  in.instance.reset();
  EXPECT_FALSE(CheaperInstanceRule(in, DiagnoseOptions{}));
  EXPECT_FALSE(CheaperInstanceRule(Healthy(), DiagnoseOptions{}));
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
                        "divergence", "preemption_loss", "forgetting", "5%", "2%", "10%", "80%"})
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
    job.instance = "aws:us-east-1:p4d.24xlarge:on-demand";
    job.price_per_hour = 21.5;
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
  // The job's instance, completed from the shipped catalog (data/catalog); the price is the ledger's.
  ASSERT_TRUE(in->instance.has_value());
  EXPECT_EQ(in->instance->gpu, "A100");
  EXPECT_EQ(in->instance->gpus, 8);
  EXPECT_EQ(in->instance->price_per_hour, 21.5);
  EXPECT_GT(in->instance->bf16_tflops, 0);
  EXPECT_GT(in->offers.size(), 10u);
  EXPECT_EQ(Rules(*in), (std::vector<std::string>{"data_bound", "preemption_loss"}));  // $1.20/h, then $0.50
}

// A resumed run repeats the steps after its last checkpoint: the rules read the stitched steps (the later
// attempt's rows), not both copies.
TEST_F(RunDirTest, ResumedRunIsReadStitched) {
  RunInput h = Healthy();
  {
    std::ofstream out(dir_ / "metrics.jsonl");
    out << ToJson(RunRecord(*h.start)).dump() << "\n";
    for (int i = 0; i < 30; ++i) {  // attempt 1: steps 1..30, 30 ms data wait each; preempted after step 30
      StepRecord s = h.steps[i];
      s.data_wait_ms = 30;
      out << ToJson(RunRecord(s)).dump() << "\n";
    }
    StartRecord second = *h.start;  // attempt 2 fetched data.dir from S3; attempt 1 found it cached
    second.data_fetch_s = 1.5;
    second.data_fetch_bytes = 3'000'000;
    out << ToJson(RunRecord(second)).dump() << "\n";
    EventRecord resume;
    resume.event = "resume";
    resume.step = 20;
    resume.fields = {{"event", "resume"}, {"step", 20}};
    out << ToJson(RunRecord(resume)).dump() << "\n";
    for (int i = 20; i < 40; ++i) out << ToJson(RunRecord(h.steps[i])).dump() << "\n";  // 21..40, 1 ms
  }
  auto in = LoadRunInput(dir_.string(), "");
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  ASSERT_EQ(in->steps.size(), 40u);  // not 50
  for (size_t i = 0; i < in->steps.size(); ++i) EXPECT_EQ(in->steps[i].step, static_cast<int>(i) + 1);
  EXPECT_EQ(in->steps[25].data_wait_ms, 1);  // step 26: the second attempt's row
  auto f = DataBoundRule(*in, DiagnoseOptions{});
  ASSERT_TRUE(f);
  // Steps 2..20 at 30 ms and 21..40 at 1 ms (the first row is start-up): 590 of 3900 ms. Read as written
  // (steps 21..30 twice) it would be 890 of 4900 ms.
  EXPECT_NEAR(f->step_fraction, 590.0 / 3900, 1e-9);
  EXPECT_EQ(in->attempts_started, 2);  // every attempt's start row is read for the data fetch
  EXPECT_EQ(in->data_fetch_attempts, 1);
  EXPECT_EQ(in->data_fetch_s, 1.5);
  EXPECT_EQ(in->data_fetch_bytes, 3'000'000);
}

TEST_F(RunDirTest, MissingMetricsSaysWhatToDo) {
  auto in = LoadRunInput(dir_.string(), "");
  ASSERT_FALSE(in.ok());
  EXPECT_NE(in.status().message().find("metrics.jsonl"), std::string::npos);
  EXPECT_NE(in.status().message().find("tern train"), std::string::npos);
}

}  // namespace
}  // namespace tern::report
