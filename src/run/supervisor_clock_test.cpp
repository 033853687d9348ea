// The system clock jumping while `tern run` supervises (NTP stepping it, an administrator, a VM resumed):
// the supervisor measures durations on the monotonic clock (run/clock.h), so a jump of hours neither makes a
// working trainer look hung, nor stretches a backoff wait, nor bills time that did not pass.
#include <gtest/gtest.h>

#include <numeric>

#include "run/supervisor.h"
#include "run/supervisor_test_util.h"

namespace tern::run {
namespace {

// Every 4th Sleep the system clock is set 2 h ahead, the next time 2 h back, and so on.
class JumpingClock : public FakeClock {
 public:
  void Sleep(double seconds) override {
    FakeClock::Sleep(seconds);
    if (++sleeps_ % 4 == 0) {
      Jump(sign_ * 7200);
      sign_ = -sign_;
      jumps++;
    }
  }
  int jumps = 0;

 private:
  int sleeps_ = 0;
  double sign_ = 1;
};

TEST_F(SupervisorTest, AJumpingSystemClockBreaksNeitherHeartbeatsNorBackoffNorBilling) {
  JumpingClock clock;
  spec_.heartbeat_s = 60;  // fake time runs ~50x real time here: ~15 s per attempt, far from 60
  spec_.backoff_s = 1;
  auto out = Supervise(Script(R"(
    if [ "$TERN_ATTEMPT" = 1 ]; then row 1; sleep 0.3; exit 1; fi
    resume 0; row 1; sleep 0.3; row 2; exit 0)"),
                       &clock);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_GT(clock.jumps, 4);
  EXPECT_EQ(out->exit_code, kRunDone);
  ASSERT_EQ(out->attempts.size(), 2u);
  EXPECT_EQ(out->attempts[0].reason, "crashed") << "a jump ahead is not a silent trainer";
  EXPECT_EQ(out->attempts[1].reason, "done");
  for (const AttemptRow& a : out->attempts) {
    EXPECT_GT(a.wall_s, 0);
    EXPECT_LT(a.wall_s, 100) << "billed for the time that passed, not for the jumps";
    EXPECT_NEAR(a.cost_usd, a.wall_s * kPrice / 3600, 1e-12);
  }
  const double slept = std::accumulate(clock.sleeps.begin(), clock.sleeps.end(), 0.0);
  EXPECT_LT(slept, 200) << "the 1 s backoff did not become 2 h when the clock went back";
}

}  // namespace
}  // namespace tern::run
