// Calibration: a hand-written `tern bench --json` file drives the MFU, and `--instance local` predicts
// the wall time of the benchmarked run itself.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/file_util.h"
#include "plan/calibration.h"
#include "plan/catalog.h"
#include "plan/planner.h"
#include "plan/run_model.h"

namespace tern::plan {
namespace {

namespace fs = std::filesystem;
// From the source directory CMake names, not __FILE__ (ccache's base_dir makes that relative to the object).
std::string TestData(const std::string& name) {
  return (fs::path(TERN_TEST_SOURCE_DIR) / "src/plan/testdata" / name).string();
}

Catalog SmallCatalog() {
  return LoadCatalog({TestData("gpus.csv"), TestData("instances.csv"), TestData("network.csv")},
                     PlanDefaults())
      .value();
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

// Benches since the "machine" block name the CPU; the planner reads them as it reads the older ones.
TEST(Calibration, AcceptsBenchJsonWithAndWithoutTheMachineBlock) {
  const std::string text = ReadFileToString(TestData("bench_cpu.json")).value();
  ASSERT_EQ(text.find("\"machine\""), std::string::npos);
  const size_t brace = text.find('{');
  ASSERT_NE(brace, std::string::npos);
  const std::string with = text.substr(0, brace + 1) +
                           R"("machine": {"cpu": "AMD EPYC 9R45", "isa": ["AVX2", "AVX-512F", "AVX512-BF16"],
                               "threads": 2, "logical_cpus": 2},)" +
                           text.substr(brace + 1);
  Result<BenchProfile> a = ParseBenchJson(text, "old.json"), b = ParseBenchJson(with, "new.json");
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(a->model.ToString(), b->model.ToString());
  EXPECT_DOUBLE_EQ(a->mfu, b->mfu);
  EXPECT_EQ(a->threads, b->threads);
}

TEST(Calibration, BadBenchJsonNamesTheKey) {
  EXPECT_EQ(ParseBenchJson("{\"model\": {}}", "b.json").status().message(),
            "b.json model: missing key 'n_layer'");
  EXPECT_NE(ParseBenchJson("not json", "b.json").status().message().find("tern bench --json"),
            std::string::npos);
  const std::string ok_model =
      R"({"model": {"n_layer": 1, "n_head": 1, "n_embd": 8, "vocab_size": 16, "block_size": 8},
    "batch": 1, "seq": 8, "precision": "fp32", "device": "cpu", "tokens_per_s": 1, "flops_per_token": 1,
    "achieved_tflops": 1, "peak_tflops": 2, "mfu": )";
  EXPECT_NE(ParseBenchJson(ok_model + "1.5}", "b.json").status().message().find("outside (0, 1]"),
            std::string::npos);
  EXPECT_NE(ParseBenchJson(ok_model + "\"x\"}", "b.json").status().message().find("'mfu' has the wrong type"),
            std::string::npos);
}

// fuzz/bench_json found it: a count beyond int64 is a double to nlohmann, and converting it to int was
// undefined behaviour. Too large, negative beyond int or fractional counts are errors that name the key.
TEST(Calibration, CountsOutOfRangeAreErrorsNotConversions) {
  const std::string tail =
      R"(, "n_head": 4, "n_embd": 128, "vocab_size": 4096, "block_size": 64},
    "batch": 8, "seq": 64, "precision": "fp32", "device": "cpu", "tokens_per_s": 1, "flops_per_token": 1,
    "achieved_tflops": 1, "peak_tflops": 2, "mfu": 0.5})";
  for (const char* n : {"59223372036854775807", "4294967296", "-4294967296", "2.5", "1e300"}) {
    auto r = ParseBenchJson(std::string(R"({"model": {"n_layer": )") + n + tail, "b.json");
    ASSERT_FALSE(r.ok()) << n;
    EXPECT_NE(r.status().message().find("'n_layer'"), std::string::npos) << r.status().message();
  }
  EXPECT_TRUE(ParseBenchJson(std::string(R"({"model": {"n_layer": 2.0)") + tail, "b.json").ok());
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

// A bench run with train.recompute=blocks counts the model's FLOPs, not the re-run forward: its MFU reads low
// by the planner's block factor. Calibrated from it, a row without recompute runs that factor faster, and a
// row with blocks at exactly the bench's rate.
TEST(Calibration, ABenchWithRecomputeIsTakenBackToItsRateWithout) {
  std::string text = ReadFileToString(TestData("bench_h100.json")).value();
  text.insert(text.rfind('}'), R"(, "memory": {"recompute": "blocks"})");
  auto b = ParseBenchJson(text, "blocks.json");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->recompute, Recompute::kBlocks);
  const PlanDefaults d;
  Catalog cat = SmallCatalog();
  PlanRequest req;
  req.workload.cfg.n_layer = 12;
  req.workload.tokens = 1e9;
  req.calibration = *b;
  for (ActRecompute mode : {ActRecompute::kNone, ActRecompute::kBlocks}) {
    req.workload.recompute = mode;
    Result<PlanResult> r = MakePlan(cat, req, d);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    bool saw = false;
    for (const auto& row : r->rows) {
      if (cat.offers[row.offer].gpu != "H100" || row.fit.recompute != mode) continue;
      saw = true;
      EXPECT_DOUBLE_EQ(row.step.mfu, 445.2 / 989.5 * d.block_recompute_time_factor);
      EXPECT_NE(row.step.mfu_source.find("for its recompute=blocks"), std::string::npos)
          << row.step.mfu_source;
    }
    EXPECT_TRUE(saw) << ActRecomputeName(mode);
  }
  text.replace(text.find("\"blocks\""), 8, "\"all\"");
  auto bad = ParseBenchJson(text, "bad.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("memory.recompute"), std::string::npos);
}

TEST(Calibration, GpuNamedOnlyByTheDeviceIsMapped) {
  // A bench whose "gpu" is null but which recorded the device's own name calibrates that catalog GPU.
  Result<BenchProfile> b = LoadBenchJson(TestData("bench_h200_name_only.json"));
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->gpu_name, "NVIDIA H200");
  EXPECT_EQ(b->DeviceName(), "H200");
  EXPECT_FALSE(b->run.has_value());
}

TEST(Calibration, CudaDeviceNamesMapToCatalogIds) {
  // Names as cudaDeviceProp::name / nvidia-smi print them.
  const std::pair<const char*, const char*> cases[] = {
      {"NVIDIA H200", "H200"},
      {"NVIDIA H100 80GB HBM3", "H100"},
      {"NVIDIA H100 PCIe", "H100-PCIe"},
      {"NVIDIA H100 NVL", "H100-NVL"},
      {"NVIDIA GH200 480GB", "GH200"},
      {"NVIDIA A100-SXM4-80GB", "A100-80GB"},
      {"NVIDIA A100-SXM4-40GB", "A100"},
      {"NVIDIA A100 80GB PCIe", "A100-80GB"},
      {"NVIDIA A100-PCIE-40GB", "A100"},
      {"Tesla V100-SXM2-16GB", "V100"},
      {"Tesla V100-SXM2-32GB", "V100-32GB"},
      {"Tesla T4", "T4"},
      {"NVIDIA A10G", "A10G"},
      {"NVIDIA A10", "A10"},
      {"NVIDIA L4", "L4"},
      {"NVIDIA L40S", "L40S"},
      {"NVIDIA B200", "B200"},
      {"NVIDIA RTX A6000", "A6000"},
      // Not in the catalog: no guess (a wrong match would calibrate another GPU's MFU).
      {"NVIDIA H200 NVL", ""},
      {"NVIDIA GeForce RTX 4090", ""},
      {"", ""},
  };
  for (const auto& [name, id] : cases) EXPECT_EQ(CatalogGpuId(name), id) << name;
}

TEST(Calibration, RunOverheadsFromTheBench) {
  BenchProfile b = LoadBenchJson(TestData("bench_demo_run.json")).value();
  ASSERT_TRUE(b.run.has_value());
  EXPECT_EQ(b.grad_accum, 2);
  const PlanDefaults d;
  const RunOverheads o = b.Overheads(b.model, b.batch, b.seq, d);
  EXPECT_EQ(o.source, "measured: " + b.file);
  EXPECT_DOUBLE_EQ(o.startup_s, 0.05 + 0.01 + 0.2 + 0.02);  // process + backend + model init + data open
  EXPECT_DOUBLE_EQ(o.peak_probe_s, 0.6);
  EXPECT_DOUBLE_EQ(o.forward_fraction, 50.0 * 2 / 280.0);  // per token: a forward of B*T vs a step of 2*B*T
  EXPECT_DOUBLE_EQ(o.sample_token_s, 0.3 / 60);
  EXPECT_DOUBLE_EQ(o.ckpt_write_gb_per_s, 53.5e6 / 0.1 / 1e9);
  EXPECT_DOUBLE_EQ(o.state_copy_gb_per_s, 53.5e6 / 0.01 / 1e9);
  EXPECT_DOUBLE_EQ(o.model_write_gb_per_s, 17.8e6 / 0.04 / 1e9);
  // A model twice as deep: model init grows with its memory, samples with its FLOPs per token.
  GptConfig deeper = b.model;
  deeper.n_layer = 8;
  const RunOverheads big = b.Overheads(deeper, b.batch, b.seq, d);
  EXPECT_GT(big.startup_s, o.startup_s);
  EXPECT_NEAR(big.sample_token_s / o.sample_token_s,
              GptFlopsPerToken(deeper, 128) / GptFlopsPerToken(b.model, 128), 1e-12);
  // Without a run block every part is the documented default.
  const RunOverheads none = LoadBenchJson(TestData("bench_cpu.json")).value().Overheads(b.model, 16, 128, d);
  EXPECT_EQ(none.source, "defaults");
  EXPECT_DOUBLE_EQ(none.startup_s, d.startup_s);
}

TEST(Calibration, LocalRunIncludesItsNonStepWork) {
  Catalog cat = SmallCatalog();
  BenchProfile b = LoadBenchJson(TestData("bench_demo_run.json")).value();
  ASSERT_TRUE(AddLocalInstance(b, 0.0, 24.0, &cat).ok());
  PlanRequest req;
  req.workload.cfg = b.model;
  req.workload.seq = 128;
  req.workload.micro_batch = 16;
  req.workload.global_batch_tokens = 4096;
  req.workload.tokens = 150 * 4096.0;
  req.instances = {"local"};
  req.calibration = b;
  TrainRunSpec run;
  run.config_file = "demo.yaml";
  run.steps = 150;
  run.micro_batch = 16;
  run.seq = 128;
  run.grad_accum = 2;
  run.eval_every = 100;
  run.eval_batches = 16;
  run.sample_tokens = 60;
  run.num_samples = 3;
  run.ckpt_every = 100;
  req.run = run;
  Result<PlanResult> r = MakePlan(cat, req, PlanDefaults());
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->rows.size(), 1u);
  const PlanRow& row = r->rows[0];
  ASSERT_TRUE(row.run.has_value());
  EXPECT_EQ(row.fit.micro_batch, 16);  // the config's, not the largest that fits
  EXPECT_EQ(row.fit.grad_accum, 2);
  const RunBreakdown& rb = *row.run;
  EXPECT_NEAR(rb.steps_s, 150 * 0.28, 1e-6);  // the bench's own step
  // 2 evaluations x 16 batches x 2048 tokens, forward at 50 ms per 2048 tokens.
  EXPECT_NEAR(rb.eval_s, 2 * 16 * 0.05, 1e-9);
  EXPECT_NEAR(rb.sample_s, 0.3, 1e-9);  // one call decodes the 3 samples together: 60 steps
  EXPECT_NEAR(rb.startup_s + rb.probe_s, 0.28 + 0.6, 1e-9);
  EXPECT_DOUBLE_EQ(row.wall_s, rb.total_s());
  EXPECT_GT(rb.checkpoint_s(), 0);
}

// The restart overhead: the bench's start-up (+ the peak probe) and a resume taken as one measured save of
// the run's checkpoint, by hand; the default when the bench is of another device, has no run block, or is
// absent.
TEST(Calibration, RestartOverheadFromTheBench) {
  const PlanDefaults d;
  auto b = LoadBenchJson(TestData("bench_v100_run.json"));
  ASSERT_TRUE(b.ok()) << b.status().message();
  // Same model and shape as the bench: start-up 0.3 + 2.5 + 0.4 + 0.05, probe 0.6; twice its checkpoint bytes
  // resume in twice its 20 + 180 ms save.
  const RestartOverhead r = RestartFor(&*b, true, b->model, b->batch, b->seq, true, 2 * 53.5e6, d);
  EXPECT_TRUE(r.measured);
  EXPECT_NEAR(r.startup_s, 3.85, 1e-9);
  EXPECT_NEAR(r.resume_s, 0.4, 1e-9);
  EXPECT_NEAR(r.seconds, 4.25, 1e-9);
  EXPECT_NE(r.source.find("measured: " + TestData("bench_v100_run.json")), std::string::npos) << r.source;
  EXPECT_NE(r.source.find("taken as one save"), std::string::npos) << r.source;  // this bench timed no load
  // A bench that timed the load: the resume is that load, scaled to the run's checkpoint bytes.
  BenchProfile loaded = *b;
  loaded.run->checkpoint_load_ms = 50;
  const RestartOverhead rl = RestartFor(&loaded, true, b->model, b->batch, b->seq, true, 2 * 53.5e6, d);
  EXPECT_TRUE(rl.measured);
  EXPECT_NEAR(rl.resume_s, 0.1, 1e-9);
  EXPECT_NEAR(rl.seconds, 3.85 + 0.1, 1e-9);
  EXPECT_NE(rl.source.find("a timed load"), std::string::npos) << rl.source;
  auto parsed = ParseBenchJson(
      R"({"tool":"tern bench","model":{"n_layer":2,"n_head":2,"n_embd":32,"vocab_size":64,"block_size":16},)"
      R"("batch":2,"seq":16,"grad_accum":1,"precision":"fp32","device":"cpu","step_ms":5,"tokens_per_s":6400,)"
      R"("flops_per_token":1e5,"achieved_tflops":0.00064,"peak_tflops":0.1,"mfu":0.0064,)"
      R"("run":{"process_start_s":0.1,"backend_init_s":0,"peak_probe_s":0.5,"model_init_s":0.01,)"
      R"("forward_ms":1,"sample_tokens":0,"checkpoint_bytes":1e6,"checkpoint_copy_ms":1,"checkpoint_persist_ms":4,)"
      R"("checkpoint_load_ms":3}})",
      "inline.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_DOUBLE_EQ(parsed->run->checkpoint_load_ms, 3);
  EXPECT_NEAR(RestartFor(&*b, true, b->model, b->batch, b->seq, false, 53.5e6, d).seconds, 3.25 + 0.2, 1e-9);
  const RestartOverhead other = RestartFor(&*b, false, b->model, b->batch, b->seq, true, 53.5e6, d);
  EXPECT_FALSE(other.measured);
  EXPECT_DOUBLE_EQ(other.seconds, d.restart_minutes * 60);
  EXPECT_NE(other.source.find("measured V100, not this device"), std::string::npos) << other.source;
  auto steps_only = LoadBenchJson(TestData("bench_h100.json"));  // no run block
  ASSERT_TRUE(steps_only.ok());
  EXPECT_FALSE(RestartFor(&*steps_only, true, b->model, 16, 128, true, 53.5e6, d).measured);
  EXPECT_DOUBLE_EQ(RestartFor(nullptr, false, b->model, 16, 128, true, 53.5e6, d).seconds, 600);
}

}  // namespace
}  // namespace tern::plan
