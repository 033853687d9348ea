// The supervisor against a fake trainer: a shell script written by each test, which appends metrics rows
// the way `tern train` does and ends the way the test needs (exit 0, 75, 1, 2, a signal, a hang). Every path
// of the state machine (supervisor.h), the backoff on a fake clock, and the ledger it leaves.
#include "run/supervisor.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <thread>

#include "run/job_book.h"
#include "run/supervisor_test_util.h"
#include "testing/files.h"
#include "testing/processes.h"
#include "testing/skip.h"

namespace tern::run {
namespace {

using testing::ReadFile;

TEST_F(SupervisorTest, ExitZeroIsDoneInOneAttemptBilledByWallTime) {
  auto out = Supervise(Script("row 1; row 2; row 3; exit 0"));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->exit_code, kRunDone);
  EXPECT_EQ(out->job.state, "done");
  ASSERT_EQ(out->attempts.size(), 1u);
  const AttemptRow& a = out->attempts[0];
  EXPECT_EQ(a.reason, "done");
  EXPECT_EQ(a.exit_code, 0);
  EXPECT_EQ(a.first_step, 1);
  EXPECT_EQ(a.last_step, 3);
  EXPECT_EQ(a.tokens, 3u * 128);
  EXPECT_NEAR(a.productive_s, 0.03, 1e-9);
  EXPECT_GT(a.wall_s, 0);
  EXPECT_NEAR(a.cost_usd, a.wall_s * kPrice / 3600, 1e-12);
  // Both ledgers hold the same rows.
  for (const std::string& path : {RunDirLedgerPath(spec_.run_dir), ledger_path_}) {
    auto l = Ledger::Open(path);
    ASSERT_TRUE(l.ok());
    auto job = (*l)->FindJob(spec_.run_dir);
    ASSERT_TRUE(job.ok() && job->has_value()) << path;
    EXPECT_EQ((*job)->state, "done");
    auto rows = (*l)->Attempts((*job)->job_id);
    ASSERT_TRUE(rows.ok());
    ASSERT_EQ(rows->size(), 1u);
    EXPECT_EQ((*rows)[0].cost_usd, a.cost_usd);
  }
}

TEST_F(SupervisorTest, Exit75RelaunchesAtOnceAndTheNextAttemptStartsFromTheJobsSpend) {
  FakeClock clock;
  auto out = Supervise(Script(R"(
    args > "$DIR/args_$TERN_ATTEMPT"
    if [ "$TERN_ATTEMPT" = 1 ]; then row 1; row 2; preempted 2; exit 75; fi
    resume 2; row 3; row 4; exit 0)"),
                       &clock);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->exit_code, kRunDone);
  ASSERT_EQ(out->attempts.size(), 2u);
  const AttemptRow &a1 = out->attempts[0], &a2 = out->attempts[1];
  EXPECT_EQ(a1.reason, "preempted");
  EXPECT_EQ(a1.message, "saved an emergency checkpoint");
  EXPECT_EQ(a2.reason, "done");
  EXPECT_EQ(a2.start_unix, a1.end_unix) << "no wait after a preemption";
  EXPECT_EQ(a2.resumed_from, 2);
  EXPECT_EQ(a2.first_step, 3);
  EXPECT_EQ(a2.lost_steps, 0);
  // The trainer is told the job's spend so far and when its attempt began.
  const std::string args2 = ReadFile(dir_ / "run/args_2");
  EXPECT_NE(args2.find(fmt::format("run.cost_offset_usd={}", a1.cost_usd)), std::string::npos) << args2;
  EXPECT_NE(args2.find(fmt::format("run.billing_start_unix={:.3f}", a2.start_unix)), std::string::npos);
  EXPECT_NE(args2.find("--resume auto"), std::string::npos);
  EXPECT_NE(args2.find(fmt::format("run.price_per_hour={}", kPrice)), std::string::npos);
  EXPECT_NEAR(out->totals.cost_usd, a1.cost_usd + a2.cost_usd, 1e-15);
}

TEST_F(SupervisorTest, CrashesAndSignalsBackOffExponentiallyAndProgressResetsTheBackoff) {
  FakeClock clock;
  spec_.backoff_s = 1;
  spec_.backoff_max_s = 3;
  auto out = Supervise(Script(R"(
    case "$TERN_ATTEMPT" in
      1) exit 1;;
      2) kill -SEGV $$;;
      3) exit 3;;
      4) row 1; row 2; exit 1;;
      5) exit 1;;
      *) resume 0; row 1; row 2; row 3; exit 0;;
    esac)"),
                       &clock);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->exit_code, kRunDone);
  ASSERT_EQ(out->attempts.size(), 6u);
  const std::vector<std::string> reasons = {"crashed", "signal", "crashed", "crashed", "crashed", "done"};
  // 1, 2, 4 capped at 3; attempt 4 advanced the job: 1 again; attempt 5 is the first failure after it.
  const std::vector<double> waits = {1, 2, 3, 1, 1};
  for (size_t i = 0; i < out->attempts.size(); i++) {
    SCOPED_TRACE(i + 1);
    EXPECT_EQ(out->attempts[i].reason, reasons[i]);
    if (i > 0) {
      EXPECT_NEAR(out->attempts[i].start_unix - out->attempts[i - 1].end_unix, waits[i - 1], 1e-6);
    }
  }
  EXPECT_EQ(out->attempts[1].signal, SIGSEGV);
  EXPECT_EQ(out->attempts[2].exit_code, 3);
  // Attempt 6 started over from step 0 (no checkpoint): steps 1-2 were done before, by attempt 4.
  EXPECT_EQ(out->attempts[5].lost_steps, 2);
  EXPECT_NEAR(out->attempts[5].lost_s, 0.02, 1e-9);
  EXPECT_NEAR(out->attempts[5].lost_usd, 0.02 * kPrice / 3600, 1e-12);
  EXPECT_NEAR(out->attempts[5].productive_s, 0.01, 1e-9);
}

TEST(BackoffTest, DoublesPerFailureUpToTheMaximum) {
  JobSpec s;
  s.backoff_s = 10;
  s.backoff_max_s = 600;
  EXPECT_EQ(BackoffSeconds(s, 1), 10);
  EXPECT_EQ(BackoffSeconds(s, 2), 20);
  EXPECT_EQ(BackoffSeconds(s, 6), 320);
  EXPECT_EQ(BackoffSeconds(s, 7), 600);
  EXPECT_EQ(BackoffSeconds(s, 1000), 600);
}

TEST_F(SupervisorTest, ExitTwoStopsWithoutRetryingAndSaysWhatTheTrainerSaid) {
  auto out = Supervise(Script(
      R"(echo "tern train: data.dir is not set: point it at the output of \`tern prepare\`" >&2; exit 2)"));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->exit_code, kRunBadConfig);
  ASSERT_EQ(out->attempts.size(), 1u);
  EXPECT_EQ(out->attempts[0].reason, "bad_config");
  EXPECT_EQ(out->job.state, "failed");
  EXPECT_NE(out->job.reason.find("data.dir is not set"), std::string::npos) << out->job.reason;
  EXPECT_NE(console_.find("the trainer refused the config (exit 2)"), std::string::npos) << console_;
}

TEST_F(SupervisorTest, ASilentTrainerIsKilledAsHungAndRelaunched) {
  spec_.heartbeat_s = 0.5;
  spec_.kill_grace_s = 0.3;
  spec_.backoff_s = 0.01;
  // Attempt 1 writes a row, then hangs and ignores SIGTERM: it takes the SIGKILL.
  auto out = Supervise(Script(R"(
    if [ "$TERN_ATTEMPT" = 1 ]; then trap '' TERM; row 1; while true; do sleep 0.05; done; fi
    row 1; exit 0)"));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->exit_code, kRunDone);
  ASSERT_EQ(out->attempts.size(), 2u);
  EXPECT_EQ(out->attempts[0].reason, "hung");
  EXPECT_EQ(out->attempts[0].signal, SIGKILL);
  EXPECT_GE(out->attempts[0].wall_s, 0.8);  // heartbeat + grace
  EXPECT_EQ(out->attempts[1].reason, "done");
  EXPECT_EQ(out->attempts[1].lost_steps, 1);
}

TEST_F(SupervisorTest, MaxAttemptsStopsAndSaysWhy) {
  spec_.max_attempts = 3;
  spec_.backoff_s = 0.01;
  auto out = Supervise(Script("exit 1"));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->exit_code, kRunStopped);
  EXPECT_EQ(out->attempts.size(), 3u);
  EXPECT_EQ(out->job.state, "stopped");
  EXPECT_NE(out->job.reason.find("max attempts: 3 attempts made"), std::string::npos) << out->job.reason;
}

TEST_F(SupervisorTest, BudgetStopsARunningTrainerSoThatItSavesAndNoMoreAttemptsStart) {
  spec_.price_per_hour = 3600;  // $1 a second
  spec_.budget_usd = 0.5;
  auto out = Supervise(Script(R"(
    trap 'preempted 1; exit 75' TERM
    row 1; while true; do sleep 0.02; done)"));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->exit_code, kRunStopped);
  ASSERT_EQ(out->attempts.size(), 1u);
  EXPECT_EQ(out->attempts[0].reason, "budget");
  EXPECT_EQ(out->attempts[0].exit_code, 75) << "it was stopped with SIGTERM and saved";
  EXPECT_GE(out->totals.cost_usd, 0.5);
  EXPECT_LT(out->totals.cost_usd, 5.0);
  // Started again: over budget before launching anything.
  auto again = Supervise(Script("exit 0"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->exit_code, kRunStopped);
  EXPECT_EQ(again->attempts.size(), 1u);
  EXPECT_NE(again->job.reason.find("budget: "), std::string::npos) << again->job.reason;
}

TEST_F(SupervisorTest, DeadlineStopsARunningTrainer) {
  FakeClock clock;
  spec_.deadline = "5s";  // fake seconds: about 100 polls
  auto out = Supervise(Script(R"(
    trap 'preempted 1; exit 75' TERM
    row 1; while true; do sleep 0.01; done)"),
                       &clock);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->exit_code, kRunStopped);
  ASSERT_EQ(out->attempts.size(), 1u);
  EXPECT_EQ(out->attempts[0].reason, "deadline");
  EXPECT_EQ(out->job.state, "stopped");
  EXPECT_GE(out->attempts[0].end_unix, out->job.deadline_unix);
}

TEST_F(SupervisorTest, ABackoffThatWouldEndPastTheDeadlineStopsAtOnce) {
  FakeClock clock;
  spec_.deadline = "10s";
  spec_.backoff_s = 4;
  spec_.backoff_max_s = 100;
  auto out = Supervise(Script("exit 1"), &clock);  // attempts at about 0 and 4 s; the next would be at 12
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->exit_code, kRunStopped);
  EXPECT_EQ(out->attempts.size(), 2u);
  EXPECT_NE(out->job.reason.find("could start only after"), std::string::npos) << out->job.reason;
  EXPECT_LT(clock.Now() - out->job.created_unix, 10) << "it did not wait for nothing";
}

TEST_F(SupervisorTest, SigtermToTheSupervisorIsForwardedThenItExits75AndAgainItContinues) {
  std::thread poke([&] {
    WaitForRows(1);
    Supervisor::Interrupt(SIGTERM);
  });
  const std::string script = R"(
    trap 'echo TERM >> "$DIR/got"; preempted 1; exit 75' TERM
    trap 'echo USR1 >> "$DIR/got"; preempted 1; exit 75' USR1
    if [ "$TERN_ATTEMPT" = 3 ]; then exit 0; fi
    row 1; while true; do sleep 0.02; done)";
  auto out = Supervise(Script(script));
  poke.join();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->exit_code, kRunInterrupted);
  EXPECT_EQ(out->job.state, "paused");
  ASSERT_EQ(out->attempts.size(), 1u);
  EXPECT_EQ(out->attempts[0].reason, "interrupted");
  EXPECT_EQ(out->attempts[0].exit_code, 75);
  EXPECT_EQ(ReadFile(dir_ / "run/got"), "TERM\n");
  // SIGUSR1 (Slurm's warning) is forwarded as itself.
  std::thread poke2([&] {
    WaitForRows(3);  // the first attempt's row, its preempted row, and this one's row
    Supervisor::Interrupt(SIGUSR1);
  });
  auto second = Supervise(Script(script));
  poke2.join();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->exit_code, kRunInterrupted);
  EXPECT_EQ(ReadFile(dir_ / "run/got"), "TERM\nUSR1\n");
  auto third = Supervise(Script(script));
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->exit_code, kRunDone);
  EXPECT_EQ(third->attempts.size(), 3u) << "attempt numbers continue across supervisors";
}

TEST_F(SupervisorTest, CancelStopsTheTrainerAndTheJob) {
  std::thread cancel([&] {
    WaitForRows(1);
    auto l = Ledger::Open(RunDirLedgerPath(spec_.run_dir));
    ASSERT_TRUE(l.ok());
    auto job = (*l)->FindJob(spec_.run_dir);
    ASSERT_TRUE(job.ok() && *job);
    ASSERT_TRUE((*l)->SetCancel((*job)->job_id, true).ok());
  });
  auto out = Supervise(Script("trap 'preempted 1; exit 75' TERM; row 1; while true; do sleep 0.02; done"));
  cancel.join();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->exit_code, kRunStopped);
  EXPECT_EQ(out->job.state, "cancelled");
  EXPECT_EQ(out->attempts.back().reason, "cancelled");
}

TEST_F(SupervisorTest, ASecondSupervisorOnTheSameRunDirectoryIsRefused) {
  auto lock = RunDirLock::Take(spec_.run_dir);
  ASSERT_TRUE(lock.ok());
  auto out = Supervise(Script("exit 0"));
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("another `tern run`"), std::string::npos) << out.status().message();
}

TEST_F(SupervisorTest, AMissingTrainerProgramIsALaunchFailureNotARetryLoop) {
  trainer_ = {(dir_ / "no_such_trainer").string()};
  auto out = Supervise();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->exit_code, kRunStopped);
  ASSERT_EQ(out->attempts.size(), 1u);
  EXPECT_EQ(out->attempts[0].reason, "launch_failed");
}

TEST_F(SupervisorTest, RanksAboveOneLaunchThroughMpirun) {
  if (testing::FindProgram("mpirun").empty())
    TERN_SKIP_OR_FAIL_IN_CI("mpirun is not on PATH; scripts/install-deps installs openmpi-bin");
  spec_.ranks = 2;
  spec_.mpirun_args = {"--oversubscribe"};
  if (geteuid() == 0) spec_.mpirun_args.push_back("--allow-run-as-root");
  auto out = Supervise(Script(R"(echo "$OMPI_COMM_WORLD_RANK" >> "$DIR/ranks"; exit 0)"));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->exit_code, kRunDone) << console_;
  const std::string ranks = ReadFile(dir_ / "run/ranks");
  EXPECT_TRUE(ranks == "0\n1\n" || ranks == "1\n0\n") << ranks;
  EXPECT_EQ(out->attempts[0].ranks, 2);
}

TEST_F(SupervisorTest, MpirunsExitOneAfterRanksThatSavedIsAPreemption) {
  if (testing::FindProgram("mpirun").empty())
    TERN_SKIP_OR_FAIL_IN_CI("mpirun is not on PATH; scripts/install-deps installs openmpi-bin");
  spec_.ranks = 2;
  spec_.mpirun_args = {"--oversubscribe"};
  if (geteuid() == 0) spec_.mpirun_args.push_back("--allow-run-as-root");
  spec_.backoff_s = 60;  // a crash would wait a minute: the test would time out
  FakeClock clock;
  auto out = Supervise(Script(R"(
    if [ "$TERN_ATTEMPT" = 2 ]; then exit 0; fi
    if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then row 1; preempted 1; fi
    exit 1)"),
                       &clock);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->exit_code, kRunDone) << console_;
  ASSERT_EQ(out->attempts.size(), 2u);
  EXPECT_EQ(out->attempts[0].reason, "preempted");
  EXPECT_EQ(out->attempts[1].start_unix, out->attempts[0].end_unix) << "relaunched at once";
}

TEST_F(SupervisorTest, ARunDirectoryLedgerDeletedWithTheRunIsRebuiltFromTheGlobalOne) {
  auto first = Supervise(Script("row 1; exit 0"));
  ASSERT_TRUE(first.ok());
  std::filesystem::remove(RunDirLedgerPath(spec_.run_dir));
  auto second = Supervise(Script("row 2; exit 0"));
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  ASSERT_EQ(second->attempts.size(), 2u);
  EXPECT_EQ(second->attempts[1].attempt, 2);
  auto local = Ledger::Open(RunDirLedgerPath(spec_.run_dir));
  ASSERT_TRUE(local.ok());
  auto rows = (*local)->Attempts(second->job.job_id);
  ASSERT_TRUE(rows.ok());
  EXPECT_EQ(rows->size(), 2u) << "the run directory's copy has attempt 1 again";
}

}  // namespace
}  // namespace tern::run
