// The hazard `tern run` hands the trainer for ckpt.every=auto: from the job's ledger history, else the
// catalog's spot hazard, else the defaults; and the trainer's default M agrees with the planner's.
#include "run/hazard.h"

#include <gtest/gtest.h>

#include "ckpt/interval.h"
#include "plan/defaults.h"

namespace tern::run {
namespace {

const char* kGpus =
    "gpu,vendor,form_factor,fp32_tflops,tf32_tflops_dense,bf16_fp16_tflops_dense,mem_gib,interconnect,"
    "interconnect_gbps\n"
    "H100,NVIDIA,SXM5,67,494.5,989.5,80,NVLink 4,900\n";
const char* kInstances =
    "provider,region,instance_type,gpu,gpu_count,gpu_mem_gib,vcpus,mem_gib,price_ondemand_hr,price_spot_hr,"
    "spot_hazard_per_hr\n"
    "aws,us-east-1,p5.48xlarge,H100,8,80,192,2048,98.32,39.0,0.25\n"
    "aws,us-east-1,p5.4xlarge,H100,1,80,16,256,12.3,5.0,\n";

plan::Catalog Catalog() {
  auto c = plan::LoadCatalogFromTexts({{"gpus.csv", kGpus}, {"my.csv", kInstances}}, plan::PlanDefaults());
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : plan::Catalog{};
}

JobSpec Spec(const std::string& instance, const std::string& billing) {
  JobSpec s;
  s.instance = instance;
  s.billing = billing;
  return s;
}

AttemptRow Attempt(const std::string& reason, double wall_s, const std::string& state = "ended") {
  AttemptRow a;
  a.reason = reason;
  a.wall_s = wall_s;
  a.state = state;
  return a;
}

TEST(HazardTest, SpotTakesTheCatalogsHazard) {
  const plan::Catalog c = Catalog();
  const Hazard h = JobHazard(Spec("aws:us-east-1:p5.48xlarge:spot", "spot"), {}, &c);
  EXPECT_DOUBLE_EQ(h.mtbf_s, 4 * 3600.0);  // 1 / 0.25 per hour
  EXPECT_NE(h.source.find("catalog"), std::string::npos) << h.source;
}

TEST(HazardTest, SpotWithoutACatalogHazardTakesThePlannersDefault) {
  const plan::Catalog c = Catalog();
  for (const plan::Catalog* catalog : {&c, static_cast<const plan::Catalog*>(nullptr)}) {
    const Hazard h = JobHazard(Spec("aws:us-east-1:p5.4xlarge:spot", "spot"), {}, catalog);
    EXPECT_DOUBLE_EQ(h.mtbf_s, plan::PlanDefaults().spot_mtbf_hours * 3600);
    EXPECT_NE(h.source.find("spot_mtbf_hours"), std::string::npos) << h.source;
  }
}

TEST(HazardTest, OnDemandAndNoneTakeTheOnDemandDefault) {
  const plan::Catalog c = Catalog();
  for (const char* billing : {"on-demand", "reserved", "custom", "none"}) {
    const Hazard h = JobHazard(Spec("aws:us-east-1:p5.48xlarge:on-demand", billing), {}, &c);
    EXPECT_DOUBLE_EQ(h.mtbf_s, kOnDemandMtbfHours * 3600) << billing;
    EXPECT_NE(h.source.find(billing), std::string::npos) << h.source;
  }
}

TEST(HazardTest, TheJobsHistoryWinsOnceItHasAnInterruption) {
  const plan::Catalog c = Catalog();
  const JobSpec spot = Spec("aws:us-east-1:p5.48xlarge:spot", "spot");
  // No interruption yet: the prior alone (4 h), however long the attempts ran.
  EXPECT_DOUBLE_EQ(JobHazard(spot, {Attempt("done", 36000)}, &c).mtbf_s, 4 * 3600.0);
  // Two preemptions and a crash-free attempt in 3 h (+ the running attempt, not counted), prior 4 h:
  // (3 h + 4 h) / (2 + 1) = 2.333 h.
  const std::vector<AttemptRow> history = {Attempt("preempted", 3600), Attempt("preempted", 3600),
                                           Attempt("done", 3600), Attempt("", 99999, "running")};
  const Hazard h = JobHazard(spot, history, &c);
  EXPECT_NEAR(h.mtbf_s, 7.0 / 3 * 3600, 1e-6);
  EXPECT_NE(h.source.find("ledger: 2 interruptions in 3 h"), std::string::npos) << h.source;
  // Crashes, hangs, signals and lost attempts lose work too; a user's pause or a bad config does not.
  EXPECT_TRUE(IsInterruption(Attempt("crashed", 1)));
  EXPECT_TRUE(IsInterruption(Attempt("hung", 1)));
  EXPECT_TRUE(IsInterruption(Attempt("lost", 1)));
  EXPECT_FALSE(IsInterruption(Attempt("interrupted", 1)));
  EXPECT_FALSE(IsInterruption(Attempt("bad_config", 1)));
  // On-demand with one crash in 8 h: (8 h + 168 h) / 2 = 88 h.
  EXPECT_NEAR(JobHazard(Spec("", "none"), {Attempt("crashed", 8 * 3600)}, nullptr).mtbf_s, 88 * 3600.0, 1e-6);
}

TEST(HazardTest, TheTrainersDefaultIsThePlannersSpotMtbf) {
  EXPECT_DOUBLE_EQ(ckpt::kDefaultMtbfS, plan::PlanDefaults().spot_mtbf_hours * 3600);
  EXPECT_DOUBLE_EQ(ckpt::kAssumedSaveBytesPerS, plan::PlanDefaults().checkpoint_write_gb_per_s * 1e9);
}

}  // namespace
}  // namespace tern::run
