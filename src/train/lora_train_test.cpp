// train.lora through the real trainer: a LoRA run starts as its source (B = 0), trains the adapters only (the
// base weights stay bit for bit), lowers the validation loss, exports the merged model (model.safetensors is
// what its forward computed), resumes bit-exact, and its checkpoints read back merged wherever a model is
// loaded from one; a LoRA run without a source, or a resume that changes the adapters, is refused with the
// fix.
#include <gtest/gtest.h>

#include <omp.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "infer/adapter.h"
#include "infer/weights.h"
#include "model/safetensors.h"
#include "registry/source.h"
#include "testing/files.h"
#include "testing/golden.h"
#include "testing/metrics_rows.h"
#include "testing/prepared_data.h"
#include "train/trainer.h"

namespace tern {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

class LoraTrainTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { omp_set_num_threads(1); }  // bit-exact resume holds per thread count
  void SetUp() override {
    data_ = testing::SharedSmallPreparedData();
    ASSERT_FALSE(data_.empty());
  }

  TrainConfig Config(const std::string& run, int steps) {
    TrainConfig c;
    c.model = {2, 2, 32, 0, 32};
    c.data_dir = data_;
    c.batch_size = 4;
    c.seq_len = 32;
    c.total_batch_tokens = 256;  // 2 micro-batches
    c.steps = steps;
    c.lr = 3e-3;
    c.warmup_steps = 2;
    c.eval_every = 0;
    c.eval_batches = 4;
    c.num_samples = 0;
    c.peak_gflops = 100;
    c.run_dir = tmp_ / run;
    return c;
  }
  TrainConfig Lora(const std::string& run, int steps) {
    TrainConfig c = Config(run, steps);
    c.init_from = tmp_ / "base";
    c.lora = {4, 8.0f, kLoraAllTargets};
    c.lr = 1e-2;
    return c;
  }
  // The source model: 40 steps.
  std::vector<float> Base() {
    TrainConfig c = Config("base", 40);
    auto t = Trainer::Create(c, true);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_TRUE((*t)->Run().ok());
    return (*t)->model().GetParameters();
  }

  std::string data_;
  TempDir tmp_;
};

// Adapting the source to other text (lines of arithmetic): the validation loss there falls, and only the
// adapters moved.
TEST_F(LoraTrainTest, TrainsTheAdaptersOnlyAndExportsTheMergedModel) {
  const std::vector<float> base = Base();
  testing::WriteFile(tmp_ / "numbers.txt", testing::NumbersCorpus(60'000));
  const std::string numbers = tmp_ / "numbers";
  ASSERT_TRUE(testing::PrepareWithTokenizerOf(data_, tmp_ / "numbers.txt", numbers));
  // The validation loss of these weights on the new text, on a fresh trainer (Evaluate reads the next
  // validation batches, so two calls on one trainer compare different ones).
  auto val_loss = [&](const std::vector<float>& params) {
    TrainConfig c = Config("eval", 1);
    c.data_dir = numbers;
    auto e = Trainer::Create(c, true);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    (*e)->model().SetParameters(params);
    return (*e)->Evaluate().value();
  };
  const double base_loss = val_loss(base);
  TrainConfig c = Lora("lora", 24);
  c.data_dir = numbers;
  auto t = Trainer::Create(c, true);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  Gpt& m = (*t)->model();
  ASSERT_EQ(m.num_base_params(), base.size());
  EXPECT_EQ(m.trainable().offset, base.size());
  EXPECT_EQ(m.trainable().count, LoraParamCount(m.config(), m.lora()));
  EXPECT_EQ(m.memory().grads, m.trainable().count * 4) << "no gradients for the frozen weights";
  EXPECT_EQ((*t)->Evaluate().value(), base_loss) << "step 0 is the source model";

  ASSERT_TRUE((*t)->Run().ok());
  const std::vector<float> after = m.GetParameters();
  EXPECT_EQ(0, std::memcmp(after.data(), base.data(), base.size() * 4)) << "a frozen weight moved";
  // model.safetensors is the merged model: what the LoRA model computed, and better on the new text.
  auto saved = ReadGptSafetensors(tmp_ / "lora/model.safetensors");
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_TRUE(saved->params == m.ExportParameters());
  const double lora_loss = val_loss(saved->params);
  EXPECT_LT(lora_loss, base_loss - 0.3) << "the adapters learned little";
  std::fprintf(stderr, "val loss on the new text: source %.4f, after LoRA %.4f\n", base_loss, lora_loss);
}

TEST_F(LoraTrainTest, ResumesBitExactAndCheckpointsReadBackMerged) {
  Base();
  TrainConfig a = Lora("lora_a", 8);
  a.ckpt.every = 4;
  auto ta = Trainer::Create(a, true);
  ASSERT_TRUE(ta.ok()) << ta.status().ToString();
  ASSERT_TRUE((*ta)->Run().ok());
  const std::vector<float> reference = (*ta)->model().GetParameters();

  TrainConfig b = Lora("lora_b", 8);
  b.ckpt.resume = ResumeFrom::Path(a.run_dir + "/checkpoints/step_00000004");
  auto tb = Trainer::Create(b, true);
  ASSERT_TRUE(tb.ok()) << tb.status().ToString();
  EXPECT_EQ((*tb)->resumed_from(), 4);
  ASSERT_TRUE((*tb)->Run().ok());
  const auto la = testing::StepLosses(a.run_dir), lb = testing::StepLosses(b.run_dir);
  ASSERT_EQ(lb.size(), 4u);
  for (const auto& [step, loss] : lb) EXPECT_EQ(loss, la.at(step)) << "step " << step;
  EXPECT_TRUE((*tb)->model().GetParameters() == reference) << "final weights identical";

  // A checkpoint of a LoRA run loads (serve, generate, eval, init_from, `tern ckpt export`) as the merged
  // model: the host's merge of the same adapters, to rounding.
  auto loaded = LoadModelWeights(a.run_dir + "/checkpoints/step_00000008");
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const std::vector<float> merged = (*ta)->model().ExportParameters();
  ASSERT_EQ(loaded->params.size(), merged.size());
  EXPECT_LT(testing::RelMaxError(loaded->params.data(), merged.data(), merged.size()), 1e-6);
  EXPECT_FALSE(loaded->params == (*ta)->model().GetParameters()) << "read as the unmerged base";

  // The adapters alone (tern serve BASE --lora NAME=RUN): adapter.safetensors in the run directory, and
  // any checkpoint of the run, hold the trained adapters and name the source model's weights.
  auto base_model = LoadModelWeights(tmp_ / "base");
  ASSERT_TRUE(base_model.ok()) << base_model.status().ToString();
  const std::string base_print = BaseFingerprint(base_model->config, base_model->params);
  const std::vector<float> adapters(
      reference.begin() + static_cast<std::ptrdiff_t>(base_model->params.size()), reference.end());
  for (const std::string& from :
       {a.run_dir, a.run_dir + "/adapter.safetensors", a.run_dir + "/checkpoints/step_00000008"}) {
    auto adapter = LoadLoraAdapter(from);
    ASSERT_TRUE(adapter.ok()) << from << ": " << adapter.status().ToString();
    EXPECT_EQ(adapter->base_fingerprint, base_print) << from;
    EXPECT_EQ(adapter->spec.ToString(), a.lora.ToString()) << from;
    EXPECT_TRUE(adapter->params == adapters) << from;
    EXPECT_TRUE(CheckAdapterBase(*adapter, from, base_model->config, base_print, "base").ok()) << from;
  }
  // `tern models register` of the run or of a checkpoint stores the same adapters (docs/registry.md).
  for (const std::string& from : {a.run_dir, a.run_dir + "/checkpoints/step_00000008"}) {
    auto src = registry::ReadModelSource(from);
    ASSERT_TRUE(src.ok()) << from << ": " << src.status().ToString();
    auto registered = ParseLoraAdapter(src->adapter, from);
    ASSERT_TRUE(registered.ok()) << from << ": " << registered.status().ToString();
    EXPECT_TRUE(registered->params == adapters) << from;
    EXPECT_EQ(registered->base_fingerprint, base_print) << from;
  }
  auto no_adapters = LoadLoraAdapter(tmp_ / "base");
  EXPECT_NE(no_adapters.status().message().find("not trained with LoRA"), std::string::npos)
      << no_adapters.status().ToString();

  // Changing the adapters on resume is refused, naming the change.
  TrainConfig c = Lora("lora_a", 8);
  c.lora.rank = 8;
  c.ckpt.resume = ResumeFrom::Auto();
  auto tc = Trainer::Create(c, true);
  ASSERT_FALSE(tc.ok());
  EXPECT_NE(tc.status().message().find("train.lora.rank: 4 -> 8"), std::string::npos)
      << tc.status().ToString();
  TrainConfig d = Config("lora_a", 8);  // the same run dir without LoRA
  d.init_from = tmp_ / "base";
  d.ckpt.resume = ResumeFrom::Auto();
  auto td = Trainer::Create(d, true);
  ASSERT_FALSE(td.ok());
  EXPECT_NE(td.status().message().find("train.lora.rank: 4 -> 0"), std::string::npos)
      << td.status().ToString();
}

TEST_F(LoraTrainTest, WithoutASourceItIsRefusedWithTheFix) {
  TrainConfig c = Config("nosource", 2);
  c.lora.rank = 8;
  auto t = Trainer::Create(c, true);
  ASSERT_FALSE(t.ok());
  const Status st = t.status();
  EXPECT_FALSE(fs::exists(tmp_ / "nosource/metrics.jsonl")) << "refused before anything is written";
  EXPECT_NE(st.message().find("train.init_from"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("train.lora.rank=0"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace tern
