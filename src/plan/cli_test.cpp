// `tern plan` as a user runs it: flags, exit codes, JSON, errors. Runs the built binary
// ($TERN_BINARY_DIR/tern, else found above the test executable; plan_test depends on the tern target). A
// missing binary or a `tern plan` that crashes (dies of a signal) fails the test.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "testing/tern_binary.h"

namespace tern::plan {
namespace {

namespace fs = std::filesystem;

struct Output {
  int code = -1;  // exit status; -1 when the binary is missing or it died of a signal
  std::string text;
};

// Runs `tern <args>`; a missing binary or a crash is a failure of the calling test (and code stays -1).
Output Tern(const std::string& args) {
  const fs::path tern = testing::FindTernBinary();
  Output out;
  if (tern.empty()) {
    ADD_FAILURE() << "the tern binary is not built (build the tern target, or set TERN_BINARY_DIR)";
    return out;
  }
  FILE* p = popen((tern.string() + " " + args + " 2>&1").c_str(), "r");
  if (!p) {
    ADD_FAILURE() << "popen failed for `tern " << args << "`";
    return out;
  }
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) out.text.append(buf.data(), n);
  const int status = pclose(p);
  // The shell may run tern as a child and exit with 128 + the signal instead of dying of it.
  const int sig = WIFSIGNALED(status)                              ? WTERMSIG(status)
                  : WIFEXITED(status) && WEXITSTATUS(status) > 128 ? WEXITSTATUS(status) - 128
                                                                   : 0;
  if (sig != 0) {
    ADD_FAILURE() << "`tern " << args << "` crashed (signal " << sig << " " << strsignal(sig) << "):\n"
                  << out.text;
    return out;
  }
  out.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

// Stops the test when `tern` did not run to an exit status (the failure is already reported).
#define ASSERT_RAN(out) ASSERT_NE((out).code, -1) << "tern did not run to an exit status"

TEST(PlanCli, HelpTeachesWithExamples) {
  Output o = Tern("plan --help");
  ASSERT_RAN(o);
  EXPECT_EQ(o.code, 0);
  for (const char* s :
       {"Examples:", "--tokens 10B", "--explain", "--calibrate", "--show-excluded", "Exit status"}) {
    EXPECT_NE(o.text.find(s), std::string::npos) << s;
  }
}

TEST(PlanCli, TableJsonAndExplain) {
  Output o = Tern("plan --model gpt2-124m --tokens 10B --top 5");
  ASSERT_RAN(o);
  EXPECT_EQ(o.code, 0) << o.text;
  for (const char* s : {"Plans (5 of", "Pareto frontier", "Recommendation:", "Excluded"}) {
    EXPECT_NE(o.text.find(s), std::string::npos) << s << "\n" << o.text;
  }
  Output j = Tern("plan --model gpt2-124m --tokens 10B --top 3 --json --show-excluded");
  ASSERT_EQ(j.code, 0) << j.text;
  const auto doc = nlohmann::json::parse(j.text, nullptr, false);
  ASSERT_TRUE(doc.is_object()) << j.text.substr(0, 500);
  EXPECT_EQ(doc["plans"].size(), 3u);
  EXPECT_EQ(doc["excluded"].size(), doc["excluded_count"].get<size_t>());
  Output e = Tern("plan --model gpt2-124m --tokens 10B --explain 1");
  EXPECT_EQ(e.code, 0);
  EXPECT_NE(e.text.find("1. FLOPs"), std::string::npos) << e.text;
}

// --lora-rank: GPT-2 1.5B's full training fits no single 24 GB GPU (weights, gradients and moments alone are
// 16 bytes x 1.56B = 23 GiB); with LoRA adapters (gradients and moments for 20M parameters) it fits an L4.
TEST(PlanCli, LoraFitsWhereFullTrainingDoesNot) {
  const std::string args = "plan --model gpt2-1558m --tokens 20M --max-gpus 1 --gpus L4 --json";
  Output full = Tern(args);
  ASSERT_RAN(full);
  auto f = nlohmann::json::parse(full.text, nullptr, false);
  ASSERT_TRUE(f.is_object()) << full.text.substr(0, 500);
  EXPECT_TRUE(f["plans"].empty()) << full.text.substr(0, 800);
  Output lora = Tern(args + " --lora-rank 16");
  ASSERT_RAN(lora);
  EXPECT_EQ(lora.code, 0) << lora.text.substr(0, 800);
  auto l = nlohmann::json::parse(lora.text, nullptr, false);
  ASSERT_TRUE(l.is_object()) << lora.text.substr(0, 500);
  ASSERT_FALSE(l["plans"].empty());
  EXPECT_EQ(l["workload"]["lora_rank"], 16);
  // 16 r C per layer (qkv 4rC, attproj 2rC, fc 5rC, fcproj 5rC): 16 x 16 x 1600 x 48.
  EXPECT_EQ(l["workload"]["trainable_params"], 16.0 * 16 * 1600 * 48);
  Output text = Tern("plan --model gpt2-1558m --tokens 20M --max-gpus 1 --gpus L4 --lora-rank 16");
  EXPECT_NE(text.text.find("LoRA  r16"), std::string::npos) << text.text.substr(0, 800);
  Output bad = Tern("plan --model gpt2-124m --tokens 1B --lora-rank 100000");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.text.find("--lora-rank"), std::string::npos) << bad.text;
}

// --calibrate takes a `tern bench --dist --json` file beside (or instead of) a `tern bench --json` one: the
// measured link sets the comm term of the H100 single-instance rows, and the explanation says so; --csv
// prints the rows with their runs column.
TEST(PlanCli, CalibrateWithAMeasuredLinkAndCsv) {
  const std::string dir = (fs::path(TERN_TEST_SOURCE_DIR) / "src/plan/testdata").string();
  const std::string args =
      "plan --model gpt2-124m --tokens 10B --gpus H100 --billing on-demand --max-gpus 8 "
      "--calibrate " +
      dir + "/dist_h100x8.json --calibrate " + dir + "/bench_h100.json";
  Output j = Tern(args + " --json --top 100");
  ASSERT_RAN(j);
  ASSERT_EQ(j.code, 0) << j.text;
  const auto doc = nlohmann::json::parse(j.text, nullptr, false);
  ASSERT_TRUE(doc.is_object()) << j.text.substr(0, 500);
  bool measured = false;
  for (const auto& p : doc["plans"]) {
    if (p["gpus"] == 8 && p["instances"] == 1) {
      EXPECT_EQ(p["throughput"]["link_measured"], true) << p.dump();
      measured = true;
    }
    EXPECT_NE(p["throughput"]["mfu_source"].get<std::string>().find("calibrated"), std::string::npos);
  }
  EXPECT_TRUE(measured);
  Output e = Tern(args + " --explain 1");
  ASSERT_EQ(e.code, 0) << e.text;
  EXPECT_NE(
      e.text.find("measured by tern bench --dist: " + dir + "/dist_h100x8.json: nccl, 8 ranks on 1 node"),
      std::string::npos)
      << e.text;
  Output csv = Tern(args + " --csv --top 3");
  ASSERT_EQ(csv.code, 0) << csv.text;
  EXPECT_EQ(csv.text.rfind("rank,provider,region,instance,", 0), 0u) << csv.text;
  EXPECT_NE(csv.text.find(",runs,runs_why,why\n1,"), std::string::npos) << csv.text;
  Output two = Tern("plan --model gpt2-124m --tokens 10B --calibrate " + dir +
                    "/bench_h100.json --calibrate " + dir + "/bench_cpu.json");
  EXPECT_EQ(two.code, 1);
  EXPECT_NE(two.text.find("are both `tern bench --json` files; give one"), std::string::npos) << two.text;
}

TEST(PlanCli, ConstraintsAndFilters) {
  Output none = Tern("plan --model gpt2-124m --tokens 10B --budget 1");
  ASSERT_RAN(none);
  EXPECT_EQ(none.code, 3) << none.text;  // no option meets the constraints
  EXPECT_NE(none.text.find("Cheapest:"), std::string::npos) << none.text;
  Output some = Tern(
      "plan --model gpt2-350m --tokens 5B --deadline 2h --max-gpus 16 --providers aws,gcp "
      "--regions us-east-1,us-central1 --gpus H100,B200 --billing on-demand,spot --json");
  ASSERT_EQ(some.code, 0) << some.text;
  const auto doc = nlohmann::json::parse(some.text, nullptr, false);
  for (const auto& p : doc["plans"]) {
    EXPECT_TRUE(p["provider"] == "aws" || p["provider"] == "gcp");
    EXPECT_TRUE(p["gpu"] == "H100" || p["gpu"] == "B200");
    EXPECT_LE(p["gpus"].get<int>(), 16);
    EXPECT_LE(p["wall_s"].get<double>(), 2 * 3600.0);
    EXPECT_NE(p["billing"], "reserved");
  }
}

TEST(PlanCli, ConfigPlansTheWholeTrainingRun) {
  // TERN_TEST_SOURCE_DIR, not __FILE__ (see planner_test.cpp).
  const std::string bench =
      (fs::path(TERN_TEST_SOURCE_DIR) / "src/plan/testdata/bench_demo_run.json").string();
  const std::string args =
      "plan --config configs/demo.yaml --set train.steps=150 --calibrate " + bench + " --instance local";
  Output j = Tern(args + " --json");
  ASSERT_RAN(j);
  ASSERT_EQ(j.code, 0) << j.text;
  const auto doc = nlohmann::json::parse(j.text, nullptr, false);
  ASSERT_TRUE(doc.is_object()) << j.text.substr(0, 500);
  const auto& p = doc["plans"][0];
  const auto& run = p["run"];
  EXPECT_EQ(run["steps"], 150);
  EXPECT_EQ(run["evals"], 2);                   // steps 100 and 150
  EXPECT_EQ(run["samples"], 3);                 // sample.count at the end
  EXPECT_EQ(run["checkpoint_tier_writes"], 5);  // 100: fast + best; 150: fast + durable + best
  EXPECT_DOUBLE_EQ(run["total_s"].get<double>(), p["wall_s"].get<double>());
  EXPECT_GT(run["eval_s"].get<double>(), 0);
  EXPECT_EQ(p["memory"]["micro_batch"], 16);
  EXPECT_NEAR(run["steps_s"].get<double>(), 150 * 0.28, 0.1 * 150 * 0.28);  // the bench's 280 ms step
  Output e = Tern(args + " --explain 1");
  EXPECT_EQ(e.code, 0) << e.text;
  for (const char* s :
       {"Run     the whole `tern train` run", "start-up", "evaluation", "checkpoints", "final save"}) {
    EXPECT_NE(e.text.find(s), std::string::npos) << s << "\n" << e.text;
  }
  Output bad = Tern("plan --config configs/demo.yaml --model gpt2-124m");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.text.find("drop --model"), std::string::npos) << bad.text;
  Output bad_key = Tern("plan --config configs/demo.yaml --set train.nope=1");
  EXPECT_EQ(bad_key.code, 1);
  EXPECT_NE(bad_key.text.find("train.nope"), std::string::npos) << bad_key.text;
  // The config's train.recompute is the plan's (the trainer does not adapt it); --recompute may override it.
  for (const auto& [flags, want] : std::vector<std::pair<std::string, std::string>>{
           {"", "none"},
           {" --set train.recompute=gelu", "gelu"},
           {" --set train.recompute=gelu --recompute none", "none"}}) {
    Output r = Tern(args + flags + " --json");
    ASSERT_EQ(r.code, 0) << flags << "\n" << r.text;
    const auto rd = nlohmann::json::parse(r.text, nullptr, false);
    EXPECT_EQ(rd["plans"][0]["memory"]["recompute"], want) << flags;
  }
}

TEST(PlanCli, ErrorsNameTheProblem) {
  Output o = Tern("plan --model gpt2-124m --tokens 10Q");
  ASSERT_RAN(o);
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.text.find("--tokens"), std::string::npos) << o.text;
  const fs::path bad = fs::temp_directory_path() / "tern_plan_cli_bad.csv";
  std::ofstream(bad)
      << "provider,region,instance_type,gpu,gpu_count,gpu_mem_gib,vcpus,mem_gib,price_ondemand_hr,"
         "price_spot_hr\nx,r,box,H100,1,80,8,64,abc,\n";
  Output c = Tern("plan --model gpt2-124m --tokens 1B --catalog " + bad.string());
  EXPECT_EQ(c.code, 1);
  EXPECT_NE(c.text.find(bad.string() + ":2: column 'price_ondemand_hr': 'abc' is not a number"),
            std::string::npos)
      << c.text;
  Output env = Tern("plan --model gpt2-124m --tokens 1B --no-shipped-catalog");
  EXPECT_EQ(env.code, 1);
  // 'on' once meant whole-block recompute; now that tern train has a recompute of its own it is ambiguous.
  Output on = Tern("plan --model gpt2-124m --tokens 1B --recompute on");
  EXPECT_EQ(on.code, 1);
  EXPECT_NE(on.text.find("auto, none, gelu or blocks"), std::string::npos) << on.text;
}

// `tern simulate --config`: the work is the planner's whole-run model for the same config on one --instance
// (the on-demand row of `tern plan --config` for it), calibrated by a bench of that GPU when given.
struct SimulateRun {
  nlohmann::json doc;
  std::string text;
};
SimulateRun Simulate(const std::string& flags) {
  const std::string trace = (fs::path(TERN_TEST_SOURCE_DIR) /
                             "data/spot-traces/availability/1-node/aws-02-15-2023/us-west-2a_v100_1.json")
                                .string();
  Output o = Tern("simulate --trace " + trace +
                  " --deadline 48h --starts 5 --polarity available-if-nonzero --policy on-demand,spot " +
                  flags + " --json");
  EXPECT_EQ(o.code, 0) << flags << "\n" << o.text;
  return {nlohmann::json::parse(o.text, nullptr, false), o.text};
}

// The plan's on-demand row for one p3.2xlarge in us-east-1, as JSON.
nlohmann::json PlanRowFor(const std::string& flags, const char* billing) {
  Output o = Tern(
      "plan --config configs/demo.yaml --instance p3.2xlarge --regions us-east-1 --max-gpus 1 "
      "--billing " +
      std::string(billing) + " " + flags + " --json");
  EXPECT_EQ(o.code, 0) << o.text;
  const auto doc = nlohmann::json::parse(o.text, nullptr, false);
  for (const auto& p : doc["plans"]) {
    if (p["instances"] == 1 && p["region"] == "us-east-1" && p["billing"] == billing) return p;
  }
  ADD_FAILURE() << "no " << billing << " row for 1x p3.2xlarge in us-east-1:\n" << o.text.substr(0, 2000);
  return nlohmann::json();
}

const std::string kV100Bench =
    (fs::path(TERN_TEST_SOURCE_DIR) / "src/plan/testdata/bench_v100_run.json").string();
const std::string kCpuBench =
    (fs::path(TERN_TEST_SOURCE_DIR) / "src/plan/testdata/bench_demo_run.json").string();

TEST(SimulateCli, ConfigWorkIsThePlannersRunModel) {
  for (const auto& [calibrate, calibrated] :
       std::vector<std::pair<std::string, bool>>{{"", false}, {" --calibrate " + kV100Bench, true}}) {
    const std::string flags = " --config configs/demo.yaml --set train.steps=400" + calibrate;
    SimulateRun sim = Simulate(flags + " --instance aws:us-east-1:p3.2xlarge");
    ASSERT_TRUE(sim.doc.is_object()) << sim.text.substr(0, 500);
    const nlohmann::json row = PlanRowFor("--set train.steps=400" + calibrate, "on-demand");
    ASSERT_TRUE(row.is_object());
    const double plan_s = row["run"]["total_s"].get<double>();
    EXPECT_GT(plan_s, 0);
    EXPECT_NEAR(sim.doc["work_h"].get<double>() * 3600, plan_s, 1e-9 * plan_s) << calibrate;
    const auto& src = sim.doc["work_source"];
    EXPECT_EQ(src["from"], "config");
    EXPECT_EQ(src["config"], "configs/demo.yaml");
    EXPECT_EQ(src["instance"], "aws/us-east-1/p3.2xlarge");
    EXPECT_EQ(src["calibrated"], calibrated) << src.dump();
    EXPECT_EQ(src["mfu_source"], row["throughput"]["mfu_source"]);
  }
  // A CPU bench does not speak for a V100: the work is the default model's, and the output says so.
  SimulateRun cpu = Simulate("--config configs/demo.yaml --calibrate " + kCpuBench);
  EXPECT_EQ(cpu.doc["work_source"]["calibrated"], false);
  EXPECT_NE(cpu.doc["restart_source"].get<std::string>().find("not this device"), std::string::npos)
      << cpu.doc["restart_source"];
  // The table names the source too.
  Output t = Tern("simulate --config configs/demo.yaml --calibrate " + kV100Bench +
                  " --deadline 48h --starts 2 --policy on-demand --polarity available-if-nonzero");
  ASSERT_EQ(t.code, 0) << t.text;
  EXPECT_NE(t.text.find("Work: configs/demo.yaml on 1x aws/us-east-1/p3.2xlarge (calibrated"),
            std::string::npos)
      << t.text;
  EXPECT_NE(t.text.find("Restart: measured: " + kV100Bench), std::string::npos) << t.text;
}

// With a bench that timed the start-up and a save, the restart overhead is the bench's figure (start-up +
// resume, the same as `tern plan` uses for its spot rows); --restart-overhead still overrides it.
TEST(SimulateCli, RestartOverheadIsTheBenchsMeasurement) {
  SimulateRun sim = Simulate("--config configs/demo.yaml --calibrate " + kV100Bench);
  ASSERT_TRUE(sim.doc.is_object()) << sim.text.substr(0, 500);
  const double restart_s = sim.doc["restart_h"].get<double>() * 3600;
  // bench_v100_run.json: process 0.3 + backend 2.5 + model 0.4 + data 0.05 + peak probe 0.6 = 3.85 s, and a
  // resume of one save (20 + 180 ms for 53.5 MB) for the run's checkpoint of about that size.
  EXPECT_GT(restart_s, 3.85 + 0.1);
  EXPECT_LT(restart_s, 3.85 + 0.3);
  EXPECT_NE(sim.doc["restart_source"].get<std::string>().find("measured: " + kV100Bench), std::string::npos)
      << sim.doc["restart_source"];
  const nlohmann::json spot = PlanRowFor("--calibrate " + kV100Bench, "spot");
  ASSERT_TRUE(spot.is_object());
  EXPECT_NEAR(spot["spot"]["restart_s"].get<double>(), restart_s, 1e-9);
  EXPECT_EQ(spot["spot"]["restart_source"], sim.doc["restart_source"]);
  EXPECT_NE(spot["spot"]["checkpoint_source"].get<std::string>().find("measured"), std::string::npos);
  // --work-hours with the bench: its own run's start-up and save.
  SimulateRun hours = Simulate("--work-hours 2h --calibrate " + kV100Bench);
  EXPECT_NEAR(hours.doc["restart_h"].get<double>() * 3600, 3.85 + 0.2, 1e-9);
  // Without a bench: the 10-minute default, said as such; the flag overrides either.
  SimulateRun plain = Simulate("--config configs/demo.yaml");
  EXPECT_DOUBLE_EQ(plain.doc["restart_h"].get<double>(), 10.0 / 60);
  EXPECT_EQ(plain.doc["restart_source"].get<std::string>().rfind("default: restart_minutes 10", 0), 0u);
  EXPECT_EQ(PlanRowFor("", "spot")["spot"]["restart_s"], 600.0);
  SimulateRun flag =
      Simulate("--config configs/demo.yaml --calibrate " + kV100Bench + " --restart-overhead 5m");
  EXPECT_DOUBLE_EQ(flag.doc["restart_h"].get<double>(), 5.0 / 60);
  EXPECT_EQ(flag.doc["restart_source"], "--restart-overhead");
}

TEST(SimulateCli, ConfigAndWorkHoursAreExclusive) {
  Output both = Tern("simulate --config configs/demo.yaml --work-hours 3h --deadline 48h");
  ASSERT_RAN(both);
  EXPECT_EQ(both.code, 2) << both.text;
  EXPECT_NE(both.text.find("--config and --work-hours both give the job's work; give one"), std::string::npos)
      << both.text;
  Output neither = Tern("simulate --deadline 48h");
  EXPECT_EQ(neither.code, 1);
  EXPECT_NE(neither.text.find("--config CONFIG.yaml"), std::string::npos) << neither.text;
  Output set = Tern("simulate --work-hours 3h --deadline 48h --set train.steps=10");
  EXPECT_EQ(set.code, 1);
  EXPECT_NE(set.text.find("give --config"), std::string::npos) << set.text;
}

}  // namespace
}  // namespace tern::plan
