// Checkpoints through the real trainer: bit-exact resume (fp32, bf16, gradient accumulation, async and sync
// saves), fallback past a damaged checkpoint, refused and allowed config changes, a full disk under both
// policies, retention, and the emergency save on a signal (finish and abandon policies).
#include <gtest/gtest.h>

#include <omp.h>

#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "ckpt/fault_storage.h"
#include "ckpt/local_storage.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "testing/metrics_rows.h"
#include "testing/prepared_data.h"
#include "testing/processes.h"
#include "train/trainer.h"

namespace tern {
namespace {

// Unwraps a Result in an expression (Result's operator* works on lvalues only).
template <typename T>
T V(Result<T> r) {
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : T{};
}

namespace fs = std::filesystem;

class ResumeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Bit-exactness holds per thread count; one thread also keeps OpenMP barriers from stalling for seconds
    // when the machine is oversubscribed (ten times faster on a busy 2-core box).
    omp_set_num_threads(1);
    // One directory per process: ctest runs each test case as its own process, in parallel.
    root_ = fs::temp_directory_path() / ("tern_resume_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    data_ = tern::testing::SharedSmallPreparedData();
    ASSERT_FALSE(data_.empty());
  }

  TrainConfig Config(const std::string& run, int steps = 12) {
    TrainConfig c;
    c.model = {2, 2, 32, 0, 32};
    c.data_dir = data_;
    c.batch_size = 4;
    c.seq_len = 32;
    c.total_batch_tokens = 256;  // 2 micro-batches
    c.steps = steps;
    c.lr = 3e-3;
    c.warmup_steps = 3;
    c.eval_every = 0;
    c.eval_batches = 2;
    c.num_samples = 0;
    c.peak_gflops = 100;
    c.run_dir = (root_ / run).string();
    fs::remove_all(c.run_dir);
    return c;
  }

  static std::map<int, double> Losses(const std::string& run_dir) { return testing::StepLosses(run_dir); }
  static std::vector<nlohmann::json> Events(const std::string& run_dir, const std::string& event) {
    std::vector<nlohmann::json> out;
    std::ifstream in(run_dir + "/metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line);
      if (j.value("event", "") == event) out.push_back(j);
    }
    return out;
  }
  static std::vector<float> RunAll(const TrainConfig& c, TrainerEnv env = {}) {
    auto t = Trainer::Create(c, true, env);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    if (!t.ok()) return {};
    auto s = (*t)->Run();
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return (*t)->model().GetParameters();
  }

  static void TearDownTestSuite() { fs::remove_all(root_); }

  static fs::path root_;
  static std::string data_;
};
fs::path ResumeTest::root_;
std::string ResumeTest::data_;

struct Variant {
  const char* name;
  const char* precision;
  int64_t batch_tokens;
  bool async;
};

class BitExact : public ResumeTest, public ::testing::WithParamInterface<Variant> {};

TEST_P(BitExact, ResumedLossesAndWeightsEqualAnUninterruptedRun) {
  const Variant v = GetParam();
  TrainConfig a = Config(std::string("exact_a_") + v.name);
  a.precision = ParsePrecision(v.precision).value();
  a.total_batch_tokens = v.batch_tokens;
  a.ckpt.every = 6;
  a.ckpt.async = v.async;
  const std::vector<float> reference = RunAll(a);
  auto saves = Events(a.run_dir, "checkpoint");
  ASSERT_EQ(saves.size(), 2u);
  EXPECT_GE(saves[0]["bytes"].get<uint64_t>(), 3 * 4 * 30000u);
  for (const char* k : {"stall_ms", "persist_ms", "tier"}) EXPECT_TRUE(saves[0].contains(k)) << k;

  TrainConfig b = Config(std::string("exact_b_") + v.name);
  b.precision = ParsePrecision(v.precision).value();
  b.total_batch_tokens = v.batch_tokens;
  b.ckpt.resume = ResumeFrom::Path(a.run_dir + "/checkpoints/step_00000006");
  auto t = Trainer::Create(b, true);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->resumed_from(), 6);
  ASSERT_TRUE((*t)->Run().ok());
  const auto la = Losses(a.run_dir), lb = Losses(b.run_dir);
  ASSERT_EQ(lb.size(), 6u);
  for (const auto& [step, loss] : lb) EXPECT_EQ(loss, la.at(step)) << "step " << step;  // bit for bit
  EXPECT_TRUE((*t)->model().GetParameters() == reference) << "final weights identical";
  EXPECT_EQ(Events(b.run_dir, "resumed_first_step").size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Trainer, BitExact,
                         ::testing::Values(Variant{"fp32_accum_async", "fp32", 256, true},
                                           Variant{"bf16_accum_async", "bf16", 256, true},
                                           Variant{"fp32_noaccum_sync", "fp32", 0, false}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_F(ResumeTest, AutoSkipsADamagedNewestCheckpointAndStaysExact) {
  TrainConfig a = Config("damaged");
  a.ckpt.every = 4;
  RunAll(a);
  const auto reference = Losses(a.run_dir);
  const std::string victim = a.run_dir + "/checkpoints/step_00000012/tensors.safetensors";
  std::string bytes;
  {
    std::ifstream in(victim, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[bytes.size() / 2] ^= 0x40;
  std::ofstream(victim, std::ios::binary) << bytes;
  TrainConfig b = a;
  b.ckpt.resume = ResumeFrom::Auto();
  auto t = Trainer::Create(b, true);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->resumed_from(), 8) << "falls back to the previous valid checkpoint";
  ASSERT_TRUE((*t)->Run().ok());
  EXPECT_EQ(Losses(b.run_dir), reference);
  auto resumes = Events(b.run_dir, "resume");
  ASSERT_EQ(resumes.size(), 1u);
  ASSERT_EQ(resumes[0]["skipped"].size(), 1u);
  EXPECT_NE(resumes[0]["skipped"][0].get<std::string>().find("corrupted"), std::string::npos);
}

TEST_F(ResumeTest, ShapeAndSeedChangesAreRefusedSafeChangesAreLogged) {
  TrainConfig a = Config("changes", 4);
  a.ckpt.every = 4;
  RunAll(a);
  TrainConfig shape = a;
  shape.ckpt.resume = ResumeFrom::Auto();
  shape.model.n_embd = 64;
  shape.seed = 7;
  auto bad = Trainer::Create(shape, true);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("model.n_embd: 32 -> 64"), std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("train.seed"), std::string::npos) << bad.status().message();
  TrainConfig safe = a;
  safe.ckpt.resume = ResumeFrom::Auto();
  safe.steps = 6;
  safe.eval_every = 3;
  auto ok = Trainer::Create(safe, true);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  auto changes = Events(a.run_dir, "resume").at(0)["changes"];
  EXPECT_EQ(changes.size(), 2u) << changes.dump();
  EXPECT_EQ(changes[0], "train.steps: 4 -> 6");
}

// A dataset re-prepared in place with as many tokens (here: the first train shard's tokens reversed) is not
// the data the checkpoint was trained on: the content recorded in trainer.json refuses it; the same shards
// resume.
TEST_F(ResumeTest, OtherTokensOfTheSameCountAreRefused) {
  const fs::path data = root_ / "content_data";
  fs::remove_all(data);
  fs::copy(data_, data, fs::copy_options::recursive);
  TrainConfig a = Config("content", 4);
  a.data_dir = data.string();
  a.ckpt.every = 4;
  RunAll(a);
  fs::path trainer_json;
  for (const auto& e : fs::recursive_directory_iterator(a.run_dir))
    if (e.path().filename() == "trainer.json") trainer_json = e.path();
  ASSERT_FALSE(trainer_json.empty());
  const auto prepared = nlohmann::json::parse(std::ifstream(data / "prepare.json"));
  auto state = nlohmann::json::parse(std::ifstream(trainer_json));
  EXPECT_EQ(state["data"]["content"], prepared["content"]["train"]) << state["data"].dump();

  TrainConfig again = a;
  again.ckpt.resume = ResumeFrom::Auto();
  again.steps = 6;
  {
    auto same = Trainer::Create(again, true);
    ASSERT_TRUE(same.ok()) << same.status().ToString();
  }
  const std::string shard = (data / "train_000.bin").string();
  std::vector<int32_t> tokens;
  {
    auto r = ShardReader::Open(shard);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    tokens.resize(r->size());
    ASSERT_TRUE(r->Read(0, tokens.size(), tokens.data()).ok());
    std::reverse(tokens.begin(), tokens.end());
    auto w = ShardWriter::Create(shard, r->vocab_size());
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Append(tokens).ok());
    ASSERT_TRUE((*w)->Finish().ok());
  }
  auto bad = Trainer::Create(again, true);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("training data content"), std::string::npos)
      << bad.status().message();
}

TEST_F(ResumeTest, DiskFullContinuesOrStopsByPolicyAndKeepsThePreviousCheckpoint) {
  for (const char* policy : {"continue", "stop"}) {
    TrainConfig c = Config(std::string("full_") + policy, 8);
    c.ckpt.every = 4;
    c.ckpt.async = false;
    ASSERT_TRUE(ApplyOverride(std::string("ckpt.on_error=") + policy, &c).ok());
    std::vector<std::unique_ptr<ckpt::Storage>> keep_alive;
    TrainerEnv env;
    env.open_storage = [&](const std::string& uri) -> Result<std::unique_ptr<ckpt::Storage>> {
      auto local = ckpt::LocalStorage::Open(uri);
      if (!local.ok()) return local.status();
      auto f = std::make_unique<ckpt::FaultInjectionStorage>(local->get());
      f->SetCapacity(700 * 1024);  // one checkpoint of this model (~460 KB) fits, two do not
      keep_alive.push_back(std::move(*local));
      return std::unique_ptr<ckpt::Storage>(std::move(f));
    };
    auto t = Trainer::Create(c, true, env);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    auto s = (*t)->Run();
    if (std::string(policy) == "continue") {
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      EXPECT_EQ(s->steps, 8) << "training went on";
    } else {
      ASSERT_FALSE(s.ok());
      EXPECT_NE(s.status().message().find("ckpt.on_error=stop"), std::string::npos) << s.status().message();
    }
    auto failed = Events(c.run_dir, "checkpoint_failed");
    ASSERT_EQ(failed.size(), 1u);
    EXPECT_NE(failed[0]["error"].get<std::string>().find("No space left on device"), std::string::npos);
    auto fast = ckpt::LocalStorage::Open(c.run_dir + "/checkpoints");
    EXPECT_TRUE(ckpt::VerifyCheckpoint(**fast, "step_00000004").ok) << "the previous checkpoint is intact";
  }
}

TEST_F(ResumeTest, RetentionLeavesExactlyTheConfiguredCheckpoints) {
  TrainConfig c = Config("retention", 12);
  c.ckpt.every = 2;
  c.ckpt.keep_last = 2;
  c.ckpt.keep_every = 4;
  c.ckpt.best_k = 2;
  c.eval_every = 2;
  c.ckpt.durable = c.run_dir + "/durable";
  c.ckpt.durable_every = 3;
  c.ckpt.durable_keep_last = 1;
  RunAll(c);
  auto steps_in = [](const std::string& dir) {
    std::vector<int64_t> out;
    auto s = ckpt::LocalStorage::Open(dir);
    for (const auto& r : V(ckpt::ListCheckpoints(**s))) {
      EXPECT_TRUE(r.has_manifest) << dir << " " << r.dir;
      out.push_back(r.step);
    }
    return out;
  };
  EXPECT_EQ(steps_in(c.run_dir + "/checkpoints"), (std::vector<int64_t>{4, 8, 10, 12}));
  EXPECT_EQ(steps_in(c.run_dir + "/durable"), (std::vector<int64_t>{12}));
  // best: the two lowest validation losses of the run
  std::vector<std::pair<double, int64_t>> vals;
  std::ifstream in(c.run_dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("val_loss") && !j.contains("event")) vals.emplace_back(j["val_loss"], j["step"]);
  }
  std::sort(vals.begin(), vals.end());
  std::vector<int64_t> best = {vals[0].second, vals[1].second};
  std::sort(best.begin(), best.end());
  EXPECT_EQ(steps_in(c.run_dir + "/best"), best);
}

TEST_F(ResumeTest, SignalSavesAndStopsUnderBothPoliciesThenResumesExactly) {
  TrainConfig ref = Config("signal_ref", 6);
  RunAll(ref);
  const auto reference = Losses(ref.run_dir);
  for (const char* policy : {"finish", "abandon"}) {
    TrainConfig c = Config(std::string("signal_") + policy, 6);
    ASSERT_TRUE(ApplyOverride(std::string("ckpt.on_notice=") + policy, &c).ok());
    auto t = Trainer::Create(c, true);
    ASSERT_TRUE(t.ok());
    std::raise(SIGUSR1);  // as Slurm's --signal=USR1@60 would
    auto s = (*t)->Run();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_TRUE(s->preempted);
    const int saved = std::string(policy) == "finish" ? 1 : 0;  // abandon drops the step in progress
    EXPECT_EQ(s->steps, saved);
    auto pre = Events(c.run_dir, "preempted");
    ASSERT_EQ(pre.size(), 1u);
    EXPECT_EQ(pre[0]["source"], "SIGUSR1");
    EXPECT_TRUE(pre[0]["saved"].get<bool>());
    EXPECT_GT(pre[0]["margin_s"].get<double>(), 0.0) << "saved inside the assumed 30 s window";
    t->reset();  // restores the signal handlers
    TrainConfig r = c;
    r.ckpt.resume = ResumeFrom::Auto();
    auto t2 = Trainer::Create(r, true);
    ASSERT_TRUE(t2.ok()) << t2.status().ToString();
    EXPECT_EQ((*t2)->resumed_from(), saved);
    ASSERT_TRUE((*t2)->Run().ok());
    EXPECT_EQ(Losses(c.run_dir), reference) << policy;
  }
}

}  // namespace
}  // namespace tern
