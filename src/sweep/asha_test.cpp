// ASHA against a case computed by hand (docs/sweep.md has the same picture).
#include "sweep/asha.h"

#include <gtest/gtest.h>

#include "sweep/spec.h"

namespace tern::sweep {
namespace {

TEST(Asha, RungsAreMinTimesEtaToTheKThenMax) {
  EXPECT_EQ(RungSteps({4, 10, 160}), (std::vector<int>{10, 40, 160}));
  EXPECT_EQ(RungSteps({4, 10, 100}), (std::vector<int>{10, 40, 100}));  // max_steps is always the last rung
  EXPECT_EQ(RungSteps({2, 4, 16}), (std::vector<int>{4, 8, 16}));
  EXPECT_EQ(RungSteps({3, 5, 5}), (std::vector<int>{5}));
}

// eta = 2, three rungs. Eight trials finished rung 0 with these losses (trial id: loss):
//   0: 3.0  1: 2.0  2: 5.0  3: 1.0  4: 4.0  5: 6.0  6: 2.5  7: 7.0
// The top floor(8/2) = 4 by loss are 3 (1.0), 1 (2.0), 6 (2.5), 0 (3.0). Trials 3 and 1 were already promoted
// and finished rung 1 with 1.5 and 1.2: the top floor(2/2) = 1 of rung 1 is trial 1, which goes to rung 2
// first. Then the rung-0 survivors still waiting: 6, then 0. Trials 2, 4, 5, 7 stay where they are.
TEST(Asha, PromotesTheTopOneOverEtaOfEachRungHighestRungFirst) {
  std::vector<AshaTrial> t = {{0, {3.0}, true},      {1, {2.0, 1.2}, true}, {2, {5.0}, true},
                              {3, {1.0, 1.5}, true}, {4, {4.0}, true},      {5, {6.0}, true},
                              {6, {2.5}, true},      {7, {7.0}, true}};
  const std::vector<Promotion> p = AshaPromotions(t, 3, 2);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].id, 1);
  EXPECT_EQ(p[0].to_rung, 2);
  EXPECT_EQ(p[1].id, 6);
  EXPECT_EQ(p[1].to_rung, 1);
  EXPECT_EQ(p[2].id, 0);
  EXPECT_EQ(p[2].to_rung, 1);
  EXPECT_EQ(AshaStopReason(t, 5, 2, 4), "rung 0 (4 steps): loss 6.0000 is #7 of 8, only the top 4 go on");
  EXPECT_EQ(AshaStopReason(t, 3, 2, 8), "rung 1 (8 steps): loss 1.5000 is #2 of 2, only the top 1 go on");
}

TEST(Asha, AsynchronousEarlyTrialsWaitForCompany) {
  // One result: floor(1/2) = 0, nobody goes on yet. A second, better one: it goes on, the first waits.
  EXPECT_TRUE(AshaPromotions({{0, {3.0}, true}}, 3, 2).empty());
  const auto p = AshaPromotions({{0, {3.0}, true}, {1, {2.0}, true}}, 3, 2);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].id, 1);
  // A running trial (not waiting) is never promoted, but it counts in the rung.
  EXPECT_TRUE(AshaPromotions({{0, {3.0}, true}, {1, {2.0}, false}}, 3, 2).empty());
  // The last rung is the end: no promotion beyond it.
  EXPECT_TRUE(AshaPromotions({{0, {1.0, 1.0, 1.0}, true}, {1, {2.0, 2.0, 2.0}, true}}, 3, 2).empty());
  // eta 4 with 4 trials: only the best goes on.
  const auto q =
      AshaPromotions({{0, {3.0}, true}, {1, {2.0}, true}, {2, {4.0}, true}, {3, {1.0}, true}}, 2, 4);
  ASSERT_EQ(q.size(), 1u);
  EXPECT_EQ(q[0].id, 3);
}

}  // namespace
}  // namespace tern::sweep
