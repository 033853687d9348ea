// The comm term from a measured link: a hand-written `tern bench --dist --json` file (testdata/
// dist_h100x8.json: 8 H100s on one node, 200 GB/s bus bandwidth, 50 us latency) replaces the catalog's
// NVLink figure for the single-instance H100 rows, and the all-reduce is what the ring model says:
//   2(n-1)/n x gradient bytes / bus bandwidth + latency x (n-1)/(W-1).
#include <gtest/gtest.h>

#include <filesystem>

#include "core/file_util.h"
#include "plan/catalog.h"
#include "plan/explain.h"
#include "plan/link_calibration.h"
#include "plan/planner.h"

namespace tern::plan {
namespace {

namespace fs = std::filesystem;
std::string TestData(const std::string& name) {
  return (fs::path(TERN_TEST_SOURCE_DIR) / "src/plan/testdata" / name).string();
}

Catalog SmallCatalog() {
  return LoadCatalog({TestData("gpus.csv"), TestData("instances.csv"), TestData("network.csv")},
                     PlanDefaults())
      .value();
}

constexpr double kGrad124 = 4.0 * 124439808;  // GPT-2 124M fp32 gradients: 497,759,232 B

PlanRequest H100Request() {
  PlanRequest req;
  req.workload.cfg = GptPreset("gpt2-124m").value();
  req.workload.tokens = 10e9;
  req.gpus = {"H100"};
  req.billing = {Billing::kOnDemand};
  req.max_gpus = 32;
  return req;
}

// The row of `nodes` x `instance` (in us-west-2 for AWS's p5, Lambda's own for its instances).
const PlanRow* Find(const PlanResult& r, const Catalog& cat, const std::string& instance, int nodes) {
  for (const PlanRow& row : r.rows) {
    const InstanceOffer& o = cat.offers[row.offer];
    const bool region = o.provider != "aws" || o.region == "us-west-2";
    if (o.instance_type == instance && region && row.nodes == nodes) return &row;
  }
  return nullptr;
}

LinkProfile Load(const std::string& text, const std::string& file) {
  Result<LinkProfile> p = ParseDistBenchJson(text, file);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return p.ok() ? *p : LinkProfile{};
}

std::string H100x8() {
  return ReadFileToString(TestData("dist_h100x8.json")).value();
}

TEST(LinkCalibration, ParsesTheBenchDistJson) {
  const std::string text = H100x8();
  EXPECT_TRUE(IsDistBenchJson(text));
  EXPECT_FALSE(IsDistBenchJson(ReadFileToString(TestData("bench_h100.json")).value()));
  const LinkProfile p = Load(text, "dist.json");
  EXPECT_EQ(p.world, 8);
  EXPECT_EQ(p.nodes, 1);
  EXPECT_EQ(p.gpu, "H100");
  EXPECT_EQ(p.bus_gb_per_s, 200.0);
  EXPECT_EQ(p.latency_us, 50.0);
  EXPECT_EQ(p.Describe(), "dist.json: nccl, 8 ranks on 1 node (H100)");
}

TEST(LinkCalibration, WorldOneAndMissingKeysNameTheFix) {
  std::string one = H100x8();
  one.replace(one.find("\"world\": 8"), 10, "\"world\": 1");
  EXPECT_NE(ParseDistBenchJson(one, "d.json").status().message().find("mpirun -np N tern bench --dist"),
            std::string::npos);
  EXPECT_EQ(ParseDistBenchJson(R"({"tool": "tern bench --dist"})", "d.json").status().message(),
            "d.json: missing key 'communicator' (from `tern bench --dist --json`)");
  // A count beyond an int (or a fraction) is an error, not a float-to-int conversion (undefined behaviour).
  std::string huge = H100x8();
  huge.replace(huge.find("\"world\": 8"), 10, "\"world\": 5e20");
  const std::string why = ParseDistBenchJson(huge, "d.json").status().message();
  EXPECT_NE(why.find("key 'world' is 5e+20, not a whole number in"), std::string::npos) << why;
  EXPECT_NE(why.find("(from `tern bench --dist --json`)"), std::string::npos) << why;
  std::string bad_size = H100x8();
  bad_size.replace(bad_size.rfind("\"bytes\": "), 9, "\"bytes\": \"x\", \"was\": ");
  EXPECT_TRUE(ParseDistBenchJson(bad_size, "d.json").ok()) << "a size that is not a number is left out";
}

TEST(LinkCalibration, MeasuredLinkSetsTheRingTermOfMatchingRowsOnly) {
  Catalog cat = SmallCatalog();
  PlanRequest base = H100Request();
  PlanRequest req = base;
  req.links = {Load(H100x8(), "dist.json")};
  PlanResult plain = MakePlan(cat, base, PlanDefaults()).value();
  PlanResult meas = MakePlan(cat, req, PlanDefaults()).value();

  // One p5.48xlarge (8 x H100, us-west-2): 2 x 7/8 x 497,759,232 B / 200 GB/s + 50 us x 7/7
  //   = 4.35539328 ms + 0.05 ms = 4.40539328 ms.
  const PlanRow* m8 = Find(meas, cat, "p5.48xlarge", 1);
  ASSERT_NE(m8, nullptr);
  EXPECT_TRUE(m8->link.measured);
  EXPECT_NEAR(m8->step.allreduce_s, 2.0 * 7 / 8 * kGrad124 / 200e9 + 50e-6, 1e-12);
  EXPECT_NEAR(m8->step.allreduce_s, 0.00440539328, 1e-12);
  EXPECT_EQ(m8->link.what, "measured 200 GB/s (dist.json)");
  // The catalog's figure instead: NVLink 4, 900 GB/s both ways -> 450 x 0.8 efficiency = 360 GB/s.
  const PlanRow* p8 = Find(plain, cat, "p5.48xlarge", 1);
  ASSERT_NE(p8, nullptr);
  EXPECT_FALSE(p8->link.measured);
  EXPECT_NEAR(p8->step.allreduce_s, 2.0 * 7 / 8 * kGrad124 / 360e9, 1e-12);
  // The step adds only what the last micro-batch's backward does not hide, as before.
  EXPECT_NEAR(m8->step.step_s, m8->step.compute_s + m8->step.exposed_s, 1e-12);
  EXPECT_NEAR(m8->step.exposed_s, m8->step.allreduce_s - m8->step.hidden_s, 1e-12);
  // Lambda's 8 x H100 is the same GPU in one instance: measured too. Two instances: the network, as before.
  const PlanRow* lambda = Find(meas, cat, "gpu_8x_h100_sxm5", 1);
  ASSERT_NE(lambda, nullptr);
  EXPECT_TRUE(lambda->link.measured);
  const PlanRow* m16 = Find(meas, cat, "p5.48xlarge", 2);
  ASSERT_NE(m16, nullptr);
  EXPECT_FALSE(m16->link.measured);
  EXPECT_NEAR(m16->step.allreduce_s, 2.0 * 15 / 16 * kGrad124 / (400e9 * 0.8), 1e-12);  // 3200 Gb/s network
  ASSERT_FALSE(meas.notes.empty());
  EXPECT_NE(meas.notes.front().find("measured link dist.json: nccl, 8 ranks on 1 node (H100)"),
            std::string::npos)
      << meas.notes.front();
}

TEST(LinkCalibration, ANamedInstanceAndAMultiNodeMeasurement) {
  Catalog cat = SmallCatalog();
  PlanRequest req = H100Request();
  std::string named = H100x8();
  named.replace(named.find("\"gpu\": \"H100\","), 14, "\"gpu\": \"H100\", \"instance\": \"p5.48xlarge\",");
  // 16 ranks on 2 nodes: 40 GB/s bus bandwidth, 100 us.
  std::string two = H100x8();
  two.replace(two.find("\"world\": 8"), 10, "\"world\": 16");
  two.replace(two.find("\"nodes\": 1"), 10, "\"nodes\": 2");
  two.replace(two.find("\"latency_us\": 50.0"), 18, "\"latency_us\": 100.0");
  two.replace(two.find("\"link_gb_per_s\": 200.0"), 22, "\"link_gb_per_s\": 40.0");
  req.links = {Load(named, "p5.json"), Load(two, "two.json")};
  PlanResult r = MakePlan(cat, req, PlanDefaults()).value();
  EXPECT_TRUE(Find(r, cat, "p5.48xlarge", 1)->link.measured);
  EXPECT_FALSE(Find(r, cat, "gpu_8x_h100_sxm5", 1)->link.measured);  // another instance type
  // p5 x2 (16 GPUs): 2 x 15/16 x G / 40 GB/s + 100 us x 15/15; x4 (32): latency x 31/15.
  EXPECT_NEAR(Find(r, cat, "p5.48xlarge", 2)->step.allreduce_s, 2.0 * 15 / 16 * kGrad124 / 40e9 + 100e-6,
              1e-12);
  EXPECT_NEAR(Find(r, cat, "p5.48xlarge", 4)->step.allreduce_s,
              2.0 * 31 / 32 * kGrad124 / 40e9 + 100e-6 * 31 / 15, 1e-12);
  // The explanation says the figure is measured and where.
  size_t row = 0;
  for (size_t i = 0; i < r.rows.size(); ++i)
    if (&r.rows[i] == Find(r, cat, "p5.48xlarge", 2)) row = i + 1;
  ASSERT_GT(row, 0u);
  const std::string text = ExplainRow(r, cat, req, PlanDefaults(), static_cast<int>(row)).value();
  EXPECT_NE(text.find("measured by tern bench --dist: two.json: nccl, 16 ranks on 2 nodes (H100)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("/ 40 GB/s (measured bus bandwidth) + latency 100.0 us x (16-1)/(16-1)"),
            std::string::npos)
      << text;
}

TEST(LinkCalibration, ACpuMeasurementMatchesNoCatalogRowAndSaysSo) {
  Catalog cat = SmallCatalog();
  PlanRequest req = H100Request();
  std::string cpu = H100x8();
  cpu.replace(cpu.find("\"device\": \"cuda\""), 16, "\"device\": \"cpu\"");
  req.links = {Load(cpu, "cpu.json")};
  PlanResult r = MakePlan(cat, req, PlanDefaults()).value();
  for (const PlanRow& row : r.rows) EXPECT_FALSE(row.link.measured);
  ASSERT_FALSE(r.notes.empty());
  EXPECT_NE(r.notes.front().find("matched no planned row (a CPU measurement speaks for no catalog GPU)"),
            std::string::npos)
      << r.notes.front();
}

}  // namespace
}  // namespace tern::plan
