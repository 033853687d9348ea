// ckpt.every=auto's arithmetic: Young's and Daly's intervals against hand-computed values, the interval in
// steps from a measured save and step time, re-tuning when the measured save time changes, and its bounds.
#include "ckpt/interval.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tern::ckpt {
namespace {

TEST(IntervalTest, YoungAndDalyMatchTheHandComputedCase) {
  // delta = 10 s, M = 2 h = 7200 s.
  // Young: sqrt(2 * 10 * 7200) = sqrt(144000) = 379.473 s.
  EXPECT_NEAR(YoungInterval(10, 7200), 379.4733, 1e-3);
  // Daly: r = delta / 2M = 10 / 14400 = 6.9444e-4; sqrt(r) = 0.026352;
  // 379.473 * (1 + 0.026352 / 3 + 6.9444e-4 / 9) - 10 = 379.473 * 1.0088613 - 10 = 372.836 s.
  EXPECT_NEAR(DalyInterval(10, 7200), 372.8359, 1e-3);
  // delta >= 2M: checkpoint once per M.
  EXPECT_DOUBLE_EQ(DalyInterval(20000, 7200), 7200);
  EXPECT_EQ(YoungInterval(0, 7200), 0);
  EXPECT_EQ(DalyInterval(10, 0), 0);
}

IntervalOptions Options() {
  IntervalOptions o;
  o.mtbf_s = 7200;
  o.mtbf_source = "test";
  o.first_guess_save_s = 10;
  return o;
}

TEST(IntervalTest, FirstGuessThenMeasuredSavesRetuneTheInterval) {
  IntervalTuner tuner(Options());
  EXPECT_FALSE(tuner.Retune()) << "no step time yet: no interval";
  tuner.ObserveStep(2.0, false);
  auto first = tuner.Retune();
  ASSERT_TRUE(first);
  // The first guess (delta 10 s): 372.836 s / 2 s per step = 186.4 -> 186 steps.
  EXPECT_EQ(first->every, 186);
  EXPECT_EQ(first->previous, 0);
  EXPECT_FALSE(first->measured);
  EXPECT_EQ(first->bound, "daly");
  EXPECT_EQ(first->mtbf_source, "test");
  EXPECT_FALSE(tuner.Retune()) << "nothing new: no change";

  // A measured synchronous save of 40 s (stall 40 s, copy and persist inside it): r = 40/14400;
  // sqrt(576000) * (1 + sqrt(r)/3 + r/9) - 40 = 732.514 s -> 366.3 -> 366 steps.
  tuner.ObserveSave(40, 0, 0);
  auto second = tuner.Retune();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->every, 366);
  EXPECT_EQ(second->previous, 186);
  EXPECT_TRUE(second->measured);
  EXPECT_DOUBLE_EQ(second->delta_s, 40);
  EXPECT_EQ(tuner.every(), 366);

  // The same save time again: no change.
  tuner.ObserveSave(40, 0, 0);
  EXPECT_FALSE(tuner.Retune());

  // Saves get faster (10 s): the average (half weight on the newest) moves to 25 s; the interval shrinks.
  tuner.ObserveSave(10, 0, 0);
  auto third = tuner.Retune();
  ASSERT_TRUE(third);
  EXPECT_DOUBLE_EQ(third->delta_s, 25);
  EXPECT_EQ(third->every, static_cast<int>(std::round(DalyInterval(25, 7200) / 2)));
  EXPECT_LT(third->every, 366);
}

TEST(IntervalTest, AnAsyncSaveCostsItsStallPlusTheSlowdownBesideTheWriter) {
  IntervalTuner tuner(Options());
  tuner.ObserveStep(2.0, false);
  tuner.SaveStarted();
  tuner.ObserveStep(9.0,
                    true);  // waits for the snapshot copy: in the stall, not counted as beside the writer
  tuner.ObserveStep(2.5, true);
  tuner.ObserveSave(0.5, 0, 30);
  const IntervalDecision d = tuner.Compute();
  // Steps beside the writer took 2.5 s against 2.0 s: it cost 1 - 2.0/2.5 = 20% of its 30 s.
  EXPECT_NEAR(d.interference_s, 6.0, 1e-9);
  EXPECT_NEAR(d.delta_s, 6.5, 1e-9);
  EXPECT_NEAR(d.tau_s, DalyInterval(6.5, 7200), 1e-9);
  // Step time average: 2.0, then 0.8*2 + 0.2*9 = 3.4, then 0.8*3.4 + 0.2*2.5 = 3.22.
  EXPECT_NEAR(d.step_s, 3.22, 1e-9);
  EXPECT_EQ(d.every, static_cast<int>(std::round(DalyInterval(6.5, 7200) / 3.22)));
}

TEST(IntervalTest, AWaitForThePreviousSaveIsNotPartOfDelta) {
  IntervalTuner tuner(Options());
  tuner.ObserveStep(2.0, false);
  tuner.ObserveSave(12, 10, 8);  // 10 of the 12 s stall waited for the save before
  const IntervalDecision d = tuner.Compute();
  EXPECT_DOUBLE_EQ(d.stall_s, 2);
  EXPECT_DOUBLE_EQ(d.wait_s, 10);
  EXPECT_DOUBLE_EQ(d.delta_s, 2);
  EXPECT_DOUBLE_EQ(d.writer_s, 8);
}

TEST(IntervalTest, BoundsThePersistPaceTheMaximumAndOneStep) {
  {  // A nearly free stall: Young says every 2 steps, but the writer needs 15 steps' time to persist.
    IntervalTuner tuner(Options());
    tuner.ObserveStep(2.0, false);
    tuner.ObserveSave(0.001, 0, 30);
    auto d = tuner.Retune();
    ASSERT_TRUE(d);
    EXPECT_EQ(d->every, 15);
    EXPECT_EQ(d->bound, "writer");
  }
  {
    IntervalOptions o = Options();
    o.max_steps = 50;
    IntervalTuner tuner(o);
    tuner.ObserveStep(2.0, false);
    auto d = tuner.Retune();
    ASSERT_TRUE(d);
    EXPECT_EQ(d->every, 50);
    EXPECT_EQ(d->bound, "max");
  }
  {
    IntervalOptions o = Options();
    o.first_guess_save_s = 1e-6;
    IntervalTuner tuner(o);
    tuner.ObserveStep(100.0, false);
    auto d = tuner.Retune();
    ASSERT_TRUE(d);
    EXPECT_EQ(d->every, 1);
    EXPECT_EQ(d->bound, "min");
  }
}

TEST(IntervalTest, SmallMovesAreNotChanges) {
  IntervalTuner tuner(Options());
  tuner.ObserveStep(2.0, false);
  ASSERT_TRUE(tuner.Retune());  // 186 steps
  tuner.ObserveSave(11, 0, 0);  // delta 11 s: 390.9 s -> 195 steps, within 10% of 186
  EXPECT_FALSE(tuner.Retune());
  EXPECT_EQ(tuner.every(), 186);
}

TEST(IntervalTest, ParsesDurations) {
  EXPECT_DOUBLE_EQ(ParseDurationSeconds("21600", "ckpt.mtbf").value(), 21600);
  EXPECT_DOUBLE_EQ(ParseDurationSeconds("90s", "ckpt.mtbf").value(), 90);
  EXPECT_DOUBLE_EQ(ParseDurationSeconds("10m", "ckpt.mtbf").value(), 600);
  EXPECT_DOUBLE_EQ(ParseDurationSeconds("6h", "ckpt.mtbf").value(), 21600);
  EXPECT_DOUBLE_EQ(ParseDurationSeconds("1.5d", "ckpt.mtbf").value(), 129600);
  for (const char* bad : {"", "h", "6 hours", "6y", "-2h", "0"}) {
    auto r = ParseDurationSeconds(bad, "ckpt.mtbf");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("ckpt.mtbf"), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace tern::ckpt
