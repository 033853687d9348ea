// A supervisor killed with -9 and started again on the same run directory carries on: the attempt its
// predecessor left "running" is closed as lost (with its steps and its bill until last seen), a trainer
// that outlived it is stopped first, and attempt numbers continue.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include "run/job_book.h"
#include "run/launcher.h"
#include "run/supervisor_test_util.h"

namespace tern::run {
namespace {

class SupervisorRestartTest : public SupervisorTest {
 protected:
  // Forks a supervisor on spec_ and the last Script, waits until its first attempt has written `rows`
  // rows, and kills it with SIGKILL. Returns the attempt's trainer pid, as the ledger recorded it.
  int StartAndKillSupervisor(size_t rows) {
    const pid_t child = fork();
    if (child == 0) {
      SupervisorOptions o;
      o.spec = spec_;
      o.trainer = trainer_;
      o.ledger_path = ledger_path_;
      o.poll_s = 0.02;
      o.console = nullptr;
      o.handle_signals = false;
      RealClock clock;
      LocalLauncher launcher;
      Supervisor s(o, &clock, &launcher);
      (void)s.Run();  // killed long before it returns
      _exit(0);
    }
    WaitForRows(rows);
    std::this_thread::sleep_for(std::chrono::milliseconds(2100));  // one ledger update while it runs
    kill(child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
    EXPECT_TRUE(WIFSIGNALED(status));
    auto book = JobBook::Open(spec_.run_dir, ledger_path_);
    EXPECT_TRUE(book.ok());
    if (!book.ok() || (*book)->attempts().empty()) return 0;
    EXPECT_EQ((*book)->attempts().back().state, "running");
    return (*book)->attempts().back().trainer_pid;
  }
};

TEST_F(SupervisorRestartTest, KilledWithSigkillThenRestartedClosesTheAttemptAsLostAndContinues) {
  // Attempt 1 runs until its supervisor dies: PR_SET_PDEATHSIG sends it SIGTERM, and it saves.
  Script(R"(
    trap 'preempted 2; exit 75' TERM
    if [ "$TERN_ATTEMPT" = 1 ]; then row 1; row 2; while true; do sleep 0.02; done; fi
    resume 2; row 3; exit 0)");
  const int pid = StartAndKillSupervisor(2);
  ASSERT_GT(pid, 0);
  auto out = Supervise();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->exit_code, kRunDone);
  ASSERT_EQ(out->attempts.size(), 2u);
  const AttemptRow &lost = out->attempts[0], &next = out->attempts[1];
  EXPECT_EQ(lost.state, "lost");
  EXPECT_EQ(lost.reason, "lost");
  EXPECT_EQ(lost.first_step, 1);
  EXPECT_EQ(lost.last_step, 2);
  EXPECT_GT(lost.wall_s, 2.0) << "billed until last seen";
  EXPECT_NEAR(lost.cost_usd, lost.wall_s * kPrice / 3600, 1e-12);
  EXPECT_EQ(next.attempt, 2);
  EXPECT_EQ(next.reason, "done");
  EXPECT_EQ(next.resumed_from, 2);
  EXPECT_NE(console_.find("attempt 1 closed as lost"), std::string::npos) << console_;
}

TEST_F(SupervisorRestartTest, ATrainerThatOutlivedItsSupervisorIsStoppedBeforeTheNextAttempt) {
  spec_.kill_grace_s = 0.5;
  // Attempt 1 ignores SIGTERM (its parent's death signal and the successor's): only SIGKILL ends it.
  Script(R"(
    if [ "$TERN_ATTEMPT" = 1 ]; then trap '' TERM; row 1; while true; do sleep 0.02; done; fi
    row 1; exit 0)");
  const int pid = StartAndKillSupervisor(1);
  ASSERT_GT(pid, 0);
  const std::string start = ProcessStartTime(pid);
  ASSERT_TRUE(ProcessAlive(pid, start)) << "the orphan is still running";
  auto out = Supervise();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_FALSE(ProcessAlive(pid, start)) << "stopped before attempt 2 started";
  EXPECT_NE(console_.find("outlived its supervisor"), std::string::npos) << console_;
  ASSERT_EQ(out->attempts.size(), 2u);
  EXPECT_EQ(out->attempts[0].reason, "lost");
  EXPECT_EQ(out->attempts[1].reason, "done");
}

}  // namespace
}  // namespace tern::run
