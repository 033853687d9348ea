// `tern plan --spot-traces`: spot rows replayed on traces of their region (or all of them as a proxy) under
// Uniform Progress against the deadline; the row's cost is the replay's p95.
#include <gtest/gtest.h>

#include "model/gpt_config.h"
#include "plan/planner.h"

namespace tern::plan {
namespace {

Catalog OneOffer() {
  const std::string gpus =
      "gpu,vendor,form_factor,fp32_tflops,tf32_tflops_dense,bf16_fp16_tflops_dense,fp8_tflops_dense,fp64_"
      "tflops,"
      "mem_gib,mem_type,mem_bw_gbps,interconnect,interconnect_gbps,tdp_w,source,notes\n"
      "H100,NVIDIA,SXM5,67,494.5,989.5,1979,34,80,HBM3,3350,NVLink 4,900,700,test,test\n";
  const std::string inst =
      "provider,region,instance_type,gpu,gpu_count,gpu_mem_gib,vcpus,mem_gib,price_ondemand_hr,price_spot_"
      "hr\n"
      "aws,us-test-1,p5.48xlarge,H100,8,80,192,2048,50,10\n";
  Result<Catalog> c = LoadCatalogFromTexts({{"gpus.csv", gpus}, {"mine.csv", inst}}, PlanDefaults());
  EXPECT_TRUE(c.ok()) << c.status().message();
  return std::move(c).value();
}

SpotTrace Trace(const std::string& zone, bool up) {
  SpotTrace t;
  t.zone = zone;
  t.gap_s = 360;
  t.up.assign(2000, up ? 1 : 0);
  return t;
}

PlanRequest SpotRequest(std::vector<SpotTrace> traces) {
  PlanRequest req;
  req.workload.cfg = GptPreset("gpt2-124m").value();
  req.workload.model_label = "gpt2-124m";
  req.workload.tokens = 20e9;
  req.max_gpus = 8;
  req.billing = {Billing::kSpot};
  req.deadline_h = 48;
  req.spot_traces = std::move(traces);
  return req;
}

double WorkHours(const PlanRow& r) {
  return (r.run ? r.run->total_s() : r.step.wall_s) / 3600;
}

TEST(SpotPlan, AlwaysUpCostsTheSpotPriceNeverUpTheOnDemandPrice) {
  const PlanDefaults d;
  const Catalog cat = OneOffer();
  auto up = MakePlan(cat, SpotRequest({Trace("us-test-1a", true)}), d);
  ASSERT_TRUE(up.ok()) << up.status().ToString();
  ASSERT_EQ(up->rows.size(), 1u);
  const PlanRow& r = up->rows[0];
  ASSERT_TRUE(r.spot_sim.has_value());
  const double restart_h = d.restart_minutes / 60;
  EXPECT_EQ(r.spot_sim->miss_rate, 0);
  EXPECT_EQ(r.spot_sim->mean_preemptions, 0);
  // Spot all the way: $10/h x (work + restart), plus at most a few saves of seconds.
  EXPECT_GE(r.compute_usd, 10 * (WorkHours(r) + restart_h) - 1e-6);
  EXPECT_LE(r.compute_usd, 10 * (WorkHours(r) + restart_h) * 1.01);
  EXPECT_NE(r.risk.find("uniform-progress"), std::string::npos) << r.risk;
  EXPECT_NE(r.spot_sim_traces.find("1 zone of us-test-1"), std::string::npos) << r.spot_sim_traces;

  // Never up: Uniform Progress runs it on on-demand, at on-demand's price; a zone of another region is a
  // proxy, and says so.
  auto down = MakePlan(cat, SpotRequest({Trace("us-other-9b", false)}), d);
  ASSERT_TRUE(down.ok()) << down.status().ToString();
  ASSERT_EQ(down->rows.size(), 1u);
  const PlanRow& o = down->rows[0];
  ASSERT_TRUE(o.spot_sim.has_value());
  EXPECT_NEAR(o.compute_usd, 50 * (WorkHours(o) + restart_h), 1e-6);
  EXPECT_NE(o.spot_sim_traces.find("proxy"), std::string::npos) << o.spot_sim_traces;

  // A deadline shorter than the work: excluded for the deadline, with the replayed wall time.
  PlanRequest tight = SpotRequest({Trace("us-test-1a", true)});
  tight.deadline_h = WorkHours(r) / 2;
  auto t = MakePlan(cat, tight, d);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->rows.empty());
  bool deadline = false;
  for (const auto& e : t->excluded) deadline |= e.category == std::string("deadline");
  EXPECT_TRUE(deadline);
}

// data.dir on S3: every new instance fetches the dataset before it trains, so each restart of a spot row
// takes dataset_gb at min(the instance's network, data_fetch_gbps) more, and the row says so.
TEST(SpotPlan, DataOnS3AddsItsFetchToEveryRestart) {
  const Catalog catalog = OneOffer();  // no network row: default_network_gbps 25 > data_fetch_gbps 3.2
  PlanRequest req = SpotRequest({});
  req.deadline_h.reset();
  req.dataset_gb = 40;
  TrainRunSpec run;  // --config: the whole run, whose first instance fetches the data too
  run.config_file = "gpt2.yaml";
  run.steps = 1000;
  run.micro_batch = 16;
  run.seq = 1024;
  req.run = run;
  auto local = MakePlan(catalog, req, PlanDefaults());
  req.fetch_data = true;
  auto fetched = MakePlan(catalog, req, PlanDefaults());
  ASSERT_TRUE(local.ok() && fetched.ok());
  ASSERT_FALSE(local->rows.empty());
  ASSERT_EQ(local->rows.size(), fetched->rows.size());
  const PlanRow& a = local->rows[0];
  const PlanRow& b = fetched->rows[0];
  EXPECT_NEAR(b.spot.restart_s - a.spot.restart_s, 40 * 8 / 3.2, 1e-9);  // 100 s
  EXPECT_NE(b.spot.restart_source.find("+ data fetch 100 s (40.0 GB at 3.2 Gbit/s)"), std::string::npos)
      << b.spot.restart_source;
  EXPECT_GT(b.spot.expected_wall_s, a.spot.expected_wall_s);
  ASSERT_TRUE(a.run && b.run);
  EXPECT_EQ(a.run->data_fetch_s, 0);
  EXPECT_NEAR(b.run->data_fetch_s, 100, 1e-9) << "the first instance fetches it too";
  EXPECT_NEAR(b.run->total_s() - a.run->total_s(), 100, 1e-6);
  EXPECT_GT(b.compute_usd, a.compute_usd);
}

}  // namespace
}  // namespace tern::plan
