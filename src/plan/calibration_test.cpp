// Calibration: a hand-written `tern bench --json` file drives the MFU, and `--instance local` predicts
// the wall time of the benchmarked run itself.
#include <gtest/gtest.h>

#include <filesystem>

#include "plan/calibration.h"
#include "plan/catalog.h"
#include "plan/planner.h"

namespace tern::plan {
namespace {

namespace fs = std::filesystem;
std::string TestData(const std::string& name) { return (fs::path(__FILE__).parent_path() / "testdata" / name).string(); }

Catalog SmallCatalog() {
  return LoadCatalog({TestData("gpus.csv"), TestData("instances.csv"), TestData("network.csv")}, PlanDefaults()).value();
}

TEST(Calibration, ParsesBenchJson) {
  Result<BenchProfile> b = LoadBenchJson(TestData("bench_cpu.json"));
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->device, "cpu");
  EXPECT_EQ(b->DeviceName(), "cpu");
  EXPECT_EQ(b->precision, Precision::kFp32);
  EXPECT_EQ(b->model.ToString(), "L4 H4 C128 V4096 T64");
  EXPECT_DOUBLE_EQ(b->mfu, 0.30);
  EXPECT_EQ(b->threads, 2);
}

TEST(Calibration, BadBenchJsonNamesTheKey) {
  EXPECT_EQ(ParseBenchJson("{\"model\": {}}", "b.json").status().message(), "b.json model: missing key 'n_layer'");
  EXPECT_NE(ParseBenchJson("not json", "b.json").status().message().find("tern bench --json"), std::string::npos);
  const std::string ok_model = R"({"model": {"n_layer": 1, "n_head": 1, "n_embd": 8, "vocab_size": 16, "block_size": 8},
    "batch": 1, "seq": 8, "precision": "fp32", "device": "cpu", "tokens_per_s": 1, "flops_per_token": 1,
    "achieved_tflops": 1, "peak_tflops": 2, "mfu": )";
  EXPECT_NE(ParseBenchJson(ok_model + "1.5}", "b.json").status().message().find("outside (0, 1]"), std::string::npos);
  EXPECT_NE(ParseBenchJson(ok_model + "\"x\"}", "b.json").status().message().find("'mfu' has the wrong type"),
            std::string::npos);
}

TEST(Calibration, LocalInstancePredictsTheBenchmarkedRun) {
  Catalog cat = SmallCatalog();
  BenchProfile b = LoadBenchJson(TestData("bench_cpu.json")).value();
  ASSERT_TRUE(AddLocalInstance(b, 0.0, 24.0, &cat).ok());
  PlanRequest req;
  req.workload.cfg = b.model;
  req.workload.model_label = "bench model";
  req.workload.tokens = 20e6;
  req.instances = {"local"};
  req.calibration = b;
  Result<PlanResult> r = MakePlan(cat, req, PlanDefaults());
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->rows.size(), 1u);
  const PlanRow& row = r->rows[0];
  EXPECT_EQ(cat.offers[row.offer].provider, "local");
  // Same model and sequence as the bench: the prediction is the bench's own rate,
  // 0.34 TFLOP/s x 0.30 / 8,257,536 FLOP/token = 12,352 tokens/s -> 20M tokens in 1,619 s.
  EXPECT_NEAR(row.step.tokens_per_s, 0.34e12 * 0.30 / 8257536.0, 1e-6);
  EXPECT_NEAR(row.wall_s, 20e6 / (0.34e12 * 0.30 / 8257536.0), 1e-3);
  EXPECT_NEAR(row.step.tokens_per_s, b.tokens_per_s, 0.01 * b.tokens_per_s);
  EXPECT_EQ(row.total_usd, 0.0);
  EXPECT_NE(row.step.mfu_source.find("calibrated"), std::string::npos);
  EXPECT_EQ(r->filtered, static_cast<int>(cat.offers.size()) - 1);
}

TEST(Calibration, GpuBenchSetsMfuForThatGpuOnly) {
  Catalog cat = SmallCatalog();
  PlanRequest req;
  req.workload.cfg.n_layer = 12;  // gpt2-124m, as benchmarked
  req.workload.tokens = 1e9;
  req.calibration = LoadBenchJson(TestData("bench_h100.json")).value();
  Result<PlanResult> r = MakePlan(cat, req, PlanDefaults());
  ASSERT_TRUE(r.ok());
  bool saw_h100 = false, saw_other = false;
  for (const auto& row : r->rows) {
    if (cat.offers[row.offer].gpu == "H100") {
      saw_h100 = true;
      // The bench achieved 445.2 TFLOP/s: against the datasheet's 989.5 that is MFU 0.4499.
      EXPECT_DOUBLE_EQ(row.step.mfu, 445.2 / 989.5);
    } else {
      saw_other = true;
      EXPECT_NE(row.step.mfu_source.find("default"), std::string::npos);
    }
  }
  EXPECT_TRUE(saw_h100 && saw_other);
  EXPECT_TRUE(r->notes.empty());  // same model: no caveat
}

}  // namespace
}  // namespace tern::plan
