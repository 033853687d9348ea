// The job spec: the config's job: section, flags over it, errors that name the key, deadlines, the price
// from the catalog (--instance), and the attempt's command line (mpirun when ranks > 1).
#include "run/job_spec.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "plan/catalog.h"
#include "run/clock.h"
#include "run/instance_price.h"
#include "run/launcher.h"
#include "testing/files.h"

namespace tern::run {
namespace {

TEST(JobSpecTest, TheJobSectionSetsTheKeysAndUnknownOnesAreNamed) {
  testing::TempDir tmp;
  const std::string cfg = tmp / "c.yaml";
  testing::WriteFile(cfg,
                     "train: {steps: 5}\njob:\n  instance: aws:us-east-1:p5.48xlarge:spot\n  ranks: 2\n"
                     "  max_attempts: 4\n  budget: $50\n  deadline: 12h\n  project: nlp\n  heartbeat: 10m\n"
                     "  mpirun_args: --oversubscribe  --bind-to none\n");
  JobSpec s;
  ASSERT_TRUE(LoadJobSection(cfg, &s).ok());
  EXPECT_EQ(s.instance, "aws:us-east-1:p5.48xlarge:spot");
  EXPECT_EQ(s.ranks, 2);
  EXPECT_EQ(s.max_attempts, 4);
  EXPECT_EQ(s.budget_usd, 50);
  EXPECT_EQ(s.project, "nlp");
  EXPECT_EQ(s.heartbeat_s, 600);
  EXPECT_EQ(s.mpirun_args, (std::vector<std::string>{"--oversubscribe", "--bind-to", "none"}));
  auto d = DeadlineUnix(s.deadline, 1000);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, 1000 + 12 * 3600);
  EXPECT_EQ(DeadlineUnix("2025-01-02T00:00:00Z", 1000).value(), ParseUtc("2025-01-02T00:00:00Z"));
  EXPECT_EQ(DeadlineUnix("", 1000).value(), 0);

  testing::WriteFile(cfg, "job:\n  max_attemps: 3\n");
  Status bad = LoadJobSection(cfg, &s);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("job.max_attemps"), std::string::npos) << bad.message();
  EXPECT_NE(bad.message().find("job.max_attempts"), std::string::npos) << bad.message();
  EXPECT_FALSE(SetJobKey("ranks", "0", &s).ok());
  EXPECT_FALSE(SetJobKey("deadline", "soon", &s).ok());
  s.where = "slurm";
  EXPECT_TRUE(ValidateJobSpec(s).ok());
  s.where = "k8s";
  EXPECT_NE(ValidateJobSpec(s).message().find("local, slurm"), std::string::npos);
  s.where = "local";
  ASSERT_TRUE(SetJobKey("nodes", "2", &s).ok());
  EXPECT_NE(ValidateJobSpec(s).message().find("--on slurm"), std::string::npos);
  ASSERT_TRUE(SetJobKey("sbatch_args", " --partition=gpu  --account=ml ", &s).ok());
  EXPECT_EQ(s.sbatch_args, (std::vector<std::string>{"--partition=gpu", "--account=ml"}));
  ASSERT_TRUE(SetJobKey("signal_lead", "5m", &s).ok());
  EXPECT_EQ(s.signal_lead_s, 300);
}

TEST(JobSpecTest, TheLivePolicyNeedsADeadlineAndRunsLocally) {
  JobSpec s;
  ASSERT_TRUE(SetJobKey("policy", "uniform-progress", &s).ok());
  ASSERT_TRUE(SetJobKey("restart_overhead", "10m", &s).ok());
  ASSERT_TRUE(SetJobKey("policy_tick", "195", &s).ok());
  EXPECT_EQ(s.policy, "uniform-progress");
  EXPECT_DOUBLE_EQ(s.restart_overhead_s, 600);
  EXPECT_DOUBLE_EQ(s.policy_tick_s, 195);
  const Status no_deadline = ValidateJobSpec(s);
  EXPECT_EQ(no_deadline.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(no_deadline.message().find("needs a deadline"), std::string::npos) << no_deadline.message();
  ASSERT_TRUE(SetJobKey("deadline", "48h", &s).ok());
  EXPECT_TRUE(ValidateJobSpec(s).ok());
  s.where = "slurm";
  EXPECT_NE(ValidateJobSpec(s).message().find("--on local"), std::string::npos);
  const Status bad = SetJobKey("policy", "cheapest", &s);
  EXPECT_NE(bad.message().find("uniform-progress"), std::string::npos) << bad.message();
  EXPECT_FALSE(SetJobKey("policy_tick", "0", &s).ok());
}

TEST(JobSpecTest, ReadTrainConfigTakesTheRunDirectoryAndRefusesABadConfig) {
  testing::TempDir tmp;
  const std::string cfg = tmp / "c.yaml";
  testing::WriteFile(cfg,
                     "data: {dir: /data}\nrun: {dir: " + tmp.path() + "/x/../runs/a/}\njob: {ranks: 1}\n");
  JobSpec s;
  s.config_path = cfg;
  s.overrides = {"train.steps=77"};
  double price = -1;
  ASSERT_TRUE(ReadTrainConfig(&s, &price).ok());
  EXPECT_EQ(s.run_dir, tmp.path() + "/runs/a");
  EXPECT_EQ(s.total_steps, 77);
  EXPECT_EQ(price, 0);
  s.overrides = {"train.stepz=1"};
  EXPECT_NE(ReadTrainConfig(&s, &price).message().find("train.stepz"), std::string::npos);
}

const char* kGpus =
    "gpu,vendor,form_factor,fp32_tflops,tf32_tflops_dense,bf16_fp16_tflops_dense,mem_gib,interconnect,"
    "interconnect_gbps,tdp_w\n"
    "A100,NVIDIA,SXM4,19.5,156,312,40,NVLink 3,600,400\n"
    "H100,NVIDIA,SXM5,67,494.5,989.5,80,NVLink 4,900,700\n";
const char* kCatalog =
    "provider,region,instance_type,gpu,gpu_count,gpu_mem_gib,vcpus,mem_gib,price_ondemand_hr,price_spot_hr\n"
    "aws,us-east-1,p5.48xlarge,H100,8,80,192,2048,55.04,17.6289\n"
    "aws,us-east-1,p4d.24xlarge,A100,8,40,96,1152,21.95764,\n"
    "aws,eu-west-2,p5.48xlarge,H100,8,80,192,2048,71.552,15.5259\n";

TEST(InstancePriceTest, ThePriceComesFromTheCatalogForEachBilling) {
  auto cat = plan::LoadCatalogFromTexts({{"gpus.csv", kGpus}, {"gpu_instances.csv", kCatalog}}, {});
  ASSERT_TRUE(cat.ok()) << cat.status().ToString();
  auto spot = PriceInstance("aws:us-east-1:p5.48xlarge:spot", *cat);
  ASSERT_TRUE(spot.ok()) << spot.status().ToString();
  EXPECT_EQ(spot->price_per_hour, 17.6289);
  EXPECT_EQ(spot->billing, "spot");
  EXPECT_EQ(spot->gpu_count, 8);
  auto od = PriceInstance("aws:us-east-1:p5.48xlarge", *cat);
  ASSERT_TRUE(od.ok());
  EXPECT_EQ(od->price_per_hour, 55.04);
  EXPECT_EQ(od->instance, "aws:us-east-1:p5.48xlarge:on-demand");
  auto reserved = PriceInstance("aws:us-east-1:p5.48xlarge:reserved", *cat);
  ASSERT_TRUE(reserved.ok());
  EXPECT_NEAR(reserved->price_per_hour, 55.04 * (1 - plan::PlanDefaults{}.reserved_discount), 1e-12);
  auto no_spot = PriceInstance("aws:us-east-1:p4d.24xlarge:spot", *cat);
  EXPECT_NE(no_spot.status().message().find("no spot price"), std::string::npos);
  auto elsewhere = PriceInstance("aws:us-west-2:p5.48xlarge:spot", *cat);
  EXPECT_NE(elsewhere.status().message().find("eu-west-2, us-east-1"), std::string::npos)
      << elsewhere.status().message();
  EXPECT_FALSE(PriceInstance("p5.48xlarge", *cat).ok());
  // The shipped catalog has it too (data/catalog/gpu_instances.csv).
  auto shipped = PriceInstanceFromShippedCatalog("aws:us-east-1:p5.48xlarge:spot");
  ASSERT_TRUE(shipped.ok()) << shipped.status().ToString();
  EXPECT_GT(shipped->price_per_hour, 0);
}

TEST(LaunchTest, TheAttemptCommandResumesAndCarriesTheJobsCost) {
  JobSpec s;
  s.config_path = "c.yaml";
  s.overrides = {"train.steps=9"};
  s.run_dir = "/r";
  s.price_per_hour = 2.5;
  AttemptVars v{3, "job", 0.125, 1700000000.5, 0, ""};
  EXPECT_EQ(AttemptArgv(s, {"tern", "train"}, v),
            (std::vector<std::string>{"tern", "train", "c.yaml", "--resume", "auto", "--set", "train.steps=9",
                                      "--set", "run.dir=/r", "--set", "run.price_per_hour=2.5", "--set",
                                      "run.cost_offset_usd=0.125", "--set",
                                      "run.billing_start_unix=1700000000.500"}));
  v.mtbf_s = 21600;
  v.mtbf_source = "spot default (6 h)";
  const auto with_hazard = AttemptArgv(s, {"tern", "train"}, v);
  EXPECT_EQ(
      std::vector<std::string>(with_hazard.end() - 4, with_hazard.end()),
      (std::vector<std::string>{"--set", "ckpt.mtbf=21600", "--set", "ckpt.mtbf_source=spot default (6 h)"}));
  s.ranks = 2;
  s.mpirun_args = {"--oversubscribe"};
  const auto argv = AttemptArgv(s, {"tern", "train"}, v);
  EXPECT_EQ(std::vector<std::string>(argv.begin(), argv.begin() + 6),
            (std::vector<std::string>{"mpirun", "--oversubscribe", "-np", "2", "tern", "train"}));
  if (geteuid() == 0 && !std::getenv("OMPI_ALLOW_RUN_AS_ROOT")) {
    EXPECT_NE(CheckMpirunAllowed(s).message().find("--allow-run-as-root"), std::string::npos);
    s.mpirun_args.push_back("--allow-run-as-root");
  }
  EXPECT_TRUE(CheckMpirunAllowed(s).ok());
}

}  // namespace
}  // namespace tern::run
