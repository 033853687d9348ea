// `tern run --on slurm` on the repository's one-node Slurm cluster (scripts/slurm-local; .ci/run starts
// it) with the real trainer: Slurm's warning before the time limit (USR1 to the batch script) makes the
// trainer save, the job requeues itself, resumes and finishes with weights bit-identical to an
// uninterrupted `tern train`, and the ledger bills both attempts; a queued job is refused a second
// submission and `tern job cancel` takes it out of the queue.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "run/ledger.h"
#include "testing/files.h"
#include "testing/prepared_data.h"
#include "testing/processes.h"
#include "testing/skip.h"
#include "testing/slurm.h"
#include "testing/tern_binary.h"
#include "testing/tiny_config.h"

namespace tern::run {
namespace {

using nlohmann::json;

class SlurmE2eTest : public ::testing::Test {
 protected:
  static constexpr double kPrice = 36;  // $/h
  // Enough steps that Slurm's warning, sent five steps in, lands far from the end: with 60 a fast CPU (a
  // Zen 5 ran them in 1.1 s) finished, or saved at the last step, before the signal arrived.
  static constexpr int kSteps = 300;

  void SetUp() override {
    const std::string why = testing::NoSlurmCluster();
    if (!why.empty()) TERN_SKIP_OR_FAIL_IN_CI(why);
    tern_ = testing::FindTernBinary().string();
    ASSERT_FALSE(tern_.empty()) << "build the tern binary first";
    const std::string data = testing::SharedSmallPreparedData();
    ASSERT_FALSE(data.empty());
    root_ = tmp_.path();
    // Evaluating every step slows the steps down so that the signal lands mid-run (the weights are the same
    // with or without it); kSteps does the rest.
    testing::WriteFile(root_ + "/tiny.yaml",
                       testing::TinyTrainYaml(
                           data, {.n_layer = 2,
                                  .total_batch_tokens = 256,
                                  .steps = kSteps,
                                  .warmup_steps = 2,
                                  .lr = "3.0e-3",
                                  .schedule = "constant",
                                  .eval_every = 1,
                                  .eval_batches = 4,
                                  .more = "ckpt: {every: 10}\njob: {backoff: 0.2, project: slurm-e2e}\n"}));
  }
  void TearDown() override {
    if (!slurm_id_.empty()) (void)testing::RunCommand("scancel " + slurm_id_);  // a failed test's job
  }

  std::string Shell(const std::string& args) const {
    return "OMP_NUM_THREADS=1 TERN_HOME=" + root_ + "/home " + tern_ + " " + args + " 2>&1";
  }
  std::optional<JobRow> Job(const std::string& run) const {
    auto l = Ledger::Open(RunDirLedgerPath(root_ + "/" + run));
    if (!l.ok()) return std::nullopt;
    auto job = (*l)->FindJob(root_ + "/" + run);
    if (!job.ok() || !*job) return std::nullopt;
    return **job;
  }
  int MaxStep(const std::string& run) const {
    int m = -1;
    std::ifstream in(root_ + "/" + run + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      json r = json::parse(line, nullptr, false);
      if (r.is_object() && !r.contains("event") && r.contains("loss")) m = std::max(m, r["step"].get<int>());
    }
    return m;
  }
  bool HasEvent(const std::string& run, const std::string& event) const {
    std::ifstream in(root_ + "/" + run + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      json r = json::parse(line, nullptr, false);
      if (r.is_object() && r.value("event", "") == event) return true;
    }
    return false;
  }
  // scontrol show job's JobState ("" once Slurm has forgotten it).
  std::string SlurmState() const {
    const testing::CommandResult r = testing::RunCommand("scontrol show job -o " + slurm_id_);
    const size_t at = r.output.find("JobState=");
    return at == std::string::npos ? "" : r.output.substr(at + 9, r.output.find(' ', at) - at - 9);
  }
  template <typename Pred>
  bool WaitFor(Pred pred, double seconds) const {
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - t0 < std::chrono::duration<double>(seconds)) {
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  std::string Logs(const std::string& run) const {
    std::string out;
    for (const auto& e : std::filesystem::directory_iterator(root_ + "/" + run + "/logs"))
      out += "---- " + e.path().string() + "\n" + testing::ReadFile(e.path().string());
    return out;
  }

  void ThroughTheTimeLimit(int ranks);

  testing::TempDir tmp_;
  std::string tern_, root_, slurm_id_;
};

// One rank runs in the batch step itself; two are an srun step, which the supervisor stops with SIGUSR1.
void SlurmE2eTest::ThroughTheTimeLimit(int ranks) {
  const testing::CommandResult sub = testing::RunCommand(
      Shell(fmt::format("run {}/tiny.yaml --on slurm --ranks {} --quiet --price-per-hour 36 "
                        "--set run.dir={}/job",
                        root_, ranks, root_)));
  ASSERT_EQ(sub.code, 0) << sub.output;
  const std::optional<JobRow> queued = Job("job");
  ASSERT_TRUE(queued) << sub.output;
  slurm_id_ = queued->slurm_job_id;
  ASSERT_FALSE(slurm_id_.empty()) << sub.output;
  EXPECT_NE(sub.output.find("Slurm job " + slurm_id_), std::string::npos) << sub.output;
  EXPECT_EQ(queued->where, "slurm");
  const std::string script = testing::ReadFile(root_ + "/job/slurm/job.sbatch");
  EXPECT_NE(script.find("#SBATCH --requeue"), std::string::npos);
  EXPECT_NE(script.find("#SBATCH --signal=B:USR1@120"), std::string::npos);

  // Five steps in, Slurm's warning: USR1 to the batch script alone (what --signal=B:USR1@120 does).
  ASSERT_TRUE(WaitFor([&] { return MaxStep("job") >= 5; }, 120)) << Logs("job");
  ASSERT_EQ(testing::RunCommand("scancel --batch --signal=USR1 " + slurm_id_).code, 0);
  ASSERT_TRUE(WaitFor([&] { return HasEvent("job", "preempted"); }, 60)) << Logs("job");
  // The requeued job waits for its BeginTime (about two minutes): start it sooner, but not within seconds
  // of the requeue (slurmd refuses a start in the second its previous run's credential was revoked).
  auto pending_since = std::chrono::steady_clock::time_point::max();
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::string state = SlurmState();
        const auto now = std::chrono::steady_clock::now();
        if (state != "PENDING") pending_since = std::chrono::steady_clock::time_point::max();
        if (state == "PENDING" && pending_since == std::chrono::steady_clock::time_point::max())
          pending_since = now;
        if (state == "PENDING" && now - pending_since > std::chrono::seconds(3)) {
          (void)testing::RunCommand("scontrol update jobid=" + slurm_id_ + " StartTime=now");
          pending_since = now;
        }
        const std::optional<JobRow> j = Job("job");
        return j && j->state == "done" && state != "RUNNING" && state != "PENDING" && state != "COMPLETING";
      },
      240))
      << SlurmState() << "\n"
      << Logs("job");
  EXPECT_EQ(SlurmState(), "COMPLETED");

  const std::string srun = ranks > 1 ? fmt::format("srun --ntasks={} --mpi=pmix --time=5 ", ranks) : "";
  testing::CommandResult ref = testing::RunCommand("OMP_NUM_THREADS=1 " + srun + tern_ + " train " + root_ +
                                                   "/tiny.yaml --quiet --set run.dir=" + root_ + "/ref 2>&1");
  ASSERT_EQ(ref.code, 0) << ref.output;
  EXPECT_TRUE(testing::ReadFile(root_ + "/job/model.safetensors") ==
              testing::ReadFile(root_ + "/ref/model.safetensors"))
      << "final weights bit-identical to the uninterrupted run";

  const testing::CommandResult st = testing::RunCommand(Shell("job status " + root_ + "/job --json"));
  ASSERT_EQ(st.code, 0) << st.output;
  const json s = json::parse(st.output, nullptr, false);
  ASSERT_TRUE(s.is_object()) << st.output;
  EXPECT_EQ(s["state"], "done");
  ASSERT_EQ(s["attempts"].size(), 2u) << st.output;
  EXPECT_EQ(s["attempts"][0]["reason"], "interrupted");
  EXPECT_EQ(s["attempts"][1]["reason"], "done");
  EXPECT_EQ(s["attempts"][0]["slurm_job_id"], slurm_id_);
  EXPECT_EQ(s["attempts"][0]["slurm_restart_count"], 0);
  EXPECT_EQ(s["attempts"][1]["slurm_restart_count"], 1);
  EXPECT_EQ(s["attempts"][1]["last_step"], kSteps);
  EXPECT_EQ(s["slurm"]["job_id"], slurm_id_);
  EXPECT_EQ(s["slurm"]["restarts"], 1);
  double sum = 0, wall = 0;
  for (const json& a : s["attempts"]) {
    EXPECT_EQ(a["lost_steps"], 0) << "the save before the limit loses nothing";
    sum += a["cost_usd"].get<double>();
    wall += a["wall_s"].get<double>();
  }
  EXPECT_NEAR(s["totals"]["cost_usd"].get<double>(), sum, 1e-12);
  EXPECT_NEAR(sum, kPrice * wall / 3600, 1e-12);
  const std::string log = testing::ReadFile(root_ + "/job/logs/slurm-" + slurm_id_ + ".out");
  EXPECT_NE(log.find("requeueing Slurm job " + slurm_id_), std::string::npos) << log;
  EXPECT_NE(log.find("(restart 1)"), std::string::npos) << log;
  EXPECT_EQ(s["attempts"][1]["ranks"], ranks);
}

TEST_F(SlurmE2eTest, OneRankSavesAtTheTimeLimitWarningRequeuesAndFinishesWithTheSameWeights) {
  ThroughTheTimeLimit(1);
}

TEST_F(SlurmE2eTest, TwoRanksUnderSrunSaveAtTheWarningRequeueAndFinishWithTheSameWeights) {
  ThroughTheTimeLimit(2);
}

TEST_F(SlurmE2eTest, AQueuedJobIsNotSubmittedTwiceAndCancelTakesItOutOfTheQueue) {
  const std::string run = "run " + root_ + "/tiny.yaml --on slurm --quiet --set run.dir=" + root_ +
                          "/later --sbatch-args --begin=now+1hour";
  const testing::CommandResult sub = testing::RunCommand(Shell(run));
  ASSERT_EQ(sub.code, 0) << sub.output;
  const std::optional<JobRow> queued = Job("later");
  ASSERT_TRUE(queued && !queued->slurm_job_id.empty()) << sub.output;
  slurm_id_ = queued->slurm_job_id;
  EXPECT_EQ(queued->state, "queued");
  EXPECT_EQ(SlurmState(), "PENDING");

  const testing::CommandResult again = testing::RunCommand(Shell(run));
  EXPECT_EQ(again.code, 1) << again.output;
  EXPECT_NE(again.output.find("in Slurm already as job " + slurm_id_), std::string::npos) << again.output;

  const testing::CommandResult st = testing::RunCommand(Shell("job status " + root_ + "/later"));
  EXPECT_NE(st.output.find("Slurm job " + slurm_id_ + ": PENDING (BeginTime)"), std::string::npos)
      << st.output;

  const testing::CommandResult cancel = testing::RunCommand(Shell("job cancel " + root_ + "/later"));
  ASSERT_EQ(cancel.code, 0) << cancel.output;
  EXPECT_TRUE(WaitFor([&] { return SlurmState() == "CANCELLED" || SlurmState().empty(); }, 30))
      << SlurmState();
  const std::optional<JobRow> done = Job("later");
  ASSERT_TRUE(done);
  EXPECT_EQ(done->state, "cancelled");
  slurm_id_.clear();
}

}  // namespace
}  // namespace tern::run
