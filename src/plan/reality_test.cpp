// Prediction vs reality on this machine (slow): calibrate from a short `tern bench` of the demo model,
// predict a short `tern train` of it the way `tern plan --calibrate bench.json --instance local` does,
// run it, and require the measured wall time within 25% of the prediction. Skips itself while
// `tern train`/`tern bench` are placeholders or the demo corpus is not prepared (scripts/demo does it).
// The commands can be replaced with TERN_REALITY_BENCH / TERN_REALITY_TRAIN ({tern}, {bench}, {dir},
// {steps} are substituted; TERN_REALITY_STEPS and TERN_REALITY_STEP_TOKENS say how many steps of how
// many tokens the train command runs, default 60 x 4096 as below).
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "core/file_util.h"
#include "plan/calibration.h"
#include "plan/catalog.h"
#include "plan/planner.h"
#include "plan/test_support.h"

namespace tern::plan {
namespace {

namespace fs = std::filesystem;

std::string RunCommand(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  *rc = pclose(p);
  return out;
}

std::string Substitute(std::string s, const std::string& key, const std::string& value) {
  for (size_t pos; (pos = s.find(key)) != std::string::npos;) s.replace(pos, key.size(), value);
  return s;
}

TEST(Reality, CalibratedPredictionWithin25Percent) {
  const fs::path tern = testing::FindTernBinary();
  if (tern.empty()) GTEST_SKIP() << "the tern binary is not built";
  int rc = 0;
  for (const char* cmd : {"train", "bench"}) {
    const std::string help = RunCommand(tern.string() + " " + cmd + " --help", &rc);
    if (rc != 0 || help.find("not built yet") != std::string::npos) {
      GTEST_SKIP() << "`tern " << cmd << "` is still a placeholder; this test needs the trainer";
    }
  }
  const char* src = std::getenv("TERN_SOURCE_DIR");
  if (src) fs::current_path(src);
  if (!fs::exists("data/prepared/kjv/prepare.json")) {
    GTEST_SKIP() << "the demo corpus is not prepared (run scripts/demo once, or tern prepare ... --out data/prepared/kjv)";
  }
  const fs::path dir = fs::temp_directory_path() / "tern_reality_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string bench_json = (dir / "bench.json").string();
  // The demo's shape and precision (configs/demo.yaml): micro-batch 16 x 128, bf16, 4096 tokens per step.
  // TERN_REALITY_STEPS / TERN_REALITY_STEP_TOKENS go with replaced commands (e.g. a GPT-2 124M run).
  const char* steps_env = std::getenv("TERN_REALITY_STEPS");
  const char* step_tokens_env = std::getenv("TERN_REALITY_STEP_TOKENS");
  const int steps = steps_env ? std::atoi(steps_env) : 60;
  const double step_tokens = step_tokens_env ? std::atof(step_tokens_env) : 4096;
  const double tokens = steps * step_tokens;
  const char* bench_env = std::getenv("TERN_REALITY_BENCH");
  std::string bench_cmd =
      bench_env ? bench_env
                : "{tern} bench --config configs/demo.yaml --batch 16 --seq 128 --precision bf16 --steps 10 --json > {bench}";
  bench_cmd = Substitute(Substitute(bench_cmd, "{tern}", tern.string()), "{bench}", bench_json);
  std::string out = RunCommand(bench_cmd, &rc);
  ASSERT_EQ(rc, 0) << bench_cmd << "\n" << out;
  BenchProfile b = LoadBenchJson(bench_json).value();

  // The prediction, as `tern plan --calibrate bench.json --instance local --tokens N` makes it.
  Catalog cat;
  GpuSpec placeholder;
  placeholder.name = "none";
  placeholder.mem_gib = 1;
  cat.gpus.push_back(placeholder);
  ASSERT_TRUE(AddLocalInstance(b, 0, HostMemoryGib(), &cat).ok());
  PlanRequest req;
  req.workload.cfg = b.model;
  req.workload.seq = b.seq;
  req.workload.tokens = tokens;
  req.workload.global_batch_tokens = step_tokens;
  req.instances = {"local"};
  req.calibration = b;
  Result<PlanResult> plan = MakePlan(cat, req, PlanDefaults());
  ASSERT_TRUE(plan.ok() && !plan->rows.empty()) << plan.status().message();
  const double predicted_s = plan->rows[0].wall_s;

  const char* train_env = std::getenv("TERN_REALITY_TRAIN");
  std::string train_cmd = train_env ? train_env
                                    : "{tern} train configs/demo.yaml --set run.dir={dir} --set train.steps={steps} "
                                      "--set train.total_batch_tokens=4096 --set eval.every=0 --set eval.batches=1 "
                                      "--set sample.count=0 --quiet";
  train_cmd = Substitute(Substitute(Substitute(train_cmd, "{tern}", tern.string()), "{dir}", (dir / "run").string()),
                         "{steps}", std::to_string(steps));
  const auto t0 = std::chrono::steady_clock::now();
  out = RunCommand(train_cmd, &rc);
  const double measured_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(rc, 0) << train_cmd << "\n" << out;
  const double error = (measured_s - predicted_s) / predicted_s;
  std::printf("prediction vs reality: predicted %.1f s, measured %.1f s, error %+.1f%%\n", predicted_s, measured_s,
              100 * error);
  // The trainer's own split (summary.json) tells step-time error from start-up, final eval and save.
  if (Result<std::string> summary = ReadFileToString((dir / "run" / "summary.json").string()); summary.ok()) {
    const auto j = nlohmann::json::parse(summary.value(), nullptr, false);
    if (j.is_object() && j.contains("train_s")) {
      const double train_s = j["train_s"].get<double>();
      std::printf("training steps alone: %.1f s, error %+.1f%%; the other %.1f s are start-up, eval and save\n",
                  train_s, 100 * (train_s - predicted_s) / predicted_s, measured_s - train_s);
    }
  }
  EXPECT_LT(std::abs(error), 0.25);
}

}  // namespace
}  // namespace tern::plan
