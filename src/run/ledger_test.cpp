// The ledger's rows round-trip, the cancel flag survives the supervisor's writes, the job_totals view sums
// what SumAttempts sums, and `tern job ls --json` splits spend by project and by UTC day.
#include "run/ledger.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include "run/attempt_metrics.h"
#include "run/clock.h"
#include "run/job_report.h"
#include "testing/files.h"

namespace tern::run {
namespace {

AttemptRow Attempt(const std::string& job, int n, double start, double wall, double price) {
  AttemptRow a;
  a.job_id = job;
  a.attempt = n;
  a.state = "ended";
  a.reason = n == 1 ? "preempted" : "done";
  a.start_unix = start;
  a.end_unix = start + wall;
  a.wall_s = wall;
  a.price_per_hour = price;
  a.cost_usd = price * wall / 3600;
  a.first_step = n * 10 - 9;
  a.last_step = n * 10;
  a.lost_steps = n - 1;
  a.startup_s = n == 1 ? -1 : 2.5;
  return a;
}

TEST(LedgerTest, TheLivePolicysSwitchesRoundTripInTimeOrderAndShowInTheTable) {
  testing::TempDir tmp;
  auto l = Ledger::Open(tmp / "ledger.sqlite");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  const double t0 = 1.7e9;
  ASSERT_TRUE((*l)->PutSwitch({"j1", t0 + 7200, 1, "spot", "none", "preempted; wait"}).ok());
  ASSERT_TRUE((*l)->PutSwitch({"j1", t0, 0, "none", "spot", "spot is up"}).ok());
  ASSERT_TRUE((*l)->PutSwitch({"j2", t0, 0, "none", "on-demand", "other job"}).ok());
  auto rows = (*l)->Switches("j1");
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_DOUBLE_EQ((*rows)[0].at_unix, t0);
  EXPECT_EQ((*rows)[0].to, "spot");
  EXPECT_EQ((*rows)[1].from, "spot");
  EXPECT_EQ((*rows)[1].to, "none");
  EXPECT_EQ((*rows)[1].attempt, 1);
  EXPECT_EQ((*rows)[1].why, "preempted; wait");
  const std::string table = SwitchTable(*rows);
  EXPECT_NE(table.find(FormatUtc(t0 + 7200)), std::string::npos) << table;
  EXPECT_NE(table.find("preempted; wait"), std::string::npos) << table;
  EXPECT_EQ(SwitchesJson(*rows)[1]["to"], "none");
  EXPECT_EQ(SwitchTable({}), "");
}

TEST(LedgerTest, RowsRoundTripAndTheCancelFlagIsOnlySetBySetCancel) {
  testing::TempDir tmp;
  auto l = Ledger::Open(tmp / "sub/dir/ledger.sqlite");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  JobRow j;
  j.job_id = "demo-20250101T000000";
  j.run_dir = "/runs/demo";
  j.project = "p1";
  j.price_per_hour = 36;
  j.created_unix = 1.7e9;
  ASSERT_TRUE((*l)->PutJob(j).ok());
  ASSERT_TRUE((*l)->SetCancel(j.job_id, true).ok());
  j.state = "done";
  ASSERT_TRUE((*l)->PutJob(j).ok());  // the supervisor's next write keeps the flag
  auto got = (*l)->FindJob("/runs/demo");
  ASSERT_TRUE(got.ok() && *got);
  EXPECT_EQ((*got)->state, "done");
  EXPECT_TRUE((*got)->cancel_requested);
  EXPECT_EQ((*got)->project, "p1");

  AttemptRow a1 = Attempt(j.job_id, 1, 1.7e9, 100, 36), a2 = Attempt(j.job_id, 2, 1.7e9 + 200, 50, 36);
  a1.message = "it's \"quoted\"";
  ASSERT_TRUE((*l)->PutAttempt(a1).ok());
  ASSERT_TRUE((*l)->PutAttempt(a2).ok());
  a2.tokens = 999;
  ASSERT_TRUE((*l)->PutAttempt(a2).ok());  // an update, not a second row
  auto rows = (*l)->Attempts(j.job_id);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].message, a1.message);
  EXPECT_EQ((*rows)[0].startup_s, -1);
  EXPECT_EQ((*rows)[0].exit_code, -1);
  EXPECT_EQ((*rows)[1].tokens, 999u);
  EXPECT_EQ((*rows)[1].first_step, 11);
  const JobTotals t = SumAttempts(*rows);
  EXPECT_EQ(t.attempts, 2);
  EXPECT_DOUBLE_EQ(t.cost_usd, 1.5);
  EXPECT_DOUBLE_EQ(t.wall_s, 150);
  EXPECT_DOUBLE_EQ(t.startup_s, 2.5);
  EXPECT_EQ(t.lost_steps, 1);
  EXPECT_EQ(t.last_step, 20);
}

// A ledger written by schema version 1 (no Slurm columns) opens: its rows read as they were, and the new
// columns take new facts. A ledger from a newer tern is refused, not misread.
TEST(LedgerTest, AnOlderLedgerGetsTheNewColumnsAndANewerOneIsRefused) {
  testing::TempDir tmp;
  const std::string path = tmp / "old.sqlite";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const char* v1 =
      "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);"
      "INSERT INTO meta VALUES ('schema_version', '1');"
      "CREATE TABLE jobs(job_id TEXT PRIMARY KEY, run_dir TEXT NOT NULL, config TEXT, overrides TEXT,"
      " project TEXT, instance TEXT, billing TEXT, price_per_hour REAL, ranks INTEGER, where_run TEXT,"
      " max_attempts INTEGER, budget_usd REAL, deadline_unix REAL, created_unix REAL, updated_unix REAL,"
      " state TEXT, reason TEXT, host TEXT, supervisor_pid INTEGER,"
      " cancel_requested INTEGER NOT NULL DEFAULT 0);"
      "INSERT INTO jobs (job_id, run_dir, state, price_per_hour) VALUES ('old', '/runs/old', 'done', 2.5);"
      "CREATE TABLE attempts(job_id TEXT NOT NULL, attempt INTEGER NOT NULL, state TEXT, start_unix REAL,"
      " end_unix REAL, seen_unix REAL, start_utc TEXT, end_utc TEXT, host TEXT, ranks INTEGER,"
      " exit_code INTEGER, signal INTEGER, reason TEXT, message TEXT, first_step INTEGER,"
      " last_step INTEGER, resumed_from INTEGER, tokens INTEGER, wall_s REAL, startup_s REAL,"
      " productive_s REAL, lost_steps INTEGER, lost_s REAL, lost_usd REAL, checkpoint_s REAL,"
      " instance TEXT, billing TEXT, price_per_hour REAL, cost_usd REAL, trainer_pid INTEGER,"
      " trainer_start TEXT, metrics_offset INTEGER, log TEXT, PRIMARY KEY(job_id, attempt));"
      "INSERT INTO attempts (job_id, attempt, reason, cost_usd) VALUES ('old', 1, 'done', 0.75);";
  ASSERT_EQ(sqlite3_exec(db, v1, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  sqlite3_close(db);

  {
    auto l = Ledger::Open(path);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    auto job = (*l)->GetJob("old");
    ASSERT_TRUE(job.ok() && *job) << job.status().ToString();
    EXPECT_EQ((*job)->state, "done");
    EXPECT_EQ((*job)->price_per_hour, 2.5);
    EXPECT_EQ((*job)->slurm_job_id, "");
    auto rows = (*l)->Attempts("old");
    ASSERT_TRUE(rows.ok() && rows->size() == 1u);
    EXPECT_EQ((*rows)[0].cost_usd, 0.75);
    EXPECT_EQ((*rows)[0].slurm_restart_count, -1);
    AttemptRow a = (*rows)[0];
    a.attempt = 2;
    a.slurm_job_id = "42";
    a.slurm_restart_count = 1;
    ASSERT_TRUE((*l)->PutAttempt(a).ok());
    auto again = (*l)->Attempts("old");
    ASSERT_TRUE(again.ok() && again->size() == 2u);
    EXPECT_EQ((*again)[1].slurm_job_id, "42");
    EXPECT_EQ((*again)[1].slurm_restart_count, 1);
  }
  ASSERT_TRUE(Ledger::Open(path).ok());  // opening a migrated ledger again changes nothing

  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE meta SET value = '99' WHERE key = 'schema_version';", nullptr, nullptr,
                         nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto newer = Ledger::Open(path);
  ASSERT_FALSE(newer.ok());
  EXPECT_NE(newer.status().message().find("upgrade tern"), std::string::npos) << newer.status().message();
}

TEST(LedgerTest, JobsJsonSplitsSpendByProjectAndByUtcDay) {
  const double midnight = ParseUtc("2025-03-02T00:00:00Z");
  ASSERT_GT(midnight, 0);
  JobRow a, b;
  a.job_id = "a";
  a.project = "research";
  b.job_id = "b";
  // 3600 s at $36/h = $36: a quarter before midnight, three quarters after.
  std::vector<JobWithAttempts> jobs = {{a, {Attempt("a", 1, midnight - 900, 3600, 36)}},
                                       {b, {Attempt("b", 1, midnight + 7200, 100, 36)}}};
  const nlohmann::json j = JobsJson(jobs);
  EXPECT_NEAR(j["spend"]["total_usd"].get<double>(), 37, 1e-9);
  EXPECT_NEAR(j["spend"]["by_project"]["research"].get<double>(), 36, 1e-9);
  EXPECT_NEAR(j["spend"]["by_project"]["(none)"].get<double>(), 1, 1e-9);
  EXPECT_NEAR(j["spend"]["by_day_utc"]["2025-03-01"].get<double>(), 9, 1e-9);
  EXPECT_NEAR(j["spend"]["by_day_utc"]["2025-03-02"].get<double>(), 28, 1e-9);
  EXPECT_EQ(j["jobs"].size(), 2u);
  EXPECT_NEAR(j["jobs"][0]["totals"]["cost_usd"].get<double>(), 36, 1e-9);
}

TEST(LedgerTest, UtcTimesRoundTrip) {
  EXPECT_EQ(FormatUtc(ParseUtc("2025-01-02T03:04:05.678Z")), "2025-01-02T03:04:05.678Z");
  EXPECT_EQ(ParseUtc("2025-01-02T03:04:05Z"), ParseUtc("2025-01-02T03:04:05.000Z"));
  EXPECT_EQ(ParseUtc("yesterday"), 0);
}

TEST(MetricsTailTest, CountsStepsTokensRedoneWorkAndSavesFromWhereTheAttemptBegan) {
  testing::TempDir tmp;
  const std::string m = tmp / "metrics.jsonl";
  testing::WriteFile(m, "{\"step\":1,\"loss\":2,\"tokens\":100,\"step_ms\":10}\n");
  const uint64_t offset = testing::ReadFile(m).size();
  MetricsTail tail(m, offset, /*job_last_step=*/5);
  EXPECT_FALSE(tail.Poll(1));
  std::ofstream(m, std::ios::app)
      << "{\"event\":\"start\"}\n{\"event\":\"resume\",\"step\":3}\n"
      << "{\"step\":4,\"loss\":2,\"tokens\":400,\"step_ms\":20,\"elapsed_s\":0.5}\n"
      << "torn{\n"
      << "{\"step\":5,\"loss\":2,\"tokens\":500,\"step_ms\":20}\n"
      << "{\"step\":6,\"loss\":2,\"tokens\":600,\"step_ms\":30}\n"
      << "{\"step\":6,\"val_loss\":2}\n"
      << "{\"event\":\"checkpoint\",\"stall_ms\":1,\"wait_ms\":99}\n"
      << "{\"step\":7,\"loss\":2,\"tok";  // not yet ended
  EXPECT_TRUE(tail.Poll(2));
  const AttemptProgress& p = tail.progress();
  EXPECT_EQ(p.resumed_from, 3);
  EXPECT_EQ(p.first_step, 4);
  EXPECT_EQ(p.last_step, 6);
  EXPECT_EQ(p.tokens, 300u);
  EXPECT_EQ(p.lost_steps, 2);  // 4 and 5 were done before
  EXPECT_NEAR(p.lost_s, 0.04, 1e-12);
  EXPECT_NEAR(p.productive_s, 0.03, 1e-12);
  EXPECT_NEAR(p.checkpoint_s, 0.1, 1e-12);
  EXPECT_EQ(p.run_start, 1.5);  // read at 2, 0.5 s after the trainer's clock started
  std::ofstream(m, std::ios::app) << "ens\":700,\"step_ms\":30}\n";
  EXPECT_TRUE(tail.Poll(3));
  EXPECT_EQ(tail.progress().last_step, 7);
  // A fresh start (nothing to resume) rewrites the file: read it from the top.
  testing::WriteFile(m, "{\"step\":1,\"loss\":2,\"tokens\":100,\"step_ms\":10}\n");
  MetricsTail fresh(m, 500, 5);
  EXPECT_TRUE(fresh.Poll(4));
  EXPECT_EQ(fresh.progress().first_step, 1);
  EXPECT_EQ(fresh.progress().lost_steps, 1);
}

}  // namespace
}  // namespace tern::run
