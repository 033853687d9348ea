// The spot simulator: analytic cases by hand, and on every start offset of the shipped traces (both
// polarities) Uniform Progress never misses a deadline that on-demand alone meets and the omniscient bound
// is never above a policy that finished in time.
#include "plan/spot_sim.h"

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

namespace tern::plan {
namespace {

SpotTrace MakeTrace(size_t ticks, double gap_s, size_t down_from = 0, size_t down_to = 0) {
  SpotTrace t;
  t.zone = "test-1a";
  t.gap_s = gap_s;
  t.up.assign(ticks, 1);
  for (size_t i = down_from; i < down_to; i++) t.up[i] = 0;
  return t;
}

SimJob Job(double work, double deadline) {
  SimJob j;
  j.work_h = work;
  j.deadline_h = deadline;
  j.restart_h = 0.1;
  j.spot_usd_h = 1.0;
  j.ondemand_usd_h = 3.0;
  return j;
}

TEST(SpotTraceTest, ParsesBothPolaritiesAndNamesErrors) {
  const std::string text = R"({"metadata": {"gap_seconds": 60}, "data": [0, 1, 2, 0]})";
  auto a = ParseSpotTrace(text, "x/availability/us-east-1c_v100_1.json", Polarity::kAvailableIfNonzero);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->zone, "us-east-1c");
  EXPECT_EQ(a->Region(), "us-east-1");
  EXPECT_EQ(a->family, "availability");
  EXPECT_EQ(a->up, (std::vector<uint8_t>{0, 1, 1, 0}));
  auto u = ParseSpotTrace(text, "x/availability/z_1.json", Polarity::kUnavailableIfNonzero);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->up, (std::vector<uint8_t>{1, 0, 0, 1}));
  // The preemption family has one reading whatever the option says.
  auto p = ParseSpotTrace(text, "x/preemption/z_1.json", Polarity::kUnavailableIfNonzero);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->polarity, Polarity::kAvailableIfNonzero);
  EXPECT_EQ(p->up, (std::vector<uint8_t>{0, 1, 1, 0}));

  for (const char* bad : {"[1,2]", R"({"data": [1]})", R"({"metadata": {"gap_seconds": 0}, "data": [1]})",
                          R"({"metadata": {"gap_seconds": 60}, "data": []})",
                          R"({"metadata": {"gap_seconds": 60}, "data": [1, "x"]})", "{"}) {
    auto r = ParseSpotTrace(bad, "bad.json", Polarity::kAvailableIfNonzero);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("bad.json"), std::string::npos) << r.status().message();
  }
  EXPECT_FALSE(ParsePolarity("nonzero").ok());
}

TEST(SpotTraceTest, EstimatesHazardFromRuns) {
  SpotTrace t = MakeTrace(100, 360, 30, 50);  // 0.1 h ticks, one 2-hour outage
  t.up[80] = 0;                               // and a one-tick outage
  const HazardEstimate h = EstimateHazard(t);
  EXPECT_EQ(h.preemptions, 2);
  EXPECT_NEAR(h.up_hours, 7.9, 1e-9);
  EXPECT_NEAR(h.mtbf_h, 7.9 / 2, 1e-9);
  EXPECT_NEAR(h.mean_outage_h, (2.0 + 0.1) / 2, 1e-9);
  EXPECT_NEAR(h.longest_outage_h, 2.0, 1e-9);
}

TEST(SpotSimTest, AlwaysAvailableCostsSpotPriceTimesWork) {
  const SpotTrace t = MakeTrace(1000, 360);
  SimJob j = Job(10, 20);
  for (SpotPolicy p : {SpotPolicy::kSpot, SpotPolicy::kUniformProgress}) {
    const SimRun r = Simulate(t, 0, j, p);
    EXPECT_TRUE(r.met_deadline) << SpotPolicyName(p);
    EXPECT_NEAR(r.cost_usd, 1.0 * (10 + 0.1), 1e-9) << SpotPolicyName(p);
    EXPECT_NEAR(r.wall_h, 10.1, 1e-9);
    EXPECT_EQ(r.preemptions, 0);
  }
  const SimRun od = Simulate(t, 0, j, SpotPolicy::kOnDemand);
  EXPECT_NEAR(od.cost_usd, 3.0 * 10.1, 1e-9);
  // With saves every hour of work at 0.01 h each: nine saves (none after the last hour).
  j.checkpoint_h = 0.01;
  j.interval_h = 1;
  const SimRun s = Simulate(t, 0, j, SpotPolicy::kSpot);
  EXPECT_NEAR(s.checkpoint_h, 0.09, 1e-9);
  EXPECT_NEAR(s.cost_usd, 10.1 + 0.09, 1e-9);
  EXPECT_NEAR(OmniscientBound(t, 0, j).cost_usd, 10.0, 1e-9);
}

TEST(SpotSimTest, NeverAvailableSpotMissesUniformProgressIsOnDemand) {
  SpotTrace t = MakeTrace(1000, 360, 0, 1000);
  const SimJob j = Job(10, 20);
  const SimRun spot = Simulate(t, 0, j, SpotPolicy::kSpot);
  EXPECT_FALSE(spot.finished);
  EXPECT_FALSE(spot.met_deadline);
  EXPECT_EQ(spot.cost_usd, 0);
  const SimRun up = Simulate(t, 0, j, SpotPolicy::kUniformProgress);
  const SimRun od = Simulate(t, 0, j, SpotPolicy::kOnDemand);
  EXPECT_TRUE(up.met_deadline);
  EXPECT_NEAR(up.cost_usd, od.cost_usd, 1e-9);
  EXPECT_NEAR(up.ondemand_h, 10.1, 1e-9);
  EXPECT_NEAR(OmniscientBound(t, 0, j).cost_usd, 30.0, 1e-9);
}

// 0.1 h ticks, down from 3.0 h to 5.0 h; work 10 h, saves every hour at 0.05 h (3 min: more than the
// 2-minute notice, so a preemption loses the work since the last save).
TEST(SpotSimTest, OneOutageByHand) {
  const SpotTrace t = MakeTrace(1000, 360, 30, 50);
  SimJob j = Job(10, 30);
  j.checkpoint_h = 0.05;
  j.interval_h = 1;
  // Spot: restart 0.1, work 1, save, work 1, save (2 h saved at 2.2 h), 0.8 h more, preempted at 3.0 h
  // (0.8 h lost); back at 5.0 h: restart 0.1, 8 h of work with 7 saves: done at 13.45 h.
  // Billed: 3.0 h + 8.45 h of spot.
  for (SpotPolicy p : {SpotPolicy::kSpot, SpotPolicy::kUniformProgress}) {
    const SimRun r = Simulate(t, 0, j, p);
    EXPECT_TRUE(r.met_deadline) << SpotPolicyName(p);
    EXPECT_EQ(r.preemptions, 1);
    EXPECT_NEAR(r.lost_h, 0.8, 1e-9);
    EXPECT_NEAR(r.wall_h, 13.45, 1e-9) << SpotPolicyName(p);
    EXPECT_NEAR(r.spot_h, 11.45, 1e-9);
    EXPECT_NEAR(r.cost_usd, 11.45, 1e-9);
    EXPECT_EQ(r.ondemand_h, 0);
  }
  const SimRun od = Simulate(t, 0, j, SpotPolicy::kOnDemand);
  EXPECT_NEAR(od.cost_usd, 30.3, 1e-9);                        // 10.1 h x $3: no saves on on-demand
  EXPECT_NEAR(OmniscientBound(t, 0, j).cost_usd, 10.0, 1e-9);  // 28 h of spot in the window

  // A save that fits in the notice (0.02 h = 72 s < 2 min): the preemption loses nothing.
  j.checkpoint_h = 0.02;
  const SimRun saved = Simulate(t, 0, j, SpotPolicy::kSpot);
  EXPECT_EQ(saved.preemptions, 1);
  EXPECT_EQ(saved.lost_h, 0);

  // A tight deadline (12 h: on-demand alone finishes at 10.1 h): Uniform Progress catches up on
  // on-demand after the preemption and still makes it; spot alone does not.
  j = Job(10, 12);
  j.checkpoint_h = 0.05;
  j.interval_h = 1;
  EXPECT_FALSE(Simulate(t, 0, j, SpotPolicy::kSpot).met_deadline);
  std::vector<Cluster> decisions;
  const SimRun up = Simulate(t, 0, j, SpotPolicy::kUniformProgress, &decisions);
  EXPECT_TRUE(up.met_deadline);
  EXPECT_GT(up.ondemand_h, 0);
  EXPECT_LT(up.cost_usd, od.cost_usd);
  EXPECT_GE(up.cost_usd, OmniscientBound(t, 0, j).cost_usd);
  ASSERT_GT(decisions.size(), 31u);
  EXPECT_EQ(decisions[0], Cluster::kSpot);
  EXPECT_EQ(decisions[30], Cluster::kOnDemand);  // preempted and behind: rule 1
}

TEST(SpotSimTest, PoliciesParse) {
  auto all = ParseSpotPolicies("all");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 4u);
  auto two = ParseSpotPolicies("spot, uniform-progress,spot");
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(*two, (std::vector<SpotPolicy>{SpotPolicy::kSpot, SpotPolicy::kUniformProgress}));
  EXPECT_FALSE(ParseSpotPolicies("greedy").ok());
}

// Every start offset of every shipped trace, both polarities, a 24-hour job with a 48- and a 30-hour
// deadline, restart 0.2 h, saves of 0.05 h (the emergency save does not fit: preemptions lose work).
TEST(SpotSimTest, UniformProgressNeverMissesOnShippedTraces) {
  const char* src = std::getenv("TERN_SOURCE_DIR");
  const std::string dir = std::string(src ? src : TERN_TEST_SOURCE_DIR) + "/data/spot-traces";
  for (Polarity pol : {Polarity::kAvailableIfNonzero, Polarity::kUnavailableIfNonzero}) {
    auto traces = LoadSpotTraces({dir}, pol);
    ASSERT_TRUE(traces.ok()) << traces.status().ToString();
    ASSERT_EQ(traces->size(), 13u);
    for (double deadline : {48.0, 30.0}) {
      SimJob j = Job(24, deadline);
      j.restart_h = 0.2;
      j.checkpoint_h = 0.05;
      for (const SpotTrace& t : *traces) {
        const size_t n = t.ticks();
        for (size_t k = 0; k < 50; k++) {
          const size_t start = k * n / 50;
          const SimRun od = Simulate(t, start, j, SpotPolicy::kOnDemand);
          const SimRun up = Simulate(t, start, j, SpotPolicy::kUniformProgress);
          const SimRun bound = OmniscientBound(t, start, j);
          ASSERT_TRUE(od.met_deadline);
          ASSERT_TRUE(up.met_deadline) << t.file << " " << PolarityName(pol) << " start " << start
                                       << " deadline " << deadline << " wall " << up.wall_h;
          EXPECT_LE(bound.cost_usd, up.cost_usd + 1e-9) << t.file;
          const SimRun spot = Simulate(t, start, j, SpotPolicy::kSpot);
          if (spot.met_deadline) {
            EXPECT_LE(bound.cost_usd, spot.cost_usd + 1e-9) << t.file;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tern::plan
