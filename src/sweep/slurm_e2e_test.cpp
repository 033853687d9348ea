// `tern sweep --on slurm` on the repository's one-node Slurm cluster (scripts/slurm-local; .ci/run starts
// it) with the real trainer: four trials on a tiny model, rungs at 2 and 4 steps (eta 2), two Slurm jobs at
// a time. The sweep is killed with -9 while a rung's Slurm job is queued or running, and the same command
// run again follows that job instead of submitting it twice; the sweep ends with every rung a Slurm job of
// its own (each attempt in the trial's ledger ran inside one, and Slurm says it COMPLETED), ASHA stopped
// at least one trial at the first rung, and the best is the lowest loss at the last rung.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "run/ledger.h"
#include "sweep/store.h"
#include "testing/files.h"
#include "testing/prepared_data.h"
#include "testing/processes.h"
#include "testing/skip.h"
#include "testing/slurm.h"
#include "testing/tern_binary.h"
#include "testing/tiny_config.h"

namespace tern::sweep {
namespace {

using nlohmann::json;

class SweepSlurmE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = testing::NoSlurmCluster();
    if (!why.empty()) TERN_SKIP_OR_FAIL_IN_CI(why);
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
    path_ = root_ + "/s.yaml";
    testing::WriteFile(path_,
                       "base: tiny.yaml\ndir: s\nseed: 3\ntrials: 4\nparallel: 2\n"
                       "asha: {eta: 2, min_steps: 2, max_steps: 4}\nprice_per_hour: 36\n"
                       "job: {time_limit: \"5:00\", project: sweep-slurm}\n"
                       "space:\n  train.lr: {loguniform: [1.0e-5, 3.0e-2]}\n");
  }
  void TearDown() override {  // a failed test's jobs
    for (const TrialRow& t : Rows())
      if (!t.slurm_job_id.empty()) (void)testing::RunCommand("scancel " + t.slurm_job_id + " 2>&1");
  }

  std::vector<TrialRow> Rows() const {
    auto st = SweepStore::Open(root_ + "/s/sweep.sqlite");
    if (!st.ok()) return {};
    auto t = (*st)->Trials();
    return t.ok() ? *t : std::vector<TrialRow>();
  }
  std::string SlurmState(const std::string& id) const {
    const testing::CommandResult r = testing::RunCommand("scontrol show job -o " + id + " 2>&1");
    const size_t at = r.output.find("JobState=");
    return at == std::string::npos ? "" : r.output.substr(at + 9, r.output.find(' ', at) - at - 9);
  }
  std::vector<run::AttemptRow> Attempts(const std::string& run_dir) const {
    auto l = run::Ledger::Open(run::RunDirLedgerPath(run_dir));
    if (!l.ok()) return {};
    auto job = (*l)->FindJob(run_dir);
    if (!job.ok() || !*job) return {};
    auto a = (*l)->Attempts((*job)->job_id);
    return a.ok() ? *a : std::vector<run::AttemptRow>();
  }

  testing::TempDir tmp_;
  std::string tern_, root_, path_;
};

TEST_F(SweepSlurmE2eTest, FourTrialsAsSlurmJobsKilledMidwayFollowTheirJobsAgainAndFinish) {
  const std::map<std::string, std::string> env = {{"OMP_NUM_THREADS", "1"}, {"TERN_HOME", root_ + "/home"}};
  std::string live;  // a rung's Slurm job, queued or running when the sweep is killed
  {
    testing::Child sweep({tern_, "sweep", path_, "--on", "slurm"}, env, root_ + "/first.log");
    const auto t0 = std::chrono::steady_clock::now();
    while (live.empty() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
      for (const TrialRow& t : Rows()) {
        if (t.state != "running" || t.slurm_job_id.empty()) continue;
        const std::string state = SlurmState(t.slurm_job_id);
        if (state == "PENDING" || state == "RUNNING") live = t.slurm_job_id;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_FALSE(live.empty()) << testing::ReadFile(root_ + "/first.log");
    sweep.Signal(SIGKILL);
    sweep.Wait();
  }

  const std::string shell =
      "OMP_NUM_THREADS=1 TERN_HOME=" + root_ + "/home " + tern_ + " sweep " + path_ + " --on slurm --json";
  const testing::CommandResult r = testing::RunCommand(shell);
  ASSERT_EQ(r.code, 0) << testing::ReadFile(root_ + "/first.log") << r.output;
  EXPECT_NE(r.output.find("following Slurm job " + live + " again"), std::string::npos) << r.output;
  const size_t at = r.output.rfind("\n{\n");
  const json j = json::parse(at == std::string::npos ? r.output : r.output.substr(at + 1), nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.output;
  ASSERT_EQ(j["trials"].size(), 4u);
  EXPECT_EQ(j["rung_steps"], json({2, 4}));

  std::set<std::string> slurm_jobs;
  int early = 0, best = -1;
  double best_loss = 1e9;
  for (const json& t : j["trials"]) {
    const std::string state = t["state"];
    ASSERT_TRUE(state == "done" || state == "stopped") << t.dump();
    EXPECT_GT(t["cost_usd"].get<double>(), 0.0) << t.dump();
    if (state == "stopped") {
      early++;
      EXPECT_EQ(t["steps"], 2) << t.dump();
      EXPECT_NE(t["reason"].get<std::string>().find("only the top"), std::string::npos) << t.dump();
    }
    if (t["losses"].size() == 2 && t["losses"][1].get<double>() < best_loss)
      best_loss = t["losses"][1], best = t["id"];
    // One Slurm job per rung: every attempt ran inside an allocation, and no rung was submitted twice (the
    // killed sweep's live job included).
    const std::string run_dir = t["run_dir"];
    const std::vector<run::AttemptRow> attempts = Attempts(run_dir);
    ASSERT_EQ(attempts.size(), t["losses"].size()) << run_dir << "\n" << r.output;
    double cost = 0;
    for (const run::AttemptRow& a : attempts) {
      ASSERT_FALSE(a.slurm_job_id.empty()) << run_dir;
      EXPECT_TRUE(slurm_jobs.insert(a.slurm_job_id).second) << "Slurm job " << a.slurm_job_id << " twice";
      const std::string slurm = SlurmState(a.slurm_job_id);
      EXPECT_TRUE(slurm == "COMPLETED" || slurm.empty()) << a.slurm_job_id << ": " << slurm;
      EXPECT_TRUE(std::filesystem::exists(run_dir + "/logs/slurm-" + a.slurm_job_id + ".out"));
      cost += a.cost_usd;
    }
    EXPECT_NEAR(t["cost_usd"].get<double>(), cost, 1e-9) << "priced from the ledger";
    EXPECT_EQ(t["slurm_job_id"], attempts.back().slurm_job_id);
    const std::string script = testing::ReadFile(run_dir + "/slurm/job.sbatch");
    EXPECT_NE(script.find("#SBATCH --time=5:00\n"), std::string::npos) << "the sweep's job: section";
  }
  EXPECT_TRUE(slurm_jobs.count(live)) << "the job live at the kill is one of the rungs";
  EXPECT_GE(early, 1) << "ASHA stops at least one trial at rung 0";
  ASSERT_GE(best, 0);
  EXPECT_EQ(j["best"], best) << "the lowest loss at the last rung";
}

}  // namespace
}  // namespace tern::sweep
