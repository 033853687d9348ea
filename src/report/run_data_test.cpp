// The report's numbers on synthetic rows: stitching a resumed run, the min/max envelope, $ to reach a
// validation loss, the A/B ratios and the config diff.
#include "report/run_data.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tern::report {
namespace {

RunRow Start(const std::string& precision = "fp32") {
  StartRecord s;
  s.model = "L2 H2 C32";
  s.precision = precision;
  s.price_per_hour = 3.6;
  return {kRunRecordVersion, s};
}
// A step of 1 s at $0.001 per s (the process's own clock and bill: both restart with an attempt).
RunRow Step(int step, double elapsed, double loss) {
  StepRecord r;
  r.step = step;
  r.loss = loss;
  r.tokens = static_cast<uint64_t>(step) * 100;
  r.step_ms = 1000;
  r.elapsed_s = elapsed;
  r.cost_usd = elapsed * 0.001;
  return {kRunRecordVersion, r};
}
RunRow Eval(int step, double val) {
  return {kRunRecordVersion, EvalRecord{step, val, 1, {}, {}}};
}
RunRow Event(const std::string& name, int step) {
  EventRecord e;
  e.event = name;
  e.step = step;
  e.fields = {{"event", name}, {"step", step}, {"stall_ms", 5.0}};
  return {kRunRecordVersion, e};
}

// Attempt 1: steps 1..10, a checkpoint at 6, preempted; attempt 2 resumes at 6 and redoes 7..10, to 15.
std::vector<RunRow> ResumedRows() {
  std::vector<RunRow> rows = {Start()};
  for (int s = 1; s <= 10; ++s) {
    rows.push_back(Step(s, s, 10.0 - s * 0.1));
    if (s == 6) rows.push_back(Event("checkpoint", 6));
    if (s % 5 == 0) rows.push_back(Eval(s, 9.0 - s * 0.1));
  }
  rows.push_back(Event("preempted", 10));
  rows.push_back(Start());
  rows.push_back(Event("resume", 6));
  for (int s = 7; s <= 15; ++s) {
    rows.push_back(Step(s, s - 6, 10.0 - s * 0.1 - 0.01));  // the clock restarted: elapsed 1..9
    if (s % 5 == 0) rows.push_back(Eval(s, 9.0 - s * 0.1 - 0.01));
  }
  return rows;
}

TEST(StitchTest, ResumedRunIsOneMonotoneCurveWithTheRedoneStepsCounted) {
  auto r = StitchRows(ResumedRows());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const RunData& run = r.value();
  EXPECT_EQ(run.attempts, 2);
  ASSERT_EQ(run.points.size(), 15u);
  for (size_t i = 0; i < run.points.size(); ++i) {
    EXPECT_EQ(run.points[i].step, static_cast<int>(i) + 1);
    if (i) {
      EXPECT_GT(run.points[i].t_s, run.points[i - 1].t_s) << "step " << run.points[i].step;
      EXPECT_GT(*run.points[i].usd, *run.points[i - 1].usd);
    }
  }
  // Steps 7..10 were redone: the later attempt's rows are kept.
  EXPECT_DOUBLE_EQ(run.points[7].row.loss, 10.0 - 8 * 0.1 - 0.01);
  EXPECT_EQ(run.points[9].attempt, 1);
  EXPECT_EQ(run.lost_steps, 4);
  EXPECT_DOUBLE_EQ(run.lost_s, 4);
  ASSERT_EQ(run.lost.size(), 1u);
  EXPECT_EQ(run.lost[0].from_step, 6);
  EXPECT_EQ(run.lost[0].to_step, 10);
  EXPECT_DOUBLE_EQ(run.lost[0].t0_s, 6);
  EXPECT_DOUBLE_EQ(run.lost[0].t1_s, 10);
  // Attempt 2 continues the clock where attempt 1 stopped (10 s): its step 7 (elapsed 1) is at 11 s.
  EXPECT_DOUBLE_EQ(run.points[6].t_s, 11);
  EXPECT_DOUBLE_EQ(run.points.back().t_s, 19);
  EXPECT_NEAR(*run.points.back().usd, 0.019, 1e-12);
  // The eval at step 10 is attempt 2's.
  ASSERT_EQ(run.evals.size(), 3u);
  EXPECT_DOUBLE_EQ(run.evals[1].val_loss, 9.0 - 1.0 - 0.01);
  EXPECT_DOUBLE_EQ(run.evals[1].t_s, 14);
  int checkpoints = 0, preempted = 0, resumes = 0;
  for (const auto& m : run.marks) {
    checkpoints += m.kind == "checkpoint";
    preempted += m.kind == "preempted";
    resumes += m.kind == "resume";
  }
  EXPECT_EQ(checkpoints, 1);
  EXPECT_EQ(preempted, 1);
  EXPECT_EQ(resumes, 1);
  EXPECT_DOUBLE_EQ(run.points[5].ckpt_stall_ms, 5);
  const RunSummary s = Summarize(run);
  EXPECT_EQ(s.steps, 15);
  EXPECT_DOUBLE_EQ(s.tokens, 1500);
  EXPECT_NEAR(*s.usd_per_mtok, 0.019 / 1500 * 1e6, 1e-9);
}

RunRow Saved(int step, const std::string& tier, const std::string& location, double bytes,
             std::vector<int> removed = {}) {
  EventRecord e;
  e.event = "checkpoint";
  e.step = step;
  e.fields = {{"event", "checkpoint"}, {"step", step},         {"tier", tier},
              {"bytes", bytes},        {"location", location}, {"removed", removed}};
  return {kRunRecordVersion, e};
}

// Storage: the s3:// checkpoints still kept at the end (2 GB at steps 6 and 9; step 3's removed), for the
// run's 10 hours; the local ones are on the instance's disk. Egress: the fp32 model out. AWS rates
// (plan/defaults.h): $0.023/GB-month, $0.09/GB.
TEST(StorageEgressTest, ObjectStorageKeptAndTheModelOutAtTheProvidersRates) {
  std::vector<RunRow> rows = {Start()};
  std::get<StartRecord>(rows[0].record).params = 250'000'000;  // 1 GB of fp32 weights
  for (int s = 1; s <= 9; ++s) {
    rows.push_back(Step(s, s * 4000.0, 5.0));  // 9 steps over 36,000 s = 10 h
    if (s % 3 == 0)
      rows.push_back(Saved(s, "durable", "s3://b/run/step_" + std::to_string(s), 1e9,
                           s == 9 ? std::vector<int>{3} : std::vector<int>{}));
    rows.push_back(Saved(s, "fast", "runs/x/checkpoints/step_" + std::to_string(s), 1e9));
  }
  auto r = StitchRows(rows);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->object_store.kept, 2);
  EXPECT_EQ(r->object_store.bytes, 2'000'000'000u);
  RunSummary s = Summarize(*r);
  EXPECT_EQ(s.provider, "aws");  // no instance: s3:// is AWS's
  ASSERT_TRUE(s.storage_usd && s.egress_usd);
  EXPECT_NEAR(*s.storage_usd, 2.0 * (10.0 / 730) * 0.023, 1e-12);
  EXPECT_NEAR(*s.egress_usd, 1.0 * 0.09, 1e-12);
  EXPECT_NEAR(s.model_gb, 1.0, 1e-12);

  r->instance = "gcp:us-central1:a2-highgpu-1g:spot";  // the instance's provider wins
  s = Summarize(*r);
  EXPECT_EQ(s.provider, "gcp");
  EXPECT_NEAR(*s.egress_usd, 0.12, 1e-12);

  r->instance.clear();  // local checkpoints only and no instance: nothing to price
  r->object_store = {};
  s = Summarize(*r);
  EXPECT_FALSE(s.storage_usd || s.egress_usd);
  EXPECT_EQ(ReportJson({*r}, false)["runs"][0]["summary"]["egress_usd"], nullptr);
}

TEST(StitchTest, RowsWithoutStartOrStepsAreRefused) {
  EXPECT_FALSE(StitchRows({Eval(1, 3.0)}).ok());
}

TEST(EnvelopeTest, KeepsTheExtremesInBoundedSize) {
  std::vector<double> v(100000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<double>(i) * 0.001) + 1e-6 * (i % 7);
  v[31337] = 50;   // a spike
  v[77777] = -50;  // a dip
  const auto idx = EnvelopeIndices(v, kBuckets);
  EXPECT_LE(idx.size(), 2 * kBuckets);
  EXPECT_GE(idx.size(), kBuckets);
  EXPECT_NE(std::find(idx.begin(), idx.end(), 31337u), idx.end());
  EXPECT_NE(std::find(idx.begin(), idx.end(), 77777u), idx.end());
  EXPECT_TRUE(std::is_sorted(idx.begin(), idx.end()));
  // Every bucket's min and max are kept: the envelope's extremes are the series'.
  double lo = 1e9, hi = -1e9;
  for (size_t i : idx) lo = std::min(lo, v[i]), hi = std::max(hi, v[i]);
  EXPECT_EQ(lo, -50);
  EXPECT_EQ(hi, 50);
  // A short series is kept whole; NaN (a skipped fp16 step's grad norm) is left out.
  std::vector<double> shortv = {1, NAN, 3};
  EXPECT_EQ(EnvelopeIndices(shortv, kBuckets), (std::vector<size_t>{0, 2}));
}

RunData MakeRun(const std::string& name, const std::string& precision, double usd_per_s, double loss_drop) {
  std::vector<RunRow> rows = {Start(precision)};
  for (int s = 1; s <= 10; ++s) {
    RunRow st = Step(s, s, 5 - s * loss_drop);
    std::get<StepRecord>(st.record).cost_usd = s * usd_per_s;
    rows.push_back(st);
    rows.push_back(Eval(s, 5 - s * loss_drop));
  }
  auto r = StitchRows(rows);
  EXPECT_TRUE(r.ok());
  RunData run = std::move(r).value();
  run.name = name;
  return run;
}

TEST(ReachTest, DollarsToReachAValidationLoss) {
  const RunData a = MakeRun("A", "fp32", 0.01, 0.1);  // val 4.9 .. 4.0
  // One run: its final val loss (4.0) rounded up.
  ASSERT_TRUE(ReachTarget({a}).has_value());
  EXPECT_DOUBLE_EQ(*ReachTarget({a}), 4.0);
  auto e = FirstReach(a, 4.5);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->step, 5);
  EXPECT_NEAR(*e->usd, 0.05, 1e-12);
  EXPECT_FALSE(FirstReach(a, 3.9).has_value());
  // Several: the best val loss all of them reach (B only gets to 4.5), rounded up to 0.01.
  const RunData b = MakeRun("B", "bf16", 0.005, 0.05);  // val 4.95 .. 4.5
  EXPECT_DOUBLE_EQ(*ReachTarget({a, b}), 4.5);
}

TEST(CompareTest, RatiosOfTwoRuns) {
  const RunData a = MakeRun("A", "fp32", 0.01, 0.1);
  const RunData b = MakeRun("B", "bf16", 0.005, 0.05);
  // Val 4.5: A at step 5 ($0.05, 5 s), B at step 10 ($0.05, 10 s).
  Ratios r = CompareTwo(a, b, 4.5);
  ASSERT_TRUE(r.usd && r.time);
  EXPECT_NEAR(*r.usd, 1.0, 1e-12);
  EXPECT_NEAR(*r.time, 2.0, 1e-12);
  EXPECT_EQ(r.sentence, "B reaches val 4.50 in 1.00× the dollars of A (2.00× the time)");
  const RunData c = MakeRun("C", "bf16", 0.002, 0.1);
  r = CompareTwo(a, c, 4.5);
  EXPECT_NEAR(*r.usd, 0.2, 1e-12);
  EXPECT_EQ(r.sentence, "C reaches val 4.50 in 0.20× the dollars of A (1.00× the time)");
  EXPECT_EQ(CompareTwo(a, b, 4.2).sentence, "B does not reach val 4.20");
}

TEST(ConfigDiffTest, OnlyTheKeysThatDiffer) {
  RunData a = MakeRun("A", "fp32", 0.01, 0.1), b = MakeRun("B", "bf16", 0.01, 0.1);
  a.config["config.train.lr"] = b.config["config.train.lr"] = "0.003";
  a.config["config.train.precision"] = "fp32";
  b.config["config.train.precision"] = "bf16";
  b.config["config.only.in.b"] = "1";
  const auto diff = ConfigDiff({a, b});
  ASSERT_EQ(diff.count("start.precision"), 1u);
  EXPECT_EQ(diff.at("start.precision"), (std::vector<std::string>{"fp32", "bf16"}));
  EXPECT_EQ(diff.at("config.train.precision"), (std::vector<std::string>{"fp32", "bf16"}));
  EXPECT_EQ(diff.at("config.only.in.b"), (std::vector<std::string>{"", "1"}));
  EXPECT_EQ(diff.count("config.train.lr"), 0u);
  EXPECT_EQ(diff.count("start.model"), 0u);
  EXPECT_EQ(diff.size(), 3u);
}

TEST(ReportJsonTest, SeriesAreBoundedAndTheSummaryMatches) {
  std::vector<RunRow> rows = {Start()};
  for (int s = 1; s <= 20000; ++s) rows.push_back(Step(s, s, 5 + std::sin(s * 0.01)));
  auto r = StitchRows(rows);
  ASSERT_TRUE(r.ok());
  const auto j = ReportJson({r.value()}, true);
  const auto& series = j["runs"][0]["series"]["series"];
  for (const auto& [name, s] : series.items()) EXPECT_LE(s["y"].size(), 2 * kBuckets) << name;
  EXPECT_EQ(j["runs"][0]["summary"]["steps"], 20000);
  EXPECT_NEAR(j["runs"][0]["summary"]["usd"].get<double>(), 20.0, 1e-9);
}

}  // namespace
}  // namespace tern::report
