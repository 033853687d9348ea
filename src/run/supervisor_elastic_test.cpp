// Elastic jobs (job.ranks MIN-MAX) against fake trainers: an attempt starts with the ranks the probe says can
// run (fewer after a rank was lost, more again when they are back), waits while fewer than MIN can, and the
// ledger records each attempt's ranks. Also the MIN-MAX key and the probe itself.
#include <gtest/gtest.h>
#include <unistd.h>

#include "run/elastic.h"
#include "run/supervisor_test_util.h"
#include "testing/processes.h"
#include "testing/skip.h"

namespace tern::run {
namespace {

using testing::ReadFile;

TEST(ElasticTest, RanksMinMaxParsesAndTheChoiceFollowsTheProbe) {
  JobSpec s;
  ASSERT_TRUE(SetJobKey("ranks", "1-4", &s).ok());
  EXPECT_EQ(s.min_ranks, 1);
  EXPECT_EQ(s.ranks, 4);
  EXPECT_TRUE(Elastic(s));
  EXPECT_NE(SetJobKey("ranks", "3-2", &s).message().find("MIN-MAX"), std::string::npos);
  EXPECT_FALSE(SetJobKey("ranks", "0-2", &s).ok());
  ASSERT_TRUE(SetJobKey("ranks", "2-4", &s).ok());
  EXPECT_EQ(ChooseRanks(s, 8).ranks, 4);
  EXPECT_EQ(ChooseRanks(s, 3).ranks, 3);
  EXPECT_NE(ChooseRanks(s, 3).why.find("3 of at most 4"), std::string::npos);
  EXPECT_EQ(ChooseRanks(s, 1).ranks, 0);
  EXPECT_NE(ChooseRanks(s, 1).why.find("at least 2"), std::string::npos);
  EXPECT_EQ(ChooseRanks(s, Status::Unavailable("no probe")).ranks, 4) << "a failed probe tries the maximum";
  s.where = "slurm";
  EXPECT_NE(ValidateJobSpec(s).message().find("--on local"), std::string::npos);
  ASSERT_TRUE(SetJobKey("ranks", "3", &s).ok());
  EXPECT_FALSE(Elastic(s));
  EXPECT_EQ(ChooseRanks(s, 1).ranks, 3) << "not elastic: the probe is not asked";

  s.ranks_probe = "echo 2";
  EXPECT_EQ(ProbeRanks(s).value(), 2);
  s.ranks_probe = "echo lots";
  EXPECT_NE(ProbeRanks(s).status().message().find("whole number"), std::string::npos);
  s.ranks_probe.clear();
  EXPECT_EQ(ProbeRanks(s).value(), 3) << "a CPU job without a probe: the maximum";
}

class ElasticSupervisorTest : public SupervisorTest {
 protected:
  void SetUp() override {
    SupervisorTest::SetUp();
    if (testing::FindProgram("mpirun").empty())
      TERN_SKIP_OR_FAIL_IN_CI("mpirun is not on PATH; scripts/install-deps installs openmpi-bin");
    spec_.mpirun_args = {"--oversubscribe"};
    if (geteuid() == 0) spec_.mpirun_args.push_back("--allow-run-as-root");
    ASSERT_TRUE(SetJobKey("ranks", "1-2", &spec_).ok());
    spec_.ranks_probe = "cat '" + (dir_ / "available").string() + "'";
  }
  void Available(int n) { testing::WriteFile((dir_ / "available").string(), std::to_string(n) + "\n"); }
};

// Two ranks, preempted; meanwhile one of them went away: the relaunch has one rank; that one is preempted
// too and both are back: the third attempt has two again.
TEST_F(ElasticSupervisorTest, ARelaunchStartsWithTheRanksThatCanRunNow) {
  Available(2);
  auto out = Supervise(Script(R"(
    echo "$TERN_ATTEMPT ${OMPI_COMM_WORLD_SIZE:-1}" >> "$DIR/sizes"
    case "$TERN_ATTEMPT" in
      1) sleep 0.2; echo 1 > "$DIR/../available"; row 1; preempted 1; exit 75 ;;
      2) echo 2 > "$DIR/../available"; row 2; preempted 2; exit 75 ;;
    esac
    row 3; exit 0)"));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->exit_code, kRunDone) << console_;
  ASSERT_EQ(out->attempts.size(), 3u) << console_;
  EXPECT_EQ(out->attempts[0].ranks, 2);
  EXPECT_EQ(out->attempts[1].ranks, 1);
  EXPECT_EQ(out->attempts[2].ranks, 2);
  EXPECT_EQ(ReadFile(dir_ / "run/sizes"), "1 2\n1 2\n2 1\n3 2\n3 2\n");
  EXPECT_NE(console_.find("1 of at most 2 ranks can run now"), std::string::npos) << console_;
  auto local = Ledger::Open(RunDirLedgerPath(spec_.run_dir));
  ASSERT_TRUE(local.ok());
  auto rows = (*local)->Attempts(out->job.job_id);
  ASSERT_TRUE(rows.ok() && rows->size() == 3u);
  EXPECT_EQ((*rows)[1].ranks, 1) << "the ledger keeps each attempt's ranks";
}

// Fewer than the minimum: no attempt is spent; the supervisor waits (the backoff) and asks again.
TEST_F(ElasticSupervisorTest, WithFewerThanTheMinimumItWaitsWithoutSpendingAnAttempt) {
  ASSERT_TRUE(SetJobKey("ranks", "2-3", &spec_).ok());
  spec_.max_attempts = 1;
  // The probe says 1 twice, then 2.
  spec_.ranks_probe = "n=$(cat '" + (dir_ / "asked").string() +
                      "' 2>/dev/null || echo 0); n=$((n + 1)); echo $n > '" + (dir_ / "asked").string() +
                      "'; if [ $n -ge 3 ]; then echo 2; else echo 1; fi";
  auto out = Supervise(Script(R"(echo "${OMPI_COMM_WORLD_SIZE:-1}" >> "$DIR/sizes"; row 1; exit 0)"));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->exit_code, kRunDone) << console_;
  ASSERT_EQ(out->attempts.size(), 1u);
  EXPECT_EQ(out->attempts[0].ranks, 2);
  EXPECT_EQ(ReadFile(dir_ / "run/sizes"), "2\n2\n");
  EXPECT_NE(console_.find("only 1 rank can run now, job.ranks needs at least 2"), std::string::npos)
      << console_;
  EXPECT_EQ(ReadFile(dir_ / "asked"), "3\n");
}

}  // namespace
}  // namespace tern::run
