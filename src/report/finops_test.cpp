// The FinOps figures of `tern report --ledger` (report/finops.h) on a ledger written through the ledger API:
// several jobs, projects and days, a preemption, a crash, redone work, an attempt across midnight and one
// across the start of the window, an old job outside it. Every number is computed by hand in the comments.
#include "report/finops.h"

#include <gtest/gtest.h>

#include <fstream>

#include "metrics/run_record.h"
#include "run/ledger.h"
#include "testing/files.h"

namespace tern::report {
namespace {

constexpr double kH = 3600, kD0 = 1793577600;   // 2026-11-02T00:00:00Z
constexpr double kNow = kD0 + 86400 + 12 * kH;  // 2026-11-03T12:00Z
constexpr double kSince = kNow - 30 * 86400;    // 2026-10-04T12:00Z

run::AttemptRow Attempt(const std::string& job, int n, double start, double hours, double usd, int ranks,
                        const std::string& reason) {
  run::AttemptRow a;
  a.job_id = job;
  a.attempt = n;
  a.state = "ended";
  a.start_unix = start;
  a.end_unix = start + hours * kH;
  a.wall_s = hours * kH;
  a.productive_s = a.wall_s / 2;
  a.cost_usd = usd;
  a.ranks = ranks;
  a.reason = reason;
  a.tokens = 1000000;
  return a;
}

run::JobRow Job(const std::string& id, const std::string& project, const std::string& dir = "/nonexistent") {
  run::JobRow j;
  j.job_id = id;
  j.project = project;
  j.run_dir = dir;
  j.state = "done";
  j.instance = "aws:us-east-1:p5.48xlarge:spot";
  return j;
}

std::vector<run::JobWithAttempts> Jobs(const std::string& a_dir = "/nonexistent") {
  // A (nlp, 8 ranks): preempted after 2 h ($32), resumed for 1 h ($16) redoing 100 steps (600 s, $2).
  run::AttemptRow a2 = Attempt("A", 2, kD0 + 12 * kH, 1, 16, 8, "done");
  a2.lost_steps = 100;
  a2.lost_s = 600;
  a2.lost_usd = 2;
  // B (vision, 1 rank): crashed after 2 h across midnight ($4: $2 each day), then 1 h ($2) the next day.
  // C (no tag): 40 days ago, outside the window. D (nlp, 2 ranks): 2 h ($10) across the window's start:
  // half of it counts ($5, 2 GPU-hours), and its preemption (at the end, inside) counts.
  return {
      {Job("A", "nlp", a_dir), {Attempt("A", 1, kD0 + 10 * kH, 2, 32, 8, "preempted"), a2}},
      {Job("B", "vision"),
       {Attempt("B", 1, kD0 + 23 * kH, 2, 4, 1, "crashed"), Attempt("B", 2, kD0 + 26 * kH, 1, 2, 1, "done")}},
      {Job("C", ""), {Attempt("C", 1, kD0 - 40 * 86400, 5, 100, 4, "done")}},
      {Job("D", "nlp"), {Attempt("D", 1, kSince - kH, 2, 10, 2, "preempted")}}};
}

TEST(FinOpsTest, HandComputedFiguresOverTheWindow) {
  const FinOps f = ComputeFinOps(Jobs(), kSince, kNow, {{"A", 90}});
  EXPECT_NEAR(f.usd, 48 + 6 + 5, 1e-9);
  EXPECT_NEAR(f.gpu_hours, 3 * 8 + 3 * 1 + 0.5 * 2 * 2, 1e-9);  // 29
  EXPECT_NEAR(f.wall_hours, 3 + 3 + 1, 1e-9);
  EXPECT_NEAR(f.productive_hours, 3.5, 1e-9);
  EXPECT_EQ(f.jobs, 3);
  EXPECT_EQ(f.attempts, 5);
  EXPECT_EQ(f.preemptions, 2);  // A's first attempt, D's
  EXPECT_EQ(f.failures, 1);     // B's crash
  EXPECT_EQ(f.jobs_preempted, 2);
  EXPECT_EQ(f.jobs_failed, 1);
  EXPECT_NEAR(f.lost_steps, 100, 1e-9);
  EXPECT_NEAR(f.lost_s, 600, 1e-9);
  EXPECT_NEAR(f.lost_usd, 2, 1e-9);
  EXPECT_NEAR(f.lost_gpu_hours, 600.0 / 3600 * 8, 1e-9);  // A's lost time × its 8 ranks
  ASSERT_TRUE(f.gpu_util_pct.has_value());
  EXPECT_NEAR(*f.gpu_util_pct, 90, 1e-9);  // only A has it
  EXPECT_NEAR(f.tokens, 4e6 + 0.5e6, 1e-3);

  ASSERT_EQ(f.by_project.size(), 2u);  // C's "(none)" spent nothing in the window
  EXPECT_EQ(f.by_project[0].project, "nlp");
  EXPECT_NEAR(f.by_project[0].usd, 53, 1e-9);
  EXPECT_NEAR(f.by_project[0].gpu_hours, 26, 1e-9);
  EXPECT_EQ(f.by_project[0].preemptions, 2);
  EXPECT_EQ(f.by_project[1].project, "vision");
  EXPECT_NEAR(f.by_project[1].usd, 6, 1e-9);
  EXPECT_EQ(f.by_project[1].failures, 1);
  EXPECT_EQ(f.projects, (std::vector<std::string>{"nlp", "vision"}));

  ASSERT_EQ(f.days.size(), 31u);  // 2026-10-04 .. 2026-11-03
  EXPECT_EQ(f.days.front(), "2026-10-04");
  EXPECT_EQ(f.days.back(), "2026-11-03");
  EXPECT_NEAR(f.usd_by_day.at("2026-10-04").at("nlp"), 5, 1e-9);
  EXPECT_NEAR(f.usd_by_day.at("2026-11-02").at("nlp"), 48, 1e-9);
  EXPECT_NEAR(f.usd_by_day.at("2026-11-02").at("vision"), 2, 1e-9);
  EXPECT_NEAR(f.usd_by_day.at("2026-11-03").at("vision"), 4, 1e-9);

  ASSERT_EQ(f.jobs_by_usd.size(), 3u);
  EXPECT_EQ(f.jobs_by_usd[0].job_id, "A");
  EXPECT_EQ(f.jobs_by_usd[1].job_id, "B");
  EXPECT_EQ(f.jobs_by_usd[2].job_id, "D");

  const nlohmann::json j = FinOpsJson(f, /*top=*/2);
  EXPECT_NEAR(j["rates"]["preemptions_per_job"].get<double>(), 2.0 / 3, 1e-9);
  EXPECT_NEAR(j["rates"]["preemptions_per_gpu_hour"].get<double>(), 2.0 / 29, 1e-9);
  EXPECT_NEAR(j["rates"]["failures_per_gpu_hour"].get<double>(), 1.0 / 29, 1e-9);
  EXPECT_NEAR(j["totals"]["productive_fraction"].get<double>(), 0.5, 1e-9);
  EXPECT_NEAR(j["lost"]["fraction_of_usd"].get<double>(), 2.0 / 59, 1e-9);
  ASSERT_EQ(j["top_jobs"].size(), 2u);
  EXPECT_NEAR(j["top_jobs"][0]["usd_per_mtok"].get<double>(), 48.0 / 2, 1e-9);  // $48 for 2M tokens
  EXPECT_EQ(j["by_day_utc"].size(), 31u);
  EXPECT_NEAR(j["by_day_utc"][30]["usd"].get<double>(), 4, 1e-9);
}

TEST(FinOpsTest, AllTimeIncludesTheOldJob) {
  const FinOps f = ComputeFinOps(Jobs(), 0, kNow);
  EXPECT_NEAR(f.usd, 48 + 6 + 10 + 100, 1e-9);
  EXPECT_EQ(f.jobs, 4);
  EXPECT_EQ(f.days.front(), "2026-09-23");  // C's day, 40 days before 2026-11-02
  EXPECT_FALSE(f.gpu_util_pct.has_value());
}

TEST(FinOpsTest, LoadsTheLedgerFileAndTheGpuUtilisationOfTheRuns) {
  testing::TempDir tmp;
  // A's run directory has step rows with GPU fields: utilisation 80 and 100, mean 90.
  std::string rows;
  for (double util : {80.0, 100.0}) {
    StepRecord s;
    s.step = util > 90 ? 2 : 1;
    s.loss = 3;
    s.gpu = GpuRecord{util, 40, 500, 1};
    rows += ToJson(s).dump() + "\n";
  }
  testing::WriteFile(tmp / "runA/metrics.jsonl", rows);
  {
    auto ledger = run::Ledger::Open(tmp / "ledger.sqlite");
    ASSERT_TRUE(ledger.ok()) << ledger.status().message();
    for (const auto& [job, attempts] : Jobs(tmp / "runA")) {
      ASSERT_TRUE((*ledger)->PutJob(job).ok());
      for (const auto& a : attempts) ASSERT_TRUE((*ledger)->PutAttempt(a).ok());
    }
  }
  auto f = LoadFinOps(tmp / "ledger.sqlite", kSince, kNow);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_NEAR(f->usd, 59, 1e-9);
  EXPECT_NEAR(f->gpu_hours, 29, 1e-9);
  EXPECT_EQ(f->preemptions, 2);
  ASSERT_TRUE(f->gpu_util_pct.has_value());
  EXPECT_NEAR(*f->gpu_util_pct, 90, 1e-9);
  EXPECT_EQ(f->ledger, tmp / "ledger.sqlite");

  auto missing = LoadFinOps(tmp / "none.sqlite", kSince, kNow);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("tern run"), std::string::npos);
}

TEST(FinOpsTest, ParseSince) {
  EXPECT_EQ(ParseSince("30d").value(), 30 * 86400.0);
  EXPECT_EQ(ParseSince("12h").value(), 12 * 3600.0);
  EXPECT_EQ(ParseSince("all").value(), 0.0);
  EXPECT_FALSE(ParseSince("soon").ok());
}

TEST(FinOpsTest, PageIsSelfContained) {
  const std::string page = FinOpsHtml(ComputeFinOps(Jobs(), kSince, kNow), "/*chartjs*/");
  EXPECT_NE(page.find("/*chartjs*/"), std::string::npos);
  EXPECT_EQ(page.find("@@DATA@@"), std::string::npos);
  EXPECT_EQ(page.find("http://"), std::string::npos);
  EXPECT_EQ(page.find("https://"), std::string::npos);
  EXPECT_NE(page.find("\"top_jobs\""), std::string::npos);
}

// Two `tern serve --usage-file` files (the format of serve/usage.h), summed by project in the serving
// section.
TEST(FinOpsTest, ServingSectionSumsTheUsageFilesByProject) {
  testing::TempDir tmp;
  const auto write = [&](const std::string& name, double usd, double search_tokens, double ads_tokens) {
    const nlohmann::json j = {{"kind", "tern-serve-usage"},
                              {"version", 1},
                              {"model", "demo"},
                              {"started_unix", kD0},
                              {"updated_unix", kD0 + kH},
                              {"price_per_hour", usd},
                              {"busy_s", 900},
                              {"idle_s", 2700},
                              {"usd", usd},
                              {"requests", 10},
                              {"prompt_tokens", 100},
                              {"generation_tokens", search_tokens + ads_tokens},
                              {"usd_per_million_generated_tokens", usd / (search_tokens + ads_tokens) * 1e6},
                              {"keys", nlohmann::json::array()},
                              {"by_project",
                               {{{"project", "ads"},
                                 {"requests", 4},
                                 {"prompt_tokens", 40},
                                 {"generation_tokens", ads_tokens},
                                 {"rate_limited", 1},
                                 {"usd", usd * ads_tokens / (search_tokens + ads_tokens)}},
                                {{"project", "search"},
                                 {"requests", 6},
                                 {"prompt_tokens", 60},
                                 {"generation_tokens", search_tokens},
                                 {"rate_limited", 0},
                                 {"usd", usd * search_tokens / (search_tokens + ads_tokens)}}}}};
    std::ofstream(tmp / name) << j.dump();
    return tmp / name;
  };
  // server 1: $2 for 1M tokens (250k ads); server 2: $1 for 1M tokens (500k ads). Server 1's file splits its
  // tokens by served model (a LoRA adapter "law" took 400k); server 2's predates that split.
  {
    nlohmann::json j = nlohmann::json::parse(std::ifstream(write("a.json", 2, 750000, 250000)));
    j["by_model"] = {{{"model", "demo"},
                      {"requests", 7},
                      {"prompt_tokens", 70},
                      {"generation_tokens", 600000},
                      {"usd", 1.2}},
                     {{"model", "law"},
                      {"requests", 3},
                      {"prompt_tokens", 30},
                      {"generation_tokens", 400000},
                      {"usd", 0.8}}};
    std::ofstream(tmp / "a.json") << j.dump();
  }
  auto a = LoadServingUsage(tmp / "a.json");
  auto b = LoadServingUsage(write("b.json", 1, 500000, 500000));
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  FinOps f = ComputeFinOps(Jobs(), kSince, kNow);
  f.serving.push_back(a.value());
  f.serving.push_back(b.value());
  const nlohmann::json s = FinOpsJson(f)["serving"];
  ASSERT_EQ(s["servers"].size(), 2u);
  EXPECT_NEAR(s["servers"][0]["utilisation"].get<double>(), 0.25, 1e-12);
  EXPECT_NEAR(s["totals"]["usd"].get<double>(), 3, 1e-12);
  EXPECT_NEAR(s["totals"]["usd_per_mtok"].get<double>(), 1.5, 1e-12);  // $3 over 2M tokens
  ASSERT_EQ(s["by_project"].size(), 2u);
  EXPECT_EQ(s["by_project"][0]["project"], "ads");
  EXPECT_NEAR(s["by_project"][0]["usd"].get<double>(), 0.5 + 0.5, 1e-12);
  EXPECT_NEAR(s["by_project"][0]["generation_tokens"].get<double>(), 750000, 1e-9);
  EXPECT_EQ(s["by_project"][0]["rate_limited"].get<double>(), 2);
  ASSERT_EQ(s["by_model"].size(), 2u);
  EXPECT_EQ(s["by_model"][1]["model"], "law");
  EXPECT_NEAR(s["by_model"][1]["usd"].get<double>(), 0.8, 1e-12);
  EXPECT_NEAR(s["by_model"][1]["generation_tokens"].get<double>(), 400000, 1e-9);
  EXPECT_TRUE(s["servers"][1]["by_model"].empty()) << "an older file without the split still loads";
  EXPECT_NE(FinOpsHtml(f, "").find("serving-section"), std::string::npos);
  EXPECT_NE(FinOpsHtml(f, "").find("serving-models"), std::string::npos);

  std::ofstream(tmp / "bad.json") << R"({"kind": "something-else"})";
  auto bad = LoadServingUsage(tmp / "bad.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad.json"), std::string::npos);
  EXPECT_FALSE(LoadServingUsage(tmp / "none.json").ok());
}

}  // namespace
}  // namespace tern::report
