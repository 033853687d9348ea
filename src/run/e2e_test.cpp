// `tern run` with the real trainer: a job whose trainer is sent SIGTERM twice finishes in three attempts
// with weights bit-identical to an uninterrupted `tern train`, and its ledger bills price x the wall time of
// the attempts, start-ups included; a trainer killed with SIGKILL is relaunched after a backoff, and the
// steps it redoes after resuming are counted as lost work. Then `tern job status|ls|cancel`.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "run/ledger.h"
#include "testing/files.h"
#include "testing/prepared_data.h"
#include "testing/processes.h"
#include "testing/skip.h"
#include "testing/tern_binary.h"
#include "testing/tiny_config.h"

namespace tern::run {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class RunE2eTest : public ::testing::Test {
 protected:
  static constexpr double kPrice = 36;  // $/h

  void SetUp() override {
    tern_ = testing::FindTernBinary().string();
    ASSERT_FALSE(tern_.empty()) << "build the tern binary first";
    const std::string data = testing::SharedSmallPreparedData();
    ASSERT_FALSE(data.empty());
    root_ = tmp_.path();
    // Evaluating every step only slows the steps down (it reads the validation split, not the training
    // data), so that a signal lands mid-run; the weights are the same with or without it.
    testing::WriteFile(
        root_ + "/tiny.yaml",
        testing::TinyTrainYaml(data, {.n_layer = 2,
                                      .total_batch_tokens = 256,
                                      .steps = 80,
                                      .warmup_steps = 2,
                                      .lr = "3.0e-3",
                                      .schedule = "constant",
                                      .eval_every = 1,
                                      .eval_batches = 4,
                                      .more = "ckpt: {every: 10}\njob: {backoff: 0.2, project: e2e}\n"}));
  }

  std::map<std::string, std::string> Env() const {
    return {{"OMP_NUM_THREADS", "1"}, {"TERN_HOME", root_ + "/home"}};
  }
  std::string Shell(const std::string& args) const {
    return "OMP_NUM_THREADS=1 TERN_HOME=" + root_ + "/home " + tern_ + " " + args + " 2>&1";
  }

  std::vector<json> Rows(const std::string& run) const {
    std::vector<json> out;
    std::ifstream in(root_ + "/" + run + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      json j = json::parse(line, nullptr, false);
      if (j.is_object()) out.push_back(j);
    }
    return out;
  }
  // Waits until `pred(rows)` holds; false after 60 s.
  template <typename Pred>
  bool WaitRows(const std::string& run, Pred pred) const {
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
      if (pred(Rows(run))) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  static int MaxStep(const std::vector<json>& rows) {
    int m = -1;
    for (const json& r : rows)
      if (!r.contains("event") && r.contains("loss")) m = std::max(m, r["step"].get<int>());
    return m;
  }
  // The pid of attempt `n`'s trainer, from the run directory's ledger.
  int TrainerPid(const std::string& run, int n) const {
    auto l = Ledger::Open(RunDirLedgerPath(root_ + "/" + run));
    if (!l.ok()) return 0;
    auto job = (*l)->FindJob(root_ + "/" + run);
    if (!job.ok() || !*job) return 0;
    auto attempts = (*l)->Attempts((*job)->job_id);
    if (!attempts.ok()) return 0;
    for (const AttemptRow& a : *attempts)
      if (a.attempt == n) return a.trainer_pid;
    return 0;
  }
  json Status(const std::string& run) const {
    testing::CommandResult r = testing::RunCommand(Shell("job status " + root_ + "/" + run + " --json"));
    EXPECT_EQ(r.code, 0) << r.output;
    return json::parse(r.output, nullptr, false);
  }
  void ExpectSameWeightsAsAnUninterruptedRun(const std::string& run) {
    testing::CommandResult ref =
        testing::RunCommand(Shell("train " + root_ + "/tiny.yaml --quiet --set run.dir=" + root_ + "/ref"));
    ASSERT_EQ(ref.code, 0) << ref.output;
    EXPECT_TRUE(testing::ReadFile(root_ + "/" + run + "/model.safetensors") ==
                testing::ReadFile(root_ + "/ref/model.safetensors"))
        << "final weights bit-identical to the uninterrupted run";
  }

  testing::TempDir tmp_;
  std::string tern_, root_;
};

TEST_F(RunE2eTest, TwoSigtermsThreeAttemptsSameWeightsAndTheBillIsPriceTimesWallTime) {
  testing::Child run({tern_, "run", root_ + "/tiny.yaml", "--set", "run.dir=" + root_ + "/job", "--quiet",
                      "--price-per-hour", "36"},
                     Env(), root_ + "/run.log");
  int saved_at = 0;
  for (int n = 1; n <= 2; n++) {
    // Once this attempt has made five steps of its own, SIGTERM its trainer: it saves and exits 75.
    ASSERT_TRUE(WaitRows("job", [&](const std::vector<json>& rows) { return MaxStep(rows) >= saved_at + 5; }))
        << testing::ReadFile(root_ + "/run.log");
    const int pid = TrainerPid("job", n);
    ASSERT_GT(pid, 0);
    ASSERT_EQ(kill(pid, SIGTERM), 0);
    ASSERT_TRUE(WaitRows("job", [&](const std::vector<json>& rows) {
      int preempted = 0;
      for (const json& r : rows)
        if (r.value("event", "") == "preempted") preempted++, saved_at = r["step"].get<int>();
      return preempted == n;
    }));
  }
  ASSERT_EQ(run.Wait(), 0) << testing::ReadFile(root_ + "/run.log");
  ExpectSameWeightsAsAnUninterruptedRun("job");

  const json s = Status("job");
  ASSERT_TRUE(s.is_object());
  EXPECT_EQ(s["state"], "done");
  EXPECT_EQ(s["project"], "e2e");
  ASSERT_EQ(s["attempts"].size(), 3u);
  double sum = 0, wall = 0;
  for (size_t i = 0; i < 3; i++) {
    const json& a = s["attempts"][i];
    SCOPED_TRACE(a.dump());
    EXPECT_EQ(a["reason"], i < 2 ? "preempted" : "done");
    EXPECT_EQ(a["lost_steps"], 0) << "an emergency save loses nothing";
    EXPECT_GT(a["startup_s"].get<double>(), 0);
    // (Start-up is dated by when the supervisor read the rows: up to a poll, 0.1 s, late.)
    EXPECT_LE(a["startup_s"].get<double>() + a["productive_s"].get<double>(),
              a["wall_s"].get<double>() + 0.1);
    EXPECT_NEAR(a["cost_usd"].get<double>(), kPrice * a["wall_s"].get<double>() / 3600, 1e-12);
    sum += a["cost_usd"].get<double>();
    wall += a["wall_s"].get<double>();
  }
  EXPECT_EQ(s["attempts"][2]["last_step"], 80);
  EXPECT_NEAR(s["totals"]["cost_usd"].get<double>(), sum, 1e-12);
  EXPECT_NEAR(sum, kPrice * wall / 3600, 1e-12);
  // The trainer's own rows carry the job's cost: attempt 3's rows start from attempts 1 and 2.
  const double before =
      s["attempts"][0]["cost_usd"].get<double>() + s["attempts"][1]["cost_usd"].get<double>();
  const json last = [&] {
    json l;
    for (const json& r : Rows("job"))
      if (!r.contains("event") && r.contains("cost_usd")) l = r;
    return l;
  }();
  EXPECT_GT(last["cost_usd"].get<double>(), before);
  EXPECT_LE(last["cost_usd"].get<double>(), sum);
  // summary.json covers the whole job.
  const json summary = json::parse(testing::ReadFile(root_ + "/job/summary.json"), nullptr, false);
  ASSERT_TRUE(summary.is_object());
  EXPECT_GT(summary["cost_usd"].get<double>(), before);
  EXPECT_EQ(summary["job"]["totals"]["attempts"], 3);
  EXPECT_NEAR(summary["job"]["totals"]["cost_usd"].get<double>(), sum, 1e-12);

  // tern job ls: the job, newest first, with its spend per project and per day.
  testing::CommandResult ls = testing::RunCommand(Shell("job ls --json"));
  ASSERT_EQ(ls.code, 0) << ls.output;
  const json list = json::parse(ls.output, nullptr, false);
  ASSERT_TRUE(list.is_object()) << ls.output;
  EXPECT_EQ(list["jobs"][0]["run_dir"], root_ + "/job");
  EXPECT_NEAR(list["spend"]["by_project"]["e2e"].get<double>(), sum, 1e-12);
}

TEST_F(RunE2eTest, ATrainerKilledWithSigkillIsRelaunchedAndItsRedoneStepsAreLostWork) {
  testing::Child run({tern_, "run", root_ + "/tiny.yaml", "--set", "run.dir=" + root_ + "/killed", "--quiet",
                      "--price-per-hour", "36"},
                     Env(), root_ + "/run.log");
  // Past the checkpoint of step 10 (published: its row is written once it is persisted) and some steps
  // beyond it: those are lost with the process.
  ASSERT_TRUE(WaitRows("killed", [](const std::vector<json>& rows) {
    bool saved = false;
    for (const json& r : rows) saved = saved || (r.value("event", "") == "checkpoint" && r["step"] == 10);
    return saved && MaxStep(rows) >= 16;
  }));
  const int pid = TrainerPid("killed", 1);
  ASSERT_GT(pid, 0);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  ASSERT_EQ(run.Wait(), 0) << testing::ReadFile(root_ + "/run.log");
  ExpectSameWeightsAsAnUninterruptedRun("killed");
  const json s = Status("killed");
  ASSERT_EQ(s["attempts"].size(), 2u);
  const json &a1 = s["attempts"][0], &a2 = s["attempts"][1];
  EXPECT_EQ(a1["reason"], "signal");
  EXPECT_EQ(a1["signal"], SIGKILL);
  EXPECT_EQ(a2["reason"], "done");
  const int redone = a1["last_step"].get<int>() - a2["resumed_from"].get<int>();
  EXPECT_GT(redone, 0);
  EXPECT_EQ(a2["lost_steps"], redone);
  EXPECT_GT(a2["lost_s"].get<double>(), 0);
  EXPECT_NEAR(a2["lost_usd"].get<double>(), kPrice * a2["lost_s"].get<double>() / 3600, 1e-12);
  EXPECT_EQ(s["totals"]["lost_steps"], redone);
  EXPECT_GE(a2["start_utc"].get<std::string>(), a1["end_utc"].get<std::string>());
}

// Two ranks through mpirun: a SIGTERM to tern run reaches the ranks as SIGUSR1 (mpirun forwards it), they
// save and exit 75, tern run exits 75; run again, the job finishes with the weights of an uninterrupted
// two-rank run.
TEST_F(RunE2eTest, TwoRanksThroughMpirunPauseOnSigtermAndContinueBitForBit) {
  if (testing::FindProgram("mpirun").empty())
    TERN_SKIP_OR_FAIL_IN_CI("mpirun is not on PATH; scripts/install-deps installs openmpi-bin");
  const std::string mpi_args = geteuid() == 0 ? "--oversubscribe --allow-run-as-root" : "--oversubscribe";
  const std::vector<std::string> argv = {
      tern_,     "run", root_ + "/tiny.yaml", "--set", "run.dir=" + root_ + "/dp", "--quiet",
      "--ranks", "2",   "--mpirun-args",      mpi_args};
  {
    testing::Child run(argv, Env(), root_ + "/run1.log");
    ASSERT_TRUE(WaitRows("dp", [](const std::vector<json>& rows) { return MaxStep(rows) >= 5; }))
        << testing::ReadFile(root_ + "/run1.log");
    run.Signal(SIGTERM);
    ASSERT_EQ(run.Wait(), 75) << testing::ReadFile(root_ + "/run1.log");
  }
  testing::Child again(argv, Env(), root_ + "/run2.log");
  ASSERT_EQ(again.Wait(), 0) << testing::ReadFile(root_ + "/run2.log");
  const json s = Status("dp");
  ASSERT_EQ(s["attempts"].size(), 2u);
  EXPECT_EQ(s["attempts"][0]["reason"], "interrupted");
  EXPECT_EQ(s["attempts"][0]["ranks"], 2);
  EXPECT_EQ(s["attempts"][1]["resumed_from"], s["attempts"][0]["last_step"]);
  testing::CommandResult ref =
      testing::RunCommand("OMP_NUM_THREADS=1 mpirun " + mpi_args + " -np 2 " + tern_ + " train " + root_ +
                          "/tiny.yaml --quiet --set run.dir=" + root_ + "/dp_ref 2>&1");
  ASSERT_EQ(ref.code, 0) << ref.output;
  EXPECT_TRUE(testing::ReadFile(root_ + "/dp/model.safetensors") ==
              testing::ReadFile(root_ + "/dp_ref/model.safetensors"))
      << "final weights bit-identical to the uninterrupted two-rank run";
}

// Elastic (--ranks 1-2): two ranks preempted while one of them went away (the probe says 1): the relaunch
// resumes the two-rank checkpoint on one rank and finishes the job.
TEST_F(RunE2eTest, AnElasticJobThatLostARankResumesOnOneAndFinishes) {
  if (testing::FindProgram("mpirun").empty())
    TERN_SKIP_OR_FAIL_IN_CI("mpirun is not on PATH; scripts/install-deps installs openmpi-bin");
  const std::string mpi_args = geteuid() == 0 ? "--oversubscribe --allow-run-as-root" : "--oversubscribe";
  const std::string available = root_ + "/available";
  testing::WriteFile(available, "2\n");
  // Each batch a little slower (the loader's test hook), so that the SIGTERM lands mid-run however fast
  // the machine.
  std::map<std::string, std::string> env = Env();
  env["TERN_TEST_DATA_DELAY_MS"] = "15";
  testing::Child run({tern_, "run", root_ + "/tiny.yaml", "--set", "run.dir=" + root_ + "/el", "--quiet",
                      "--ranks", "1-2", "--ranks-probe", "cat " + available, "--mpirun-args", mpi_args},
                     env, root_ + "/run.log");
  ASSERT_TRUE(WaitRows("el", [](const std::vector<json>& rows) { return MaxStep(rows) >= 5; }))
      << testing::ReadFile(root_ + "/run.log");
  testing::WriteFile(available, "1\n");
  const int pid = TrainerPid("el", 1);  // mpirun's: it passes the SIGTERM on, the ranks save
  ASSERT_GT(pid, 0);
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  ASSERT_EQ(run.Wait(), 0) << testing::ReadFile(root_ + "/run.log");
  const json s = Status("el");
  ASSERT_EQ(s["attempts"].size(), 2u) << s.dump(2);
  EXPECT_EQ(s["attempts"][0]["ranks"], 2);
  EXPECT_EQ(s["attempts"][0]["reason"], "preempted");
  EXPECT_EQ(s["attempts"][1]["ranks"], 1);
  EXPECT_EQ(s["attempts"][1]["reason"], "done");
  EXPECT_EQ(s["attempts"][1]["resumed_from"], s["attempts"][0]["last_step"]);
  EXPECT_EQ(s["attempts"][1]["last_step"], 80);
  EXPECT_NE(testing::ReadFile(root_ + "/run.log").find("1 of at most 2 ranks can run now"),
            std::string::npos);
}

TEST_F(RunE2eTest, JobCommandsNameWhatIsWrong) {
  testing::CommandResult none = testing::RunCommand(Shell("job status " + root_ + "/nothing"));
  EXPECT_EQ(none.code, 1);
  EXPECT_NE(none.output.find("no job was run there"), std::string::npos) << none.output;
  testing::CommandResult bad = testing::RunCommand(Shell("run " + root_ + "/tiny.yaml --set train.stepz=3"));
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.output.find("train.stepz"), std::string::npos) << bad.output;
  testing::CommandResult inst =
      testing::RunCommand(Shell("run " + root_ + "/tiny.yaml --instance aws:us-east-1:nosuch.type"));
  EXPECT_EQ(inst.code, 2);
  EXPECT_NE(inst.output.find("not in the catalog"), std::string::npos) << inst.output;
  testing::CommandResult help = testing::RunCommand(Shell("run --help"));
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.output.find("job.max_attempts"), std::string::npos) << help.output;
}

// `--policy uniform-progress` (run/live_policy.h): a usage error without a deadline or without an instance
// (exit 2, naming the fix); on this machine (the local market: spot is up) the job runs on spot, billed at
// the catalog's spot price, and its one switch (none -> spot) is in the ledger and in `tern job status`.
TEST_F(RunE2eTest, LivePolicyNeedsADeadlineAndRunsOnSpotHere) {
  const std::string run = "run " + root_ + "/tiny.yaml --instance aws:us-west-2:p3.2xlarge ";
  testing::CommandResult no_deadline = testing::RunCommand(Shell(run + "--policy uniform-progress"));
  EXPECT_EQ(no_deadline.code, 2) << no_deadline.output;
  EXPECT_NE(no_deadline.output.find("needs a deadline"), std::string::npos) << no_deadline.output;
  EXPECT_NE(no_deadline.output.find("--deadline 48h"), std::string::npos) << no_deadline.output;
  testing::CommandResult no_instance = testing::RunCommand(
      Shell("run " + root_ + "/tiny.yaml --price-per-hour 1 --policy uniform-progress --deadline 2h"));
  EXPECT_EQ(no_instance.code, 2) << no_instance.output;
  EXPECT_NE(no_instance.output.find("give --instance"), std::string::npos) << no_instance.output;
  testing::CommandResult unknown = testing::RunCommand(Shell(run + "--policy cheapest --deadline 2h"));
  EXPECT_EQ(unknown.code, 2) << unknown.output;
  EXPECT_NE(unknown.output.find("uniform-progress"), std::string::npos) << unknown.output;
  testing::CommandResult help = testing::RunCommand(Shell("run --help"));
  EXPECT_NE(help.output.find("--policy uniform-progress --deadline 48h"), std::string::npos) << help.output;

  testing::CommandResult ok = testing::RunCommand(
      Shell(run + "--policy uniform-progress --deadline 48h --quiet --set run.dir=" + root_ + "/pol"));
  ASSERT_EQ(ok.code, 0) << ok.output;
  EXPECT_NE(ok.output.find("spot $0.5349/h, on-demand $3.0600/h"), std::string::npos) << ok.output;
  const json st = Status("pol");
  ASSERT_TRUE(st.contains("switches")) << st.dump(2);
  ASSERT_EQ(st["switches"].size(), 1u) << st.dump(2);
  EXPECT_EQ(st["switches"][0]["from"], "none");
  EXPECT_EQ(st["switches"][0]["to"], "spot");
  ASSERT_EQ(st["attempts"].size(), 1u);
  EXPECT_EQ(st["attempts"][0]["billing"], "spot");
  EXPECT_DOUBLE_EQ(st["attempts"][0]["price_per_hour"].get<double>(), 0.5349);
  testing::CommandResult table = testing::RunCommand(Shell("job status " + root_ + "/pol"));
  EXPECT_NE(table.output.find("policy switches:"), std::string::npos) << table.output;
}

TEST_F(RunE2eTest, CancelStopsTheJobAfterTheTrainerSaves) {
  testing::Child run({tern_, "run", root_ + "/tiny.yaml", "--set", "run.dir=" + root_ + "/c", "--set",
                      "train.steps=100000", "--quiet"},
                     Env(), root_ + "/run.log");
  ASSERT_TRUE(WaitRows("c", [](const std::vector<json>& rows) { return MaxStep(rows) >= 3; }));
  testing::CommandResult c = testing::RunCommand(Shell("job cancel " + root_ + "/c"));
  EXPECT_EQ(c.code, 0) << c.output;
  EXPECT_NE(c.output.find("cancelled"), std::string::npos) << c.output;
  EXPECT_EQ(run.Wait(), 1);
  const json s = Status("c");
  EXPECT_EQ(s["state"], "cancelled");
  EXPECT_EQ(s["attempts"][0]["reason"], "cancelled");
  EXPECT_EQ(s["attempts"][0]["exit_code"], 75) << "the trainer saved first";
}

}  // namespace
}  // namespace tern::run
