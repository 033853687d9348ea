// A real short `tern train` whose loader is made slow (the test hook TERN_TEST_DATA_DELAY_MS,
// src/data/loader.h) is diagnosed data-bound by the built `tern diagnose`; --json parses and names the rule.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "testing/prepared_data.h"
#include "testing/processes.h"
#include "testing/tern_binary.h"
#include "testing/tiny_config.h"

namespace tern {
namespace {

namespace fs = std::filesystem;

TEST(DiagnoseE2E, SlowLoaderIsDataBound) {
  const fs::path tern = testing::FindTernBinary();
  ASSERT_FALSE(tern.empty()) << "build the tern binary first (cmake --build build --target tern)";
  const std::string data = testing::SharedSmallPreparedData();
  ASSERT_FALSE(data.empty()) << "preparing the small corpus failed";
  const fs::path root = fs::temp_directory_path() / ("tern_diagnose_e2e_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  std::ofstream(root / "tiny.yaml") << testing::TinyTrainYaml(
      data, {.steps = 12, .warmup_steps = 2, .eval_batches = 1});
  const std::string run = (root / "run").string();
  auto train = testing::RunCommand("OMP_NUM_THREADS=1 TERN_TEST_DATA_DELAY_MS=40 " + tern.string() +
                                   " train " + (root / "tiny.yaml").string() +
                                   " --quiet --price-per-hour 3.6 --set run.dir=" + run + " 2>&1");
  ASSERT_EQ(train.code, 0) << train.output;

  auto text = testing::RunCommand(tern.string() + " diagnose " + run + " 2>&1");
  ASSERT_EQ(text.code, 0) << text.output;
  EXPECT_NE(text.output.find("[data_bound]"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("fix:"), std::string::npos) << text.output;

  auto js = testing::RunCommand(tern.string() + " diagnose " + run + " --json 2>/dev/null");
  ASSERT_EQ(js.code, 0) << js.output;
  auto j = nlohmann::json::parse(js.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << js.output;
  ASSERT_TRUE(j["findings"].is_array()) << js.output;
  bool found = false;
  for (const auto& f : j["findings"]) {
    if (f["rule"] != "data_bound") continue;
    found = true;
    EXPECT_GT(f["step_fraction"].get<double>(), 0.05);
    EXPECT_GT(f["usd_per_hour"].get<double>(), 0);  // priced at the run's $3.6/h
  }
  EXPECT_TRUE(found) << js.output;

  auto missing = testing::RunCommand(tern.string() + " diagnose " + (root / "nothing").string() + " 2>&1");
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.output.find("not a directory"), std::string::npos) << missing.output;
  fs::remove_all(root);
}

}  // namespace
}  // namespace tern
