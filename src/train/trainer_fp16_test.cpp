// The trainer's fp16 path (dynamic loss scaling) and its GPU metrics, on the CPU: an injected gradient
// overflow skips the update and halves the scale; N good steps double it; a resumed run continues with the
// saved scale, bit for bit; a (fake) GPU sampler's readings reach metrics.jsonl with the documented
// arithmetic.
#include <gtest/gtest.h>

#include <omp.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "data/prepare.h"
#include "metrics/fake_gpu_sampler.h"
#include "testing/prepared_data.h"
#include "testing/processes.h"
#include "train/trainer.h"

namespace tern {
namespace {

namespace fs = std::filesystem;

class Fp16Trainer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    omp_set_num_threads(1);  // bit-exact comparisons hold per thread count; also fast on a busy machine
    root_ = fs::temp_directory_path() / ("tern_fp16_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    data_ = tern::testing::SharedSmallPreparedData();
    ASSERT_FALSE(data_.empty());
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  TrainConfig Config(const std::string& run, const std::string& precision = "fp16", int steps = 8) {
    TrainConfig c;
    c.model = {2, 2, 32, 0, 32};
    c.data_dir = data_;
    c.batch_size = 4;
    c.seq_len = 32;
    c.total_batch_tokens = 256;  // 2 micro-batches: the scale seeds both backwards
    c.steps = steps;
    c.lr = 3e-3;
    c.warmup_steps = 2;
    c.eval_every = 0;
    c.eval_batches = 2;
    c.num_samples = 0;
    c.peak_gflops = 100;
    c.precision = ParsePrecision(precision).value();
    c.loss_scale_init = 1024;
    c.run_dir = (root_ / run).string();
    fs::remove_all(c.run_dir);
    return c;
  }

  static std::unique_ptr<Trainer> Make(const TrainConfig& c, TrainerEnv env = {}) {
    env.handle_signals = false;
    auto t = Trainer::Create(c, true, env);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(t).value() : nullptr;
  }

  static std::vector<nlohmann::json> StepRows(const std::string& run_dir) {
    std::vector<nlohmann::json> out;
    std::ifstream in(run_dir + "/metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line);
      if (!j.contains("event") && j.contains("loss")) out.push_back(j);
    }
    return out;
  }

  // Makes one gradient of step `at` infinite, as an fp16 overflow in the backward would.
  static TrainerEnv OverflowAt(int at) {
    TrainerEnv env;
    env.after_backward = [at](int step, Gpt& model) {
      if (step != at) return;
      std::vector<float> g = model.GetGradients();
      g[g.size() / 2] = std::numeric_limits<float>::infinity();
      model.SetGradients(g);
    };
    return env;
  }

  static fs::path root_;
  static std::string data_;
};
fs::path Fp16Trainer::root_;
std::string Fp16Trainer::data_;

TEST_F(Fp16Trainer, InjectedOverflowSkipsTheUpdateAndHalvesTheScale) {
  auto t = Make(Config("overflow"), OverflowAt(3));
  ASSERT_TRUE(t);
  for (int i = 0; i < 2; i++) ASSERT_TRUE(t->Step().ok());
  const std::vector<float> params = t->model().GetParameters(), adam = t->model().GetAdamState();
  auto s = t->Step();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->skipped);
  EXPECT_EQ(s->loss_scale, 1024);
  EXPECT_FALSE(std::isfinite(s->grad_norm));
  EXPECT_EQ(t->loss_scaler().scale(), 512);
  EXPECT_EQ(t->loss_scaler().state().skipped_steps, 1);
  EXPECT_EQ(t->model().GetParameters(), params) << "a skipped step must not touch the weights";
  EXPECT_EQ(t->model().GetAdamState(), adam) << "nor the AdamW moments";
  // Step semantics: the skipped step counts (its data is consumed, the LR schedule moves on), AdamW's
  // bias-correction step counts applied updates only.
  EXPECT_EQ(t->step(), 3);
  EXPECT_EQ(t->adam_t(), 2);
  s = t->Step();
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->skipped);
  EXPECT_EQ(s->loss_scale, 512);
  EXPECT_TRUE(std::isfinite(s->grad_norm));
  EXPECT_NE(t->model().GetParameters(), params);
  EXPECT_EQ(t->adam_t(), 3);
}

TEST_F(Fp16Trainer, GoodStepsDoubleTheScale) {
  TrainConfig c = Config("growth");
  c.loss_scale_init = 256;
  c.loss_scale_growth_interval = 3;
  auto t = Make(c);
  ASSERT_TRUE(t);
  std::vector<double> used;
  for (int i = 0; i < 7; i++) {
    auto s = t->Step();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_FALSE(s->skipped);
    used.push_back(s->loss_scale);
  }
  EXPECT_EQ(used, (std::vector<double>{256, 256, 256, 512, 512, 512, 1024}));
  EXPECT_EQ(t->loss_scaler().state().good_steps, 1);
}

TEST_F(Fp16Trainer, MetricsRowsCarryTheScaleAndTheSkip) {
  TrainConfig c = Config("rows", "fp16", 5);
  auto t = Make(c, OverflowAt(2));
  ASSERT_TRUE(t);
  auto sum = t->Run();
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();
  auto rows = StepRows(c.run_dir);
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[0]["loss_scale"], 1024);
  EXPECT_EQ(rows[1]["loss_scale"], 1024);
  EXPECT_TRUE(rows[1].value("skipped", false));
  EXPECT_TRUE(rows[1]["grad_norm"].is_null());  // JSON has no inf: the norm of a skipped step is null
  EXPECT_EQ(rows[2]["loss_scale"], 512);
  EXPECT_FALSE(rows[2].contains("skipped"));
}

// fp16 losses follow fp32's closely: the 11-bit mantissa costs well under a percent in 8 steps.
TEST_F(Fp16Trainer, TracksFp32) {
  auto a = Make(Config("f32", "fp32")), b = Make(Config("f16", "fp16"));
  ASSERT_TRUE(a && b);
  for (int i = 0; i < 8; i++) {
    auto sa = a->Step(), sb = b->Step();
    ASSERT_TRUE(sa.ok() && sb.ok());
    EXPECT_FALSE(sb->skipped);
    EXPECT_NEAR(sb->loss, sa->loss, 1e-2 * sa->loss) << "step " << i + 1;
    if (i == 0) {
      EXPECT_NE(sb->loss, sa->loss) << "fp16 must actually round something";
    }
  }
}

// A resumed fp16 run continues with the saved scale, good-step count and AdamW step, and ends bit for bit
// where an uninterrupted run ends.
TEST_F(Fp16Trainer, ResumeRestoresTheScale) {
  TrainConfig a = Config("resume_a", "fp16", 8);
  a.loss_scale_growth_interval = 3;
  a.ckpt.every = 4;
  auto ta = Make(a, OverflowAt(2));
  ASSERT_TRUE(ta);
  ASSERT_TRUE(ta->Run().ok());
  const std::vector<float> reference = ta->model().GetParameters();
  const LossScaler::State end_a = ta->loss_scaler().state();

  std::ifstream tj(a.run_dir + "/checkpoints/step_00000004/trainer.json");
  ASSERT_TRUE(tj.good());
  const auto j = nlohmann::json::parse(tj);
  // Steps 1 (good), 2 (overflow: 1024 -> 512), 3, 4 (good): scale 512, 2 good steps, 1 skipped, 3 updates.
  EXPECT_EQ(j["loss_scale"]["scale"], 512);
  EXPECT_EQ(j["loss_scale"]["good_steps"], 2);
  EXPECT_EQ(j["loss_scale"]["skipped_steps"], 1);
  EXPECT_EQ(j["adam_t"], 3);
  EXPECT_EQ(j["step"], 4);

  TrainConfig b = Config("resume_b", "fp16", 8);
  b.loss_scale_growth_interval = 3;
  b.loss_scale_init = 8;  // ignored on resume: the scale is training state
  b.ckpt.resume = ResumeFrom::Path(a.run_dir + "/checkpoints/step_00000004");
  auto tb = Make(b, OverflowAt(2));
  ASSERT_TRUE(tb);
  EXPECT_EQ(tb->loss_scaler().scale(), 512);
  EXPECT_EQ(tb->loss_scaler().state().good_steps, 2);
  EXPECT_EQ(tb->adam_t(), 3);
  ASSERT_TRUE(tb->Run().ok());
  EXPECT_EQ(tb->model().GetParameters(), reference);
  EXPECT_EQ(tb->loss_scaler().state().scale, end_a.scale);
  EXPECT_EQ(tb->loss_scaler().state().good_steps, end_a.good_steps);
  EXPECT_EQ(tb->loss_scaler().state().skipped_steps, end_a.skipped_steps);
}

// ---- GPU metrics through the trainer, with a scripted sampler
// ------------------------------------------------

TEST_F(Fp16Trainer, GpuFieldsReachMetricsJsonl) {
  TrainConfig c = Config("gpu_counter", "fp32", 3);
  TrainerEnv env;
  auto fake = std::make_shared<testing::FakeGpuSampler>(testing::FakeGpuSampler::Script{});
  env.gpu_sampler = fake;
  auto t = Make(c, env);
  ASSERT_TRUE(t);
  ASSERT_TRUE(t->Run().ok());
  auto rows = StepRows(c.run_dir);
  ASSERT_EQ(rows.size(), 3u);
  for (const auto& r : rows) {
    EXPECT_EQ(r["gpu_util"], 87.0);
    EXPECT_EQ(r["gpu_mem_gb"], 12.5);
    EXPECT_EQ(r["gpu_power_w"], 300.0);
    // Each step reads the sampler at its start and end: the counter moves 50 J; 256 tokens per step.
    EXPECT_DOUBLE_EQ(r["joules_per_token"].get<double>(), 50.0 / 256);
  }
  EXPECT_EQ(fake->calls(), 6);
}

TEST_F(Fp16Trainer, GpuEnergyFallsBackToPowerTimesTime) {
  TrainConfig c = Config("gpu_power", "fp32", 2);
  TrainerEnv env;
  testing::FakeGpuSampler::Script script;
  script.has_energy = false;
  script.power_w = 200;
  env.gpu_sampler = std::make_shared<testing::FakeGpuSampler>(script);
  auto t = Make(c, env);
  ASSERT_TRUE(t);
  ASSERT_TRUE(t->Run().ok());
  for (const auto& r : StepRows(c.run_dir)) {
    const double want = 200.0 * r["step_ms"].get<double>() / 1e3 / 256;
    EXPECT_NEAR(r["joules_per_token"].get<double>(), want, 1e-9 * want);
  }
}

TEST_F(Fp16Trainer, NoGpuFieldsOnTheCpu) {
  TrainConfig c = Config("gpu_none", "fp32", 2);
  auto t = Make(c);
  ASSERT_TRUE(t);
  ASSERT_TRUE(t->Run().ok());
  for (const auto& r : StepRows(c.run_dir))
    for (const char* k : {"gpu_util", "gpu_mem_gb", "gpu_power_w", "joules_per_token", "loss_scale"})
      EXPECT_FALSE(r.contains(k)) << k;
}

}  // namespace
}  // namespace tern
