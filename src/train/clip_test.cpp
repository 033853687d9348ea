// Gradient clipping (train.grad_clip): when the global gradient norm exceeds it, the step's gradient is
// scaled by grad_clip / norm before AdamW; at or below it, nothing changes. One step of a tiny model: the
// gradient is captured before the update (TrainerEnv::after_backward), and the AdamW step it should give is
// computed here from it. AdamW's first step is nearly blind to the gradient's scale (m / sqrt(v) = g / |g|
// when eps is tiny), so train.eps is set to the gradient's median magnitude: there the unclipped gradient
// moves a weight by lr / 2 and a quarter of it by lr / 5.
#include <gtest/gtest.h>

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "testing/prepared_data.h"
#include "train/trainer.h"

namespace tern {
namespace {

namespace fs = std::filesystem;

struct OneStep {
  std::vector<float> before, grads, after;
  StepStats stats;
  std::vector<ParamTensor> layout;
};

class ClipTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    omp_set_num_threads(1);  // the bitwise comparisons between runs hold per thread count
    root_ = fs::temp_directory_path() / ("tern_clip_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    data_ = testing::SharedSmallPreparedData();
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }
  void SetUp() override { ASSERT_FALSE(data_.empty()) << "preparing the small corpus failed"; }

  // The first step of a fresh run (same seed, same data each time) with train.grad_clip = clip.
  static OneStep Step(const std::string& name, double clip, double eps) {
    TrainConfig c;
    c.model = {2, 2, 32, 0, 32};
    c.data_dir = data_;
    c.batch_size = 4;
    c.seq_len = 32;
    c.total_batch_tokens = 256;  // 2 micro-batches: the hook sees the accumulated gradient
    c.steps = 1;
    c.lr = 1e-3;
    c.warmup_steps = 0;
    c.eps = eps;
    c.grad_clip = clip;
    c.eval_every = 0;
    c.num_samples = 0;
    c.peak_gflops = 100;
    c.run_dir = (root_ / name).string();
    OneStep out;
    TrainerEnv env;
    env.handle_signals = false;
    env.after_backward = [&out](int, Gpt& model) { out.grads = model.GetGradients(); };
    auto t = Trainer::Create(c, true, env);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    if (!t.ok()) return out;
    out.before = (*t)->model().GetParameters();
    out.layout = (*t)->model().layout();
    auto s = (*t)->Step();
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (s.ok()) out.stats = *s;
    out.after = (*t)->model().GetParameters();
    return out;
  }

  static double Norm(const std::vector<float>& g) {
    double sum = 0;
    for (float x : g) sum += static_cast<double>(x) * x;
    return std::sqrt(sum);
  }

  // The worst |got - want| of the first AdamW step from `s.before` with gradient s.grads * scale, in units
  // of lr (a whole weight's move in one step is at most about lr).
  static double WorstError(const OneStep& s, double scale, double eps, double weight_decay) {
    const double lr = s.stats.lr;
    double worst = 0;
    for (const ParamTensor& t : s.layout) {
      const double wd = t.decay ? weight_decay : 0.0;
      for (size_t i = t.offset; i < t.offset + t.numel; i++) {
        // t = 1: m_hat = g, v_hat = g^2 (the bias corrections undo the (1 - beta) factors).
        const double g = s.grads[i] * scale, p = s.before[i];
        const double want = p - lr * (g / (std::fabs(g) + eps) + wd * p);
        // float rounding of the stored weight (up to 1 for layernorm gains) is below 1e-3 lr.
        worst = std::max(worst, std::fabs(s.after[i] - want) / lr);
      }
    }
    return worst;
  }

  static fs::path root_;
  static std::string data_;
};
fs::path ClipTest::root_;
std::string ClipTest::data_;

TEST_F(ClipTest, ClipScalesTheUpdateAboveTheLimitAndNothingBelow) {
  // An unclipped first step: its gradient sets the scale of everything else.
  const OneStep probe = Step("probe", 0, 1e-8);
  ASSERT_FALSE(probe.grads.empty());
  const double norm = Norm(probe.grads);
  ASSERT_GT(norm, 0);
  EXPECT_NEAR(probe.stats.grad_norm, norm, 1e-5 * norm) << "the reported norm is the gradient's L2 norm";
  std::vector<float> mags(probe.grads.size());
  for (size_t i = 0; i < mags.size(); i++) mags[i] = std::fabs(probe.grads[i]);
  std::nth_element(mags.begin(), mags.begin() + mags.size() / 2, mags.end());
  const double eps = mags[mags.size() / 2];
  ASSERT_GT(eps, 0);
  const double wd = TrainConfig{}.weight_decay;

  const OneStep off = Step("off", 0, eps);                 // train.grad_clip = 0: off
  const OneStep clipped = Step("clipped", norm / 4, eps);  // the norm is 4x the limit
  const OneStep loose = Step("loose", norm * 4, eps);      // the limit is 4x the norm
  for (const OneStep* s : {&off, &clipped, &loose}) {
    ASSERT_EQ(s->grads, probe.grads) << "the same first gradient in every run; clipping does not change it";
    EXPECT_NEAR(s->stats.grad_norm, norm, 1e-5 * norm) << "the norm is reported before clipping";
  }

  // Each run's weights are the AdamW step of its (clipped) gradient, and not the other one's.
  const double off_err = WorstError(off, 1.0, eps, wd), clipped_err = WorstError(clipped, 0.25, eps, wd);
  const double clipped_vs_unclipped = WorstError(clipped, 1.0, eps, wd);
  std::printf(
      "gradient norm %.4g, eps %.3g; worst error in lr: off %.2e, clipped %.2e, clipped vs unclipped "
      "%.3f\n",
      norm, eps, off_err, clipped_err, clipped_vs_unclipped);
  EXPECT_LT(off_err, 1e-3);
  EXPECT_LT(clipped_err, 1e-3) << "clipped to a quarter";
  EXPECT_GT(clipped_vs_unclipped, 0.1) << "the clip changed the update";
  EXPECT_TRUE(loose.after == off.after) << "below the limit the update is bit for bit the unclipped one";
}

}  // namespace
}  // namespace tern
