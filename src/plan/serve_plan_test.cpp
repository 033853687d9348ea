// tern plan --serve: one replica's continuous-batching fixed point against hand arithmetic, Little's law,
// the fewest instances for a load, the targets and memory that exclude, the ranking and the CLI.
#include "plan/serve_plan.h"

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <tuple>

#include <nlohmann/json.hpp>

#include "model/gpt_config.h"
#include "plan/model_spec.h"
#include "testing/tern_binary.h"

namespace tern::plan {
namespace {

// An H100-class GPU with round numbers (3000 GB/s, 1000 bf16 TFLOPS, 80 GiB), an 8-GPU instance of it, and a
// V100 that tern's CUDA backend does not run on.
Catalog TestCatalog() {
  const std::string gpus =
      "gpu,vendor,form_factor,fp32_tflops,tf32_tflops_dense,bf16_fp16_tflops_dense,fp8_tflops_dense,"
      "fp64_tflops,mem_gib,mem_type,mem_bw_gbps,interconnect,interconnect_gbps,tdp_w,source,notes\n"
      "H100,NVIDIA,SXM,50,400,1000,,,80,HBM3,3000,NVLink,900,700,test,\n"
      "V100,NVIDIA,SXM2,15.7,,125,,7.8,16,HBM2,900,NVLink 2,300,300,test,\n";
  const std::string instances =
      "provider,region,instance_type,gpu,gpu_count,gpu_mem_gib,vcpus,mem_gib,price_ondemand_hr,price_spot_"
      "hr\n"
      "test,any,h1,H100,1,80,26,225,2.00,0.80\n"
      "test,any,h8,H100,8,80,208,1800,15.00,6.00\n"
      "test,any,v1,V100,1,16,8,61,0.50,\n";
  return LoadCatalogFromTexts({{"gpus.csv", gpus}, {"instances.csv", instances}}, PlanDefaults()).value();
}

ServeRequest Request(double rps) {
  ServeRequest r;
  r.model = GptPreset("gpt2-124m").value();
  r.model_label = "gpt2-124m";
  r.load.requests_per_s = rps;
  r.load.burst = 1.0;
  r.billing = {Billing::kOnDemand};
  return r;
}

// Hand arithmetic (the formulas of serve_plan.h, worked in Python): GPT-2 124M, 124,439,808 parameters in
// bf16 = 248.9 MB read per step at 0.6 x 3000 GB/s = 0.138 ms + 1 ms overhead; 36,864 KV bytes per token x
// 640 tokens of mean context per sequence; prefill 12.16 GFLOP at 0.5 x 1000 TFLOP/s = 0.184 ms. A token's
// step holds the batch it sees, b + 1 (itself and the others' mean): tpot = t(b + 1) / (1 - rho).
TEST(ServePlan, OneReplicaMatchesHandArithmeticAndLittlesLaw) {
  const Catalog cat = TestCatalog();
  ServeRequest req = Request(10);
  std::string why;
  const auto rm = MakeReplicaModel(*cat.FindGpu("H100"), req, PlanDefaults(), &why);
  ASSERT_TRUE(rm) << why;
  EXPECT_DOUBLE_EQ(rm->weight_bytes, 124439808.0 * 2);
  EXPECT_DOUBLE_EQ(rm->kv_bytes_per_token, 36864);
  EXPECT_NEAR(rm->prefill_s, 0.000183764241408, 1e-15);
  EXPECT_EQ(rm->max_batch, 1024) << "2835 fit in memory; tern serve's --max-batch stops at 1024";
  for (const auto& [lambda, rho, batch, step, tpot, ttft] :
       std::vector<std::tuple<double, double, double, double, double, double>>{
           {10, 0.001837642414, 3.055662798, 0.001178317637, 0.00119361828, 0.001362420193},
           {100, 0.01837642414, 45.62159404, 0.001736237811, 0.001782093517, 0.001923442199}}) {
    const ReplicaState s = rm->At(lambda, req.load);
    ASSERT_TRUE(s.feasible) << s.why;
    EXPECT_NEAR(s.rho, rho, 1e-9 * rho);
    EXPECT_NEAR(s.batch, batch, 1e-8 * batch);
    EXPECT_NEAR(s.step_s, step, 1e-9 * step);
    EXPECT_NEAR(s.tpot_s, tpot, 1e-9 * tpot);
    EXPECT_NEAR(s.ttft_s, ttft, 1e-9 * ttft);
    EXPECT_TRUE(s.memory_bound);
    // Little's law: sequences decoding = arrivals x time each spends decoding.
    EXPECT_NEAR(s.batch, lambda * req.load.completion_tokens * s.tpot_s, 1e-9 * s.batch);
  }
  // A lone request (a rate near zero) decodes in steps of one sequence, not of the mean batch's fraction.
  const ReplicaState lone = rm->At(1e-6, req.load);
  EXPECT_NEAR(lone.tpot_s, rm->StepSeconds(1), 1e-8 * lone.tpot_s);
}

// LoRA adapters served beside the model (tern serve --lora): 8 adapters of rank 16 on every block matrix of
// GPT-2 124M are 8 x 12 layers x 16 x 16 x 768 = 18,874,368 parameters, in bf16 beside bf16 weights
// 37,748,736 bytes (fp32 beside fp32 ones: twice that), resident and read every step; each token also does
// their 2 x 2,359,296 FLOPs. More adapters, less capacity; enough of them no longer fit.
TEST(ServePlan, LoraAdaptersAreResidentAndReadEveryStep) {
  const Catalog cat = TestCatalog();
  ServeRequest plain = Request(10), lora = Request(10);
  lora.lora_adapters = 8;
  lora.lora_rank = 16;
  std::string why;
  const auto a = MakeReplicaModel(*cat.FindGpu("H100"), plain, PlanDefaults(), &why);
  const auto b = MakeReplicaModel(*cat.FindGpu("H100"), lora, PlanDefaults(), &why);
  ASSERT_TRUE(a && b) << why;
  EXPECT_DOUBLE_EQ(b->adapter_bytes, 37748736.0);
  EXPECT_DOUBLE_EQ(b->weight_bytes, 124439808.0 * 2 + 37748736.0);
  EXPECT_DOUBLE_EQ(b->decode_flops - a->decode_flops, 2 * 2359296.0);
  EXPECT_NEAR(b->StepSeconds(4) - a->StepSeconds(4), 37748736.0 / a->bandwidth, 1e-12) << "memory-bound here";
  ServeRequest fp32 = lora;
  fp32.weights = "fp32";
  const auto c = MakeReplicaModel(*cat.FindGpu("H100"), fp32, PlanDefaults(), &why);
  ASSERT_TRUE(c) << why;
  EXPECT_DOUBLE_EQ(c->adapter_bytes, 75497472.0);
  auto pa = MakeServePlan(cat, plain, PlanDefaults()), pb = MakeServePlan(cat, lora, PlanDefaults());
  ASSERT_TRUE(pa.ok() && pb.ok());
  EXPECT_LT(pb->rows[0].capacity_rps, pa->rows[0].capacity_rps);
  EXPECT_NE(RenderServePlan(*pb, cat, 3, false, true).find("LoRA  8 adapters of rank 16"), std::string::npos);
  EXPECT_EQ(ServePlanJson(*pb, cat, 3)["lora"]["adapters"], 8);
  // 4,000 adapters (18.9 GB in bf16) do not fit the V100's 16 GiB beside the weights.
  lora.lora_adapters = 4000;
  EXPECT_FALSE(MakeReplicaModel(*cat.FindGpu("V100"), lora, PlanDefaults(), &why));
  EXPECT_NE(why.find("exceed"), std::string::npos) << why;
  // ... unless only 8 of them are in memory (tern serve --max-loaded-loras 8): then they cost what 8 do, and
  // the command and the JSON say so.
  lora.max_loaded_loras = 8;
  const auto paged = MakeReplicaModel(*cat.FindGpu("V100"), lora, PlanDefaults(), &why);
  ASSERT_TRUE(paged) << why;
  EXPECT_DOUBLE_EQ(paged->adapter_bytes, 37748736.0);
  auto pp = MakeServePlan(cat, lora, PlanDefaults());
  ASSERT_TRUE(pp.ok()) << pp.status().ToString();
  const std::string text = RenderServePlan(*pp, cat, 3, false, true);
  EXPECT_NE(text.find("LoRA  4000 adapters of rank 16"), std::string::npos) << text;
  EXPECT_NE(text.find("8 of them in memory"), std::string::npos) << text;
  EXPECT_NE(text.find("--max-loaded-loras 8"), std::string::npos) << text;
  EXPECT_EQ(ServePlanJson(*pp, cat, 3)["lora"]["in_memory"], 8);
  lora.lora_adapters = 0;
  EXPECT_FALSE(MakeServePlan(cat, lora, PlanDefaults()).ok()) << "--max-loaded-loras needs --lora-adapters";
  lora.lora_adapters = 4000;
  lora.max_loaded_loras = 0;
  lora.lora_rank = 0;
  EXPECT_FALSE(MakeServePlan(cat, lora, PlanDefaults()).ok());
}

TEST(ServePlan, TheFewestInstancesThatMeetTheTargetsCheapestFirst) {
  const Catalog cat = TestCatalog();
  ServeRequest req = Request(10);
  req.load.max_tpot_ms = 20;
  auto p = MakeServePlan(cat, req, PlanDefaults());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->rows.size(), 3u);
  EXPECT_EQ(cat.offers[p->rows[0].offer].instance_type, "h1") << "one H100 carries 10 req/s";
  EXPECT_EQ(p->rows[0].instances, 1);
  EXPECT_EQ(cat.offers[p->rows[1].offer].instance_type, "h8");
  EXPECT_FALSE(p->rows[2].runs) << "the V100 row is dearer-ranked: tern's CUDA backend needs 8.0+";
  EXPECT_NE(p->rows[2].runs_why.find("7.0"), std::string::npos);
  const ServeRow& best = p->rows[0];
  EXPECT_DOUBLE_EQ(best.hourly_usd, 2.0);
  EXPECT_NEAR(best.usd_per_mtok, 2.0 / (10 * 256 * 3600) * 1e6, 1e-12);
  EXPECT_GT(best.capacity_rps, 10);
  // At its capacity the replica is at the edge of a target; a little more is past it.
  std::string why;
  const auto rm = MakeReplicaModel(*cat.FindGpu("H100"), req, PlanDefaults(), &why);
  ASSERT_TRUE(rm) << why;
  EXPECT_TRUE(rm->At(best.capacity_rps * 0.999, req.load).feasible);
  EXPECT_FALSE(rm->At(best.capacity_rps * 1.01, req.load).feasible);

  // Ten times the load: more single-GPU instances, or fewer 8-GPU ones, whichever is cheaper per hour.
  req.load.requests_per_s = best.capacity_rps * 3.5;
  auto big = MakeServePlan(cat, req, PlanDefaults());
  ASSERT_TRUE(big.ok());
  for (const ServeRow& r : big->rows) {
    if (!r.runs) continue;
    EXPECT_GE(r.capacity_rps, req.load.requests_per_s);
    if (cat.offers[r.offer].instance_type == "h1") {
      EXPECT_EQ(r.instances, 4);
    }
    if (cat.offers[r.offer].instance_type == "h8") {
      EXPECT_EQ(r.instances, 1);
    }
  }
  EXPECT_EQ(cat.offers[big->rows[0].offer].instance_type, "h1") << "4 x $2 < 1 x $15";

  // Reserved is on-demand less the discount; spot carries its risk.
  req.billing = {Billing::kReserved, Billing::kSpot};
  req.load.requests_per_s = 10;
  auto billed = MakeServePlan(cat, req, PlanDefaults());
  ASSERT_TRUE(billed.ok());
  for (const ServeRow& r : billed->rows) {
    if (cat.offers[r.offer].instance_type != "h1") continue;
    if (r.billing == Billing::kReserved) {
      EXPECT_DOUBLE_EQ(r.price_hr, 2.0 * (1 - 0.35));
    }
    if (r.billing == Billing::kSpot) {
      EXPECT_EQ(r.risk, "preemption");
    }
  }
}

TEST(ServePlan, TargetsAndMemoryExcludeWithTheReason) {
  const Catalog cat = TestCatalog();
  ServeRequest req = Request(1);
  req.load.max_tpot_ms = 0.5;  // below the 1 ms step overhead
  auto fast = MakeServePlan(cat, req, PlanDefaults());
  ASSERT_TRUE(fast.ok());
  EXPECT_TRUE(fast->rows.empty());
  ASSERT_FALSE(fast->excluded.empty());
  EXPECT_NE(fast->excluded[0].reason.find("--max-tpot-ms"), std::string::npos) << fast->excluded[0].reason;

  ServeRequest huge = Request(1);
  huge.model = GptConfigForParams(30e9).value();  // 30B in bf16 = 60 GB: only the 80 GiB GPUs hold it
  auto h = MakeServePlan(cat, huge, PlanDefaults());
  ASSERT_TRUE(h.ok());
  bool v100_excluded = false;
  for (const auto& e : h->excluded)
    if (cat.offers[e.offer].gpu == "V100" && e.reason.find("exceed") != std::string::npos)
      v100_excluded = true;
  EXPECT_TRUE(v100_excluded);
  for (const ServeRow& r : h->rows) EXPECT_EQ(cat.offers[r.offer].gpu, "H100");

  ServeRequest bad = Request(1);
  bad.load.prompt_tokens = 1000;  // + 256 > the 1024-token context
  EXPECT_FALSE(MakeServePlan(cat, bad, PlanDefaults()).ok());
  bad = Request(1);
  bad.kv_dtype = "int8";
  auto kv = MakeServePlan(cat, bad, PlanDefaults());
  ASSERT_FALSE(kv.ok());
  EXPECT_NE(kv.status().message().find("CPU only"), std::string::npos);
  // int4 weights: tern serve runs them on the CPU only, so a plan needs a CPU's measurement.
  bad = Request(1);
  bad.weights = "int4";
  auto w4 = MakeServePlan(cat, bad, PlanDefaults());
  ASSERT_FALSE(w4.ok());
  EXPECT_NE(w4.status().message().find("--calibrate serve.json --instance local"), std::string::npos)
      << w4.status().message();
}

// Speculative decoding: 4 draft tokens a step, half kept = 3 tokens per step of 5 rows. Memory-bound (GPT-2
// 124M at 10 req/s on the H100) the step's read is shared by 3 tokens: about a third of the time per token,
// Little's law still holding; with nothing kept it is no faster, and a compute-bound step pays all 5 rows.
TEST(ServePlan, SpeculationSharesTheReadAndPaysTheRows) {
  const Catalog cat = TestCatalog();
  ServeRequest plain = Request(10), spec = Request(10);
  spec.load.speculative_tokens = 4;
  spec.load.acceptance = 0.5;
  std::string why;
  const auto rm = MakeReplicaModel(*cat.FindGpu("H100"), plain, PlanDefaults(), &why);
  ASSERT_TRUE(rm) << why;
  const ReplicaState a = rm->At(10, plain.load), b = rm->At(10, spec.load);
  ASSERT_TRUE(a.feasible && b.feasible) << a.why << b.why;
  EXPECT_TRUE(b.memory_bound);
  EXPECT_LT(b.tpot_s, 0.36 * a.tpot_s);
  EXPECT_GT(b.tpot_s, 0.30 * a.tpot_s);
  EXPECT_NEAR(b.batch, 10 * spec.load.completion_tokens * b.tpot_s, 1e-9 * b.batch);  // Little's law
  EXPECT_NEAR(b.step_s, rm->StepSeconds(b.batch, 5), 1e-15);
  ServeRequest none = spec;
  none.load.acceptance = 0;
  EXPECT_GE(rm->At(10, none.load).tpot_s, a.tpot_s);
  // Compute-bound (short contexts: no KV read to speak of), the rows are paid.
  ReplicaModel short_ctx = *rm;
  short_ctx.kv_bytes_per_token = 0;
  EXPECT_NEAR(short_ctx.StepSeconds(4096, 5) - rm->overhead_s,
              5 * (short_ctx.StepSeconds(4096) - rm->overhead_s), 1e-12);
  auto ps = MakeServePlan(cat, spec, PlanDefaults());
  ASSERT_TRUE(ps.ok()) << ps.status().ToString();
  EXPECT_NE(RenderServePlan(*ps, cat, 3, false, true).find("--speculative-tokens 4"), std::string::npos);
  EXPECT_EQ(ServePlanJson(*ps, cat, 3)["load"]["acceptance"], 0.5);
  spec.load.acceptance = 1.5;
  EXPECT_FALSE(MakeServePlan(cat, spec, PlanDefaults()).ok());
}

TEST(ServePlanCli, PrintsTheCommandToRunAndJson) {
  const auto tern = testing::FindTernBinary();
  ASSERT_FALSE(tern.empty());
  auto run = [&](const std::string& args) {
    std::string out;
    FILE* p = popen((tern.string() + " plan --serve " + args + " 2>&1").c_str(), "r");
    char buf[4096];
    while (p && fgets(buf, sizeof buf, p)) out += buf;
    const int st = p ? pclose(p) : -1;
    return std::make_pair(WIFEXITED(st) ? WEXITSTATUS(st) : -1, out);
  };
  auto [code, text] = run("--model gpt2-124m --requests-per-s 20 --top 3");
  ASSERT_EQ(code, 0) << text;
  EXPECT_NE(text.find("tern serve MODEL --device cuda --weights bf16"), std::string::npos) << text;
  EXPECT_EQ(text.find(" spot "), std::string::npos) << "serving plans leave spot out unless asked";
  // Spot, when asked for: the command drains the replica at the cloud's preemption notice.
  auto [scode, stext] = run("--model gpt2-124m --requests-per-s 20 --top 2 --billing spot --providers aws");
  ASSERT_EQ(scode, 0) << stext;
  EXPECT_NE(stext.find("--notice-url http://169.254.169.254 --notice-kind aws"), std::string::npos) << stext;
  EXPECT_NE(stext.find("the replica drains"), std::string::npos) << stext;
  auto [jcode, json] = run("--model gpt2-124m --requests-per-s 20 --top 2 --json");
  ASSERT_EQ(jcode, 0) << json;
  auto j = nlohmann::json::parse(json);
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_LE(j["rows"][0]["usd_per_hour"].get<double>(), j["rows"][1]["usd_per_hour"].get<double>());
  EXPECT_GE(j["rows"][0]["capacity_rps"].get<double>(), 20);
  auto [ecode, etext] = run("--model gpt2-124m");
  EXPECT_EQ(ecode, 1);
  EXPECT_NE(etext.find("--requests-per-s"), std::string::npos) << etext;
  auto [sc, st] = run("--model gpt2-124m --requests-per-s 20 --speculative-tokens 4");
  EXPECT_EQ(sc, 1);
  EXPECT_NE(st.find("needs --acceptance"), std::string::npos) << st;
  auto [tcode, ttext] = run("--model gpt2-124m --requests-per-s 5 --max-tpot-ms 0.1");
  EXPECT_EQ(tcode, 3) << "no option meets the target";
}

}  // namespace
}  // namespace tern::plan
