// Prediction vs reality on this machine (slow): the user's three commands, run as a user runs them:
//   tern bench --config C --set ... --json > bench.json
//   tern plan  --config C --set ... --calibrate bench.json --instance local --json   (the prediction)
//   tern train C --set ... --quiet                                                    (the reality)
// and the measured wall time of `tern train` must be within 25% of the prediction. Skips itself when the demo
// corpus is not prepared (scripts/demo does it); a missing tern binary is a failure (the test depends on it).
// TERN_REALITY_CONFIG (default configs/demo.yaml) and TERN_REALITY_SETS (space-separated key=value, default
// "train.steps=60") choose the run; run.dir (and ckpt.durable, when the config has one) go to a temp dir.
// bench/plan_accuracy.sh runs the demo and a GPT-2 124M shape through the same three commands.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/file_util.h"
#include "testing/tern_binary.h"

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

TEST(Reality, CalibratedPredictionWithin25Percent) {
  const fs::path tern = testing::FindTernBinary();
  ASSERT_FALSE(tern.empty())
      << "the tern binary is not built (build the tern target, or set TERN_BINARY_DIR)";
  int rc = 0;
  if (const char* src = std::getenv("TERN_SOURCE_DIR")) fs::current_path(src);
  if (!fs::exists("data/prepared/kjv/prepare.json")) {
    GTEST_SKIP() << "the demo corpus is not prepared (run scripts/demo once, or tern prepare ... --out "
                    "data/prepared/kjv)";
  }
  const char* config_env = std::getenv("TERN_REALITY_CONFIG");
  const char* sets_env = std::getenv("TERN_REALITY_SETS");
  const std::string config = config_env ? config_env : "configs/demo.yaml";
  const fs::path dir = fs::temp_directory_path() / "tern_reality_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string sets;
  std::istringstream words(sets_env ? sets_env : "train.steps=60");
  for (std::string kv; words >> kv;) sets += " --set " + kv;
  sets += " --set run.dir=" + (dir / "run").string();
  Result<std::string> text = ReadFileToString(config);
  ASSERT_TRUE(text.ok()) << text.status().message();
  if (text->find("durable:") != std::string::npos)
    sets += " --set ckpt.durable=" + (dir / "durable").string();

  const std::string bench_json = (dir / "bench.json").string();
  const std::string bench_cmd =
      tern.string() + " bench --config " + config + sets + " --json > " + bench_json;
  std::string out = RunCommand(bench_cmd, &rc);
  ASSERT_EQ(rc, 0) << bench_cmd << "\n" << out;
  const std::string plan_cmd = tern.string() + " plan --config " + config + sets + " --calibrate " +
                               bench_json + " --instance local --json";
  out = RunCommand(plan_cmd, &rc);
  ASSERT_EQ(rc, 0) << plan_cmd << "\n" << out;
  const auto plan = nlohmann::json::parse(out, nullptr, false);
  ASSERT_TRUE(plan.is_object() && !plan["plans"].empty()) << out.substr(0, 1000);
  const auto& row = plan["plans"][0];
  const double predicted_s = row["wall_s"].get<double>();
  const double predicted_steps_s = row["run"]["steps_s"].get<double>();

  const std::string train_cmd = tern.string() + " train " + config + sets + " --quiet";
  const auto t0 = std::chrono::steady_clock::now();
  out = RunCommand(train_cmd, &rc);
  const double measured_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(rc, 0) << train_cmd << "\n" << out;
  const double error = (measured_s - predicted_s) / predicted_s;
  std::printf("prediction vs reality: predicted %.1f s, measured %.1f s, error %+.1f%%\n", predicted_s,
              measured_s, 100 * error);
  // The trainer's own split (summary.json) tells the step-time error from the rest.
  if (Result<std::string> summary = ReadFileToString((dir / "run" / "summary.json").string()); summary.ok()) {
    const auto j = nlohmann::json::parse(summary.value(), nullptr, false);
    if (j.is_object() && j.contains("train_s")) {
      const double train_s = j["train_s"].get<double>();
      std::printf(
          "steps: predicted %.1f s, measured %.1f s (%+.1f%%); the rest: predicted %.1f s, measured %.1f s\n",
          predicted_steps_s, train_s, 100 * (train_s - predicted_steps_s) / predicted_steps_s,
          predicted_s - predicted_steps_s, measured_s - train_s);
    }
  }
  EXPECT_LT(std::abs(error), 0.25);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tern::plan
