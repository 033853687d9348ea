// tern plan --serve --calibrate: a serving bench's decode steps fitted back to the replica model's constants
// (a bench synthesised from known constants gives them back), refusals that name the fix, the fitted
// constants applied only to the measured GPU's offers, and the local machine as an instance.
#include "plan/serve_calibration.h"

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "plan/model_spec.h"
#include "testing/tern_binary.h"

namespace tern::plan {
namespace {

Catalog TestCatalog() {
  const std::string gpus =
      "gpu,vendor,form_factor,fp32_tflops,tf32_tflops_dense,bf16_fp16_tflops_dense,fp8_tflops_dense,"
      "fp64_tflops,mem_gib,mem_type,mem_bw_gbps,interconnect,interconnect_gbps,tdp_w,source,notes\n"
      "H100,NVIDIA,SXM,50,400,1000,,,80,HBM3,3000,NVLink,900,700,test,\n"
      "A100,NVIDIA,SXM,19.5,156,312,,,80,HBM2e,2000,NVLink,600,400,test,\n";
  const std::string instances =
      "provider,region,instance_type,gpu,gpu_count,gpu_mem_gib,vcpus,mem_gib,price_ondemand_hr,price_spot_"
      "hr\n"
      "test,any,h1,H100,1,80,26,225,2.00,0.80\n"
      "test,any,a1,A100,1,80,26,225,1.50,0.60\n";
  return LoadCatalogFromTexts({{"gpus.csv", gpus}, {"instances.csv", instances}}, PlanDefaults()).value();
}

// The steps the replica model predicts with these constants, written as `tern bench --serve --json` would.
nlohmann::json SyntheticBench(const std::string& device, const std::string& gpu, double bw_gbps,
                              double peak_tflops, double eff, double mfu, double prefill_mfu,
                              double overhead_ms, int context) {
  GpuSpec spec;
  spec.name = "x";
  spec.mem_bw_gbps = bw_gbps;
  spec.fp32_tflops = spec.tf32_tflops = spec.bf16_tflops = peak_tflops;
  spec.mem_gib = 1e6;
  ServeRequest req;
  req.model = GptPreset("gpt2-124m").value();
  req.load.prompt_tokens = context;
  req.load.completion_tokens = 0;
  PlanDefaults d;
  d.serve_bw_efficiency = eff;
  d.serve_decode_mfu = mfu;
  d.serve_prefill_mfu = prefill_mfu;
  d.serve_step_overhead_ms = overhead_ms;
  std::string why;
  const auto r = MakeReplicaModel(spec, req, d, &why);
  EXPECT_TRUE(r) << why;
  nlohmann::json j = {
      {"kind", "serve"},
      {"v", 1},
      {"device", device},
      {"gpu", gpu},
      {"model",
       {{"n_layer", 12}, {"n_head", 12}, {"n_embd", 768}, {"vocab_size", 50257}, {"block_size", 1024}}},
      {"weights", "bf16"},
      {"kv_dtype", "bf16"},
      {"threads", 2},
      {"context", context},
      {"read_gbps", device == "cpu" ? bw_gbps : 0},
      {"peak_tflops", peak_tflops},
      {"prefill_ms", r->prefill_s * 1e3}};
  for (int b : {1, 4, 16, 64, 256}) j["decode"].push_back({{"batch", b}, {"ms", r->StepSeconds(b) * 1e3}});
  return j;
}

TEST(ServeCalibration, AFitGivesBackTheConstantsThatMadeTheSteps) {
  // Memory-bound at small batches, compute-bound at 256 (a short context, a low MFU): both lines are seen.
  const auto j = SyntheticBench("cuda", "H100", 3000, 1000, 0.7, 0.1, 0.3, 0.5, 64);
  auto b = ParseServeBenchJson(j.dump(), "bench.json");
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->DeviceName(), "H100");
  auto c = CalibrateServe(*b, TestCatalog());
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->device, "H100");
  EXPECT_DOUBLE_EQ(c->bandwidth_gbps, 3000) << "against the datasheet: the constants carry to every H100";
  EXPECT_NEAR(c->overhead_ms, 0.5, 0.5 * 0.02);
  EXPECT_NEAR(c->bw_efficiency, 0.7, 0.7 * 0.02);
  EXPECT_NEAR(c->decode_mfu, 0.1, 0.1 * 0.02);
  EXPECT_TRUE(c->compute_bound_seen);
  EXPECT_NEAR(c->prefill_mfu, 0.3, 1e-9);
  EXPECT_LT(c->max_error, 0.01);
  ASSERT_EQ(c->points.size(), 5u);
  for (const auto& p : c->points) EXPECT_NEAR(p.model_ms, p.measured_ms, 0.01 * p.measured_ms) << p.batch;
  // Memory-bound all the way (a long context): the MFU is only a lower bound, and says so.
  auto mem =
      ParseServeBenchJson(SyntheticBench("cuda", "H100", 3000, 1000, 0.7, 0.4, 0.3, 0.5, 512).dump(), "m");
  ASSERT_TRUE(mem.ok());
  auto cm = CalibrateServe(*mem, TestCatalog());
  ASSERT_TRUE(cm.ok());
  EXPECT_FALSE(cm->compute_bound_seen);
  EXPECT_LE(cm->decode_mfu, 0.4) << "a lower bound: the compute line passes under the measured steps";
  EXPECT_NEAR(cm->bw_efficiency, 0.7, 0.7 * 0.02);
  EXPECT_LT(cm->max_error, 0.01);
}

TEST(ServeCalibration, RefusalsNameTheFix) {
  const auto good = SyntheticBench("cuda", "H100", 3000, 1000, 0.7, 0.4, 0.3, 0.5, 512);
  nlohmann::json training = good;
  training.erase("kind");
  auto r = ParseServeBenchJson(training.dump(), "t.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tern bench --serve --json"), std::string::npos)
      << r.status().message();
  nlohmann::json one = good;
  one["decode"] = nlohmann::json::array({{{"batch", 1}, {"ms", 1.0}}});
  r = ParseServeBenchJson(one.dump(), "one.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--batches"), std::string::npos) << r.status().message();
  nlohmann::json missing = good;
  missing.erase("prefill_ms");
  r = ParseServeBenchJson(missing.dump(), "m.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("prefill_ms"), std::string::npos) << r.status().message();
  EXPECT_FALSE(ParseServeBenchJson("not json", "x.json").ok());
}

TEST(ServeCalibration, AppliesToTheMeasuredGpusOffersOnly) {
  const Catalog cat = TestCatalog();
  // Slower than the defaults on the H100: 30% of the bandwidth, 5 ms per step.
  auto b = ParseServeBenchJson(SyntheticBench("cuda", "H100", 3000, 1000, 0.3, 0.4, 0.3, 5, 512).dump(),
                               "h100.json");
  ASSERT_TRUE(b.ok());
  ServeRequest req;
  req.model = GptPreset("gpt2-124m").value();
  req.model_label = "gpt2-124m";
  req.load.requests_per_s = 5;
  req.load.burst = 1.0;
  req.billing = {Billing::kOnDemand};
  auto plain = MakeServePlan(cat, req, PlanDefaults());
  ASSERT_TRUE(plain.ok());
  req.calibration = CalibrateServe(*b, cat).value();
  auto cal = MakeServePlan(cat, req, PlanDefaults());
  ASSERT_TRUE(cal.ok()) << cal.status().message();
  ASSERT_EQ(cal->rows.size(), 2u);
  for (size_t i = 0; i < 2; i++) {
    const ServeRow& row = cal->rows[i];
    const std::string gpu = cat.offers[row.offer].gpu;
    const auto same = std::find_if(plain->rows.begin(), plain->rows.end(),
                                   [&](const ServeRow& r) { return r.offer == row.offer; });
    ASSERT_NE(same, plain->rows.end());
    EXPECT_EQ(row.calibrated, gpu == "H100") << gpu;
    if (gpu == "H100")
      EXPECT_GT(row.state.step_s, same->state.step_s + 0.003) << "the measured 5 ms overhead is in the step";
    else
      EXPECT_DOUBLE_EQ(row.state.step_s, same->state.step_s) << "the A100 keeps the assumptions";
  }
  const std::string text = RenderServePlan(*cal, cat, 5, false, true);
  EXPECT_NE(text.find("H100 rows calibrated from h100.json"), std::string::npos) << text;
  EXPECT_NE(text.find("other rows:"), std::string::npos) << text;
  EXPECT_TRUE(ServePlanJson(*cal, cat, 5)["rows"][0].contains("calibrated"));
}

TEST(ServeCalibration, TheLocalCpuIsAnInstanceWithItsMeasuredSteps) {
  Catalog cat = TestCatalog();
  auto b = ParseServeBenchJson(SyntheticBench("cpu", "", 40, 0.3, 0.8, 0.6, 0.5, 2, 256).dump(), "cpu.json");
  ASSERT_TRUE(b.ok()) << b.status().message();
  ASSERT_TRUE(AddLocalServeInstance(*b, 0.10, 16, &cat).ok());
  auto c = CalibrateServe(*b, cat);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->device, "cpu");
  EXPECT_DOUBLE_EQ(c->bandwidth_gbps, 40) << "a CPU is calibrated against its own measured read";
  ServeRequest req;
  req.model = GptPreset("gpt2-124m").value();
  req.model_label = "gpt2-124m";
  req.load = {0.2, 200, 56, 1000, 0, 1.0};
  req.billing = {Billing::kOnDemand};
  req.instances = {"local"};
  req.kv_dtype = "int8";  // the CPU's int8 KV cache: allowed once the plan is for the local CPU
  req.calibration = *c;
  auto plan = MakeServePlan(cat, req, PlanDefaults());
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  ASSERT_EQ(plan->rows.size(), 1u);
  EXPECT_TRUE(plan->rows[0].runs);
  EXPECT_TRUE(plan->rows[0].calibrated);
  EXPECT_NE(RenderServePlan(*plan, cat, 5, false, true).find("--device cpu"), std::string::npos);
  req.weights = "int4";  // int4 weights, tern serve's CPU path: allowed for the local CPU too
  auto p4 = MakeServePlan(cat, req, PlanDefaults());
  ASSERT_TRUE(p4.ok()) << p4.status().message();
  EXPECT_LT(p4->rows[0].state.step_s, plan->rows[0].state.step_s)
      << "a decode step reads 4.5 bits a weight, not the default bf16's 16";
  EXPECT_NE(RenderServePlan(*p4, cat, 5, false, true).find("--weights int4"), std::string::npos);
  req.weights = "bf16";
  req.calibration.reset();
  EXPECT_FALSE(MakeServePlan(cat, req, PlanDefaults()).ok()) << "an int8 KV cache without a CPU calibration";
}

// The whole loop on this machine: tern bench --serve measures a small model (with LoRA adapters too), tern
// plan
// --serve fits it and plans the local CPU with it, and the plan's decode steps are the measured ones within
// the fit's error.
TEST(ServeCalibrationCli, BenchThenPlanTheLocalMachine) {
  const auto tern = testing::FindTernBinary();
  ASSERT_FALSE(tern.empty());
  auto run = [&](const std::string& args, bool merge) {
    std::string out;
    FILE* p = popen((tern.string() + " " + args + (merge ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
    char buf[4096];
    while (p && fgets(buf, sizeof buf, p)) out += buf;
    const int st = p ? pclose(p) : -1;
    return std::make_pair(WIFEXITED(st) ? WEXITSTATUS(st) : -1, out);
  };
  const std::string shape = "--model gpt2-124m --n-layer 2 --n-embd 128 --n-head 4 --vocab-size 512";
  auto [bcode, bench] = run("bench --serve " + shape +
                                " --device cpu --weights fp32 --batches 1,8 --context 64 "
                                "--steps 3 --lora-rank 2 --lora-adapters 2 --json",
                            false);
  ASSERT_EQ(bcode, 0) << bench;
  const auto path = std::filesystem::path(::testing::TempDir()) / "serve_bench.json";
  {
    FILE* f = fopen(path.c_str(), "w");
    ASSERT_TRUE(f);
    fputs(bench.c_str(), f);
    fclose(f);
  }
  const auto b = nlohmann::json::parse(bench);
  EXPECT_EQ(b["kind"], "serve");
  EXPECT_EQ(b["weights"], "fp32");
  EXPECT_EQ(b["decode"].size(), 2u);
  // --lora-rank: each batch timed again with LoRA adapters (tern serve --lora); the fit reads "decode" only.
  EXPECT_EQ(b["lora"]["rank"], 2);
  ASSERT_EQ(b["lora_decode"].size(), 2u);
  EXPECT_EQ(b["lora_decode"][1]["batch"], 8);
  EXPECT_GT(b["lora_decode"][1]["ms"].get<double>(), 0);
  EXPECT_GT(b["read_gbps"].get<double>(), 0);
  auto [pcode, plan] =
      run("plan --serve --calibrate " + path.string() +
              " --instance local --price-per-hour 0.05 --requests-per-s 0.5 --prompt-tokens 32 "
              "--completion-tokens 16 --max-tpot-ms 1000 --json",
          true);
  ASSERT_EQ(pcode, 0) << plan;
  const auto j = nlohmann::json::parse(plan);
  ASSERT_EQ(j["rows"].size(), 1u) << "the local machine, on demand only";
  EXPECT_EQ(j["rows"][0]["provider"], "local");
  EXPECT_EQ(j["rows"][0]["billing"], "on-demand");
  EXPECT_TRUE(j["rows"][0]["calibrated"].get<bool>());
  EXPECT_EQ(j["weights"], "fp32") << "the bench's weights when --weights is not given";
  EXPECT_EQ(j["model"]["shape"], "L2 H4 C128 V512 T1024") << "and its model when --model is not given";
  const auto& c = j["calibration"];
  EXPECT_EQ(c["device"], "cpu");
  for (const auto& p : c["points"])
    EXPECT_NEAR(p["model_ms"].get<double>(), p["measured_ms"].get<double>(),
                c["max_error"].get<double>() * p["measured_ms"].get<double>() + 1e-9);
  // Planning another weight format from this measurement is refused, naming the fix.
  auto [wcode, wtext] =
      run("plan --serve --calibrate " + path.string() + " --weights int8 --requests-per-s 1", true);
  EXPECT_EQ(wcode, 1);
  EXPECT_NE(wtext.find("tern bench --serve --weights int8"), std::string::npos) << wtext;
  // --instance local without a serving bench.
  auto [lcode, ltext] = run("plan --serve --model gpt2-124m --instance local --requests-per-s 1", true);
  EXPECT_EQ(lcode, 1);
  EXPECT_NE(ltext.find("tern bench --serve --json"), std::string::npos) << ltext;
}

// int4 weights (CPU only): tern bench --serve measures them, tern plan --serve plans the local CPU with them,
// its command line carries --weights int4. On a CPU without AVX-512 VNNI the bench refuses, naming the fix.
TEST(ServeCalibrationCli, Int4WeightsBenchThenPlanTheLocalMachine) {
  const auto tern = testing::FindTernBinary();
  ASSERT_FALSE(tern.empty());
  auto run = [&](const std::string& args) {  // exit code and stdout + stderr
    std::string out;
    FILE* p = popen((tern.string() + " " + args).c_str(), "r");
    char buf[4096];
    while (p && fgets(buf, sizeof buf, p)) out += buf;
    const int st = p ? pclose(p) : -1;
    return std::make_pair(WIFEXITED(st) ? WEXITSTATUS(st) : -1, out);
  };
  const auto path = std::filesystem::path(::testing::TempDir()) / "serve_bench_int4.json";
  auto [bcode, btext] =
      run("bench --serve --model gpt2-124m --n-layer 2 --n-embd 128 --n-head 4 --vocab-size 512 --device cpu "
          "--weights int4 --batches 1,4 --context 64 --steps 3 --json 2>&1 > " +
          path.string());
  if (bcode != 0 && btext.find("AVX-512 VNNI") != std::string::npos)
    GTEST_SKIP() << "this CPU has no AVX-512 VNNI: " << btext;
  ASSERT_EQ(bcode, 0) << btext;
  auto [pcode, plan] = run("plan --serve --calibrate " + path.string() +
                           " --instance local --price-per-hour 0.05 --requests-per-s 0.5 --prompt-tokens 32 "
                           "--completion-tokens 16 --max-tpot-ms 1000 2>&1");
  ASSERT_EQ(pcode, 0) << plan;
  EXPECT_NE(plan.find("--weights int4"), std::string::npos) << plan;
  // Without a CPU's measurement, int4 is refused with the way to get one.
  auto [gcode, gtext] = run("plan --serve --model gpt2-124m --weights int4 --requests-per-s 1 2>&1");
  EXPECT_EQ(gcode, 1);
  EXPECT_NE(gtext.find("tern bench --serve --weights int4"), std::string::npos) << gtext;
}

}  // namespace
}  // namespace tern::plan
