// Slow: kill -9 `tern train` at random moments (often in the middle of a save) at least 20 times in a row,
// resuming each time. Every checkpoint with a manifest must verify, every resume must start from the newest
// of them without skipping any, and the final weights and every loss must equal an uninterrupted run's.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "ckpt/format.h"
#include "ckpt/local_storage.h"
#include "testing/processes.h"
#include "testing/tiny_config.h"

namespace tern::ckpt {
namespace {

namespace fs = std::filesystem;
using testing::Child;
using testing::RunCommand;

std::vector<nlohmann::json> Rows(const fs::path& metrics) {
  std::vector<nlohmann::json> out;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded()) out.push_back(j);  // a line torn by kill -9 is skipped
  }
  return out;
}

std::map<int, double> Losses(const fs::path& metrics) {
  std::map<int, double> out;
  for (const auto& j : Rows(metrics))
    if (!j.contains("event") && j.contains("loss")) out[j["step"].get<int>()] = j["loss"].get<double>();
  return out;
}

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(Torture, KillNineTwentyTimesAndStillBitExact) {
  const char* b = std::getenv("TERN_BINARY_DIR");
  const std::string tern = std::string(b ? b : "build") + "/tern";
  const fs::path root = fs::temp_directory_path() / "tern_ckpt_torture_test";
  fs::remove_all(root);
  fs::create_directories(root);
  std::ofstream(root / "corpus.txt") << testing::SmallCorpus();
  ASSERT_EQ(RunCommand(tern + " prepare --input " + (root / "corpus.txt").string() + " --out " +
                       (root / "data").string() + " --vocab-size 300 --val-fraction 0.1 --threads 1")
                .code,
            0);
  std::ofstream(root / "tiny.yaml") << testing::TinyTrainYaml(
      (root / "data").string(), {.n_layer = 2,
                                 .total_batch_tokens = 256,
                                 .steps = 3000,
                                 .warmup_steps = 20,
                                 .lr = "3.0e-3",
                                 .eval_every = 1000,
                                 .more = "ckpt: {every: 3, keep_last: 2, resume: auto}\n"});
  auto argv = [&](const std::string& run) {
    return std::vector<std::string>{tern,      "train", (root / "tiny.yaml").string(),
                                    "--quiet", "--set", "run.dir=" + (root / run).string()};
  };
  const std::map<std::string, std::string> env = {{"OMP_NUM_THREADS", "1"}};
  {
    Child ref(argv("ref"), env);
    ASSERT_EQ(ref.Wait(), 0);
  }

  const fs::path run = root / "tortured";
  std::mt19937 rng(20240601);
  int kills = 0, lives = 0, checked_resumes = 0, mid_save = 0;
  size_t resume_rows_seen = 0;
  int64_t expected_resume = -1;  // newest valid checkpoint after the last kill
  while (kills < 20 && lives < 200) {
    lives++;
    const uintmax_t log_size = fs::exists(run / "metrics.jsonl") ? fs::file_size(run / "metrics.jsonl") : 0;
    Child c(argv("tortured"), env, (root / "tortured.log").string());
    if (lives % 4 == 0) {
      // Now and then strike during start-up or while the checkpoint is being loaded.
      std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 600)(rng)));
    } else {
      // Mostly strike while training (and its writer) runs: wait for this life's first step row, then a bit.
      const auto t0 = std::chrono::steady_clock::now();
      while (c.Running() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30)) {
        std::ifstream in(run / "metrics.jsonl");
        in.seekg(static_cast<std::streamoff>(log_size));
        std::string fresh((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        if (fresh.find("\"loss\"") != std::string::npos) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 250)(rng)));
    }
    if (!c.Running()) break;  // finished before we struck
    c.Signal(SIGKILL);
    c.Wait();
    kills++;
    // The resume this life made (if it got that far) started from the newest valid checkpoint, skipping none.
    auto rows = Rows(run / "metrics.jsonl");
    std::vector<nlohmann::json> resumes;
    for (const auto& r : rows)
      if (r.value("event", "") == "resume") resumes.push_back(r);
    if (resumes.size() > resume_rows_seen) {
      EXPECT_EQ(resumes.back()["step"].get<int64_t>(), std::max<int64_t>(expected_resume, 0))
          << "life " << lives;
      EXPECT_TRUE(resumes.back()["skipped"].empty()) << resumes.back().dump();
      checked_resumes++;
      resume_rows_seen = resumes.size();
    }
    // Every checkpoint that has a manifest verifies; remember the newest for the next life's resume.
    auto storage = LocalStorage::Open((run / "checkpoints").string());
    ASSERT_TRUE(storage.ok());
    auto refs = ListCheckpoints(**storage);
    ASSERT_TRUE(refs.ok());
    bool torn = false;  // the kill landed in a save: a step directory without a manifest, or a temp file
    for (const auto& e : fs::recursive_directory_iterator(run / "checkpoints"))
      torn = torn || e.path().filename().string().find(".tmp.") != std::string::npos;
    for (const auto& r : *refs) {
      torn = torn || !r.has_manifest;
      if (!r.has_manifest) continue;
      VerifyReport v = VerifyCheckpoint(**storage, r.dir);
      EXPECT_TRUE(v.ok) << r.dir << ": " << (v.problems.empty() ? "" : v.problems[0]);
      expected_resume = std::max(expected_resume, r.step);
    }
    mid_save += torn;
  }
  EXPECT_GE(kills, 20);
  EXPECT_GE(checked_resumes, 10);
  EXPECT_GE(mid_save, 3) << "kills should often land in the middle of a save";
  Child last(argv("tortured"), env, (root / "tortured.log").string());
  ASSERT_EQ(last.Wait(), 0) << "see " << (root / "tortured.log");
  EXPECT_EQ(Losses(run / "metrics.jsonl"), Losses(root / "ref/metrics.jsonl"));
  EXPECT_TRUE(ReadAll(run / "model.safetensors") == ReadAll(root / "ref/model.safetensors"));
  std::printf("torture: %d kills over %d lives (%d in the middle of a save), %d resumes checked\n", kills,
              lives, mid_save, checked_resumes);
}

}  // namespace
}  // namespace tern::ckpt
