// End to end on a small real corpus: prepare -> train a few dozen steps -> the loss falls; the run is
// deterministic for a seed; the exported safetensors file reads back in an independent reader.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/prepare.h"
#include "model/safetensors.h"
#include "testing/processes.h"
#include "testing/skip.h"
#include "train/lr_schedule.h"
#include "train/trainer.h"

namespace tern {
namespace {

namespace fs = std::filesystem;

class TrainerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // One directory per process: ctest runs each test case as its own process, in parallel, and a shared
    // directory would be removed under a neighbour's feet.
    root_ = fs::temp_directory_path() / ("tern_trainer_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    std::ofstream(root_ / "corpus.txt") << testing::SmallCorpus();
    PrepareOptions p;
    p.inputs = {(root_ / "corpus.txt").string()};
    p.out_dir = (root_ / "data").string();
    p.vocab_size = 300;
    p.val_fraction = 0.1;
    p.progress = nullptr;
    auto r = Prepare(p);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }

  TrainConfig SmallConfig(const std::string& run) {
    TrainConfig c;
    c.model = {2, 2, 32, 0, 32};
    c.data_dir = (root_ / "data").string();
    c.batch_size = 4;
    c.seq_len = 32;
    c.total_batch_tokens = 256;  // 2 micro-batches: exercises accumulation
    c.steps = 40;
    c.lr = 3e-3;
    c.warmup_steps = 5;
    c.eval_every = 20;
    c.eval_batches = 4;
    c.num_samples = 1;
    c.sample_tokens = 8;
    c.peak_gflops = 100;  // skip the probe: faster and deterministic
    c.run_dir = (root_ / run).string();
    return c;
  }

  static void TearDownTestSuite() { fs::remove_all(root_); }

  static fs::path root_;
};
fs::path TrainerTest::root_;

TEST_F(TrainerTest, LossFallsAndRunFilesAreWritten) {
  auto t = Trainer::Create(SmallConfig("run_a"), /*quiet=*/true);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto first = (*t)->Evaluate();
  ASSERT_TRUE(first.ok());
  auto s = (*t)->Run();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_LT(s->val_loss, *first - 1.0)
      << "validation loss should fall well below its start (" << *first << ")";
  EXPECT_EQ(s->tokens, 40u * 256u);
  for (const char* f :
       {"metrics.jsonl", "config.yaml", "model.safetensors", "summary.json", "tokenizer.model"}) {
    EXPECT_TRUE(fs::exists(fs::path(s->run_dir) / f)) << f;
  }
  // metrics.jsonl: a start row, one row per step with the documented fields, eval rows, an end row.
  std::ifstream in(fs::path(s->run_dir) / "metrics.jsonl");
  std::string line;
  int steps = 0, evals = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("event")) continue;  // start and end rows
    if (j.contains("val_loss")) evals++;
    if (j.contains("loss")) {
      steps++;
      for (const char* k :
           {"step", "lr", "grad_norm", "tokens_per_s", "mfu", "step_ms", "data_wait_ms", "precision"})
        EXPECT_TRUE(j.contains(k)) << k;
    }
  }
  EXPECT_EQ(steps, 40);
  EXPECT_EQ(evals, 2);
}

TEST_F(TrainerTest, SameSeedSameLossesBitForBit) {
  auto run = [&](const std::string& name) {
    auto t = Trainer::Create(SmallConfig(name), true);
    EXPECT_TRUE(t.ok());
    std::vector<double> losses;
    for (int i = 0; i < 6; i++) losses.push_back((*t)->Step()->loss);
    return losses;
  };
  EXPECT_EQ(run("det_a"), run("det_b"));
}

// train.schedule=wsd through the trainer: each step's lr is the schedule's, from the config's keys: the
// stable phase at train.lr, then the decay over the last train.decay_fraction of the steps.
TEST_F(TrainerTest, EachStepTakesTheConfiguredSchedulesRate) {
  TrainConfig c = SmallConfig("wsd");
  c.steps = 10;
  c.warmup_steps = 2;
  c.schedule = LrScheduleKind::kWsd;
  c.decay_fraction = 0.5;
  c.min_lr_ratio = 0;
  auto t = Trainer::Create(c, true);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const LrSchedule want{c.lr, 0, 2, 10, LrScheduleKind::kWsd, 0.5};
  for (int step = 0; step < 10; step++) {
    auto s = (*t)->Step();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_DOUBLE_EQ(s->lr, want.At(step)) << step;
    if (step >= 2 && step <= 5) {
      EXPECT_DOUBLE_EQ(s->lr, c.lr) << "stable at " << step;
    } else if (step > 5) {
      EXPECT_LT(s->lr, c.lr) << "decaying at " << step;
    }
  }
}

// eval.choices: every evaluation row carries the accuracy on the multiple-choice set, the last one that of
// the final weights through ScoreChoices; eval.choices_items keeps the first N items; a bad file stops the
// run before any step, naming the key and the line.
TEST_F(TrainerTest, EvaluationsScoreTheMultipleChoiceSet) {
  const fs::path set = root_ / "choices.jsonl";
  {
    std::ofstream f(set);
    for (int i = 0; i < 5; i++)
      f << R"({"ctx": "Verse )" << 100 + i
        << R"(:", "endings": ["Qzx vjk Zqx jvq zq.", "light and darkness."], )"
        << R"("label": 1})"
        << "\n";
  }
  TrainConfig c = SmallConfig("choices");
  c.steps = 10;
  c.eval_every = 5;
  c.eval_choices = set.string();
  c.eval_choices_items = 3;
  auto t = Trainer::Create(c, true);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto sum = (*t)->Run();
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();
  std::vector<nlohmann::json> evals;
  std::ifstream in(root_ / "choices" / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("val_loss") && !j.contains("event")) evals.push_back(j);
  }
  ASSERT_EQ(evals.size(), 2u);
  for (const auto& e : evals) {
    ASSERT_TRUE(e.contains("choice_acc")) << e.dump();
    const double acc = e["choice_acc"];
    EXPECT_NEAR(acc * 3, std::round(acc * 3), 1e-9) << "3 of the 5 items";
  }
  auto items = LoadChoiceItems(set.string());
  ASSERT_TRUE(items.ok());
  items->resize(3);
  auto tok = Tokenizer::Load(c.data_dir + "/tokenizer.model");
  ASSERT_TRUE(tok.ok());
  auto cpu = MakeCpuFastBackend();
  auto want = ScoreChoices(cpu.get(), (*t)->config().model, (*t)->model().GetParameters(), *tok, *items,
                           Quantize::kNone);
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  EXPECT_DOUBLE_EQ(evals.back()["choice_acc"].get<double>(), want->acc());
  EXPECT_DOUBLE_EQ(evals.back()["choice_acc_norm"].get<double>(), want->acc_norm());
  // The summary (and summary.json, which the registry records) carries the last one.
  ASSERT_TRUE(sum->choice_acc.has_value());
  EXPECT_DOUBLE_EQ(*sum->choice_acc, want->acc());
  std::ifstream summary(root_ / "choices" / "summary.json");
  const auto end = nlohmann::json::parse(summary);
  EXPECT_DOUBLE_EQ(end["choice_acc"].get<double>(), want->acc());
  EXPECT_DOUBLE_EQ(end["choice_acc_norm"].get<double>(), want->acc_norm());

  std::ofstream(root_ / "bad.jsonl") << R"({"ctx": "a", "endings": ["x"], "label": 0})"
                                     << "\n";
  TrainConfig bad = SmallConfig("choices_bad");
  bad.eval_choices = (root_ / "bad.jsonl").string();
  auto refused = Trainer::Create(bad, true);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("eval.choices"), std::string::npos)
      << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("bad.jsonl line 1"), std::string::npos)
      << refused.status().ToString();
}

// train.recompute=gelu recomputes the GELU outputs in the backward instead of keeping all L of them, and
// train.recompute=blocks re-runs each layer's forward: the same losses, gradient norms and weights bit for
// bit, for a smaller allocation.
TEST_F(TrainerTest, GeluAndBlockRecomputeSameLossesAndWeightsBitForBit) {
  for (const char* precision : {"fp32", "bf16"}) {
    SCOPED_TRACE(precision);
    auto run = [&](const std::string& recompute, GptMemory* mem) {
      TrainConfig c = SmallConfig(std::string("recompute_") + precision + "_" + recompute);
      c.precision = ParsePrecision(precision).value();
      c.recompute = ParseRecompute(recompute).value();
      auto t = Trainer::Create(c, true);
      EXPECT_TRUE(t.ok()) << t.status().ToString();
      std::vector<double> trace;
      for (int i = 0; i < 4; i++) {
        auto s = (*t)->Step();
        trace.push_back(s->loss);
        trace.push_back(s->grad_norm);
      }
      *mem = (*t)->model().memory();
      std::vector<float> params = (*t)->model().GetParameters();
      trace.insert(trace.end(), params.begin(), params.end());
      return trace;
    };
    GptMemory none_mem, gelu_mem, blocks_mem;
    const std::vector<double> none = run("none", &none_mem), gelu = run("gelu", &gelu_mem);
    EXPECT_TRUE(none == gelu);  // not EXPECT_EQ: a mismatch would print every weight
    // SmallConfig: L=2, B*T=128, C=32: one GELU output of 128 x 128 fewer (bf16 ones with bf16 compute).
    const size_t bytes = std::string(precision) == "bf16" ? 2 : 4;
    EXPECT_EQ(none_mem.activations - gelu_mem.activations, size_t{1} * 128 * 4 * 32 * bytes);
    // train.recompute=blocks: the first layer re-run in the backward, the same bits again, and less memory.
    EXPECT_TRUE(none == run("blocks", &blocks_mem));
    EXPECT_LT(blocks_mem.activations, gelu_mem.activations);
  }
  TrainConfig c;
  EXPECT_NE(ApplyOverride("train.recompute=full", &c).message().find("none, gelu"), std::string::npos);
}

// train.logits_chunk reaches the model: the head in chunks of 48 of the micro-batch's 128 rows trains as the
// whole head up to float rounding (the embedding's gradient sums its rows chunk by chunk), with 80 rows of
// logits fewer allocated; the validation loss (chunked too) agrees as well.
TEST_F(TrainerTest, FusedClassifierChunksTrainAsTheWholeHead) {
  size_t V = 0;
  auto run = [&](int chunk, std::vector<double>* losses, GptMemory* mem) {
    TrainConfig c = SmallConfig("logits_chunk_" + std::to_string(chunk));
    ASSERT_TRUE(ApplyOverride("train.logits_chunk=" + std::to_string(chunk), &c).ok());
    c.steps = 6;
    auto t = Trainer::Create(c, true);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    for (int i = 0; i < 6; i++) losses->push_back((*t)->Step()->loss);
    Result<double> val = (*t)->Evaluate();
    ASSERT_TRUE(val.ok()) << val.status().ToString();
    losses->push_back(*val);
    *mem = (*t)->model().memory();
    EXPECT_EQ((*t)->model().logits_chunk(), chunk);
    V = (*t)->model().config().vocab_size;
  };
  std::vector<double> whole, chunked;
  GptMemory whole_mem, chunked_mem;
  run(0, &whole, &whole_mem);
  run(48, &chunked, &chunked_mem);
  ASSERT_EQ(whole.size(), 7u);
  ASSERT_EQ(chunked.size(), whole.size());
  for (size_t i = 0; i < whole.size(); i++)
    EXPECT_NEAR(chunked[i], whole[i], 1e-6 * whole[i]) << "loss " << i;
  ASSERT_GT(V, 0u);
  EXPECT_EQ(whole_mem.activations - chunked_mem.activations, size_t{128 - 48} * V * sizeof(float));
  TrainConfig c;
  EXPECT_FALSE(ApplyOverride("train.logits_chunk=-1", &c).ok());
}

TEST_F(TrainerTest, Bf16TrainsToo) {
  TrainConfig c = SmallConfig("run_bf16");
  c.precision = TrainPrecision::kBf16;
  auto t = Trainer::Create(c, true);
  ASSERT_TRUE(t.ok());
  auto s = (*t)->Run();
  ASSERT_TRUE(s.ok());
  EXPECT_LT(s->val_loss, 4.5);
}

// The exported file read by a reader we did not write (a few lines of Python's json + struct).
TEST_F(TrainerTest, SafetensorsReadBackIndependently) {
  if (std::system("/usr/bin/python3 -c 'import json,struct' 2>/dev/null") != 0)
    TERN_SKIP_OR_FAIL_IN_CI("no /usr/bin/python3 (scripts/install-deps)");
  GptConfig cfg{2, 2, 8, 11, 5};
  std::vector<float> params(GptParamCount(cfg));
  for (size_t i = 0; i < params.size(); i++) params[i] = static_cast<float>(i) * 0.5f;
  std::string path = (root_ / "w.safetensors").string();
  ASSERT_TRUE(WriteGptSafetensors(path, cfg, params).ok());
  // qkvw of layer 1 is tern [3C, C] at its offset; HF stores it transposed [C, 3C].
  size_t qkv_off = 0;
  for (auto& t : GptParamLayout(cfg))
    if (t.name == "qkvw") qkv_off = t.offset;
  size_t l1 = qkv_off + 3 * 8 * 8;  // layer 1
  std::string script = root_.string() + "/read.py";
  std::ofstream(script)
      << "import json,struct,sys\n"
         "b=open(sys.argv[1],'rb').read(); n=struct.unpack('<Q',b[:8])[0]; h=json.loads(b[8:8+n])\n"
         "e=h['transformer.h.1.attn.c_attn.weight']; s,_=e['data_offsets']\n"
         "assert e['shape']==[8,24] and e['dtype']=='F32'\n"
         "v=struct.unpack('<f',b[8+n+s+4*(2*24+5):8+n+s+4*(2*24+5)+4])[0]\n"  // [in=2][out=5]
         "print(v)\n";
  std::string out_file = root_.string() + "/read.out";
  ASSERT_EQ(std::system(("/usr/bin/python3 " + script + " " + path + " > " + out_file).c_str()), 0);
  std::ifstream in(out_file);
  float v;
  in >> v;
  EXPECT_EQ(v, params[l1 + 5 * 8 + 2]);  // tern row out=5, column in=2
  auto back = ReadGptSafetensors(path);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->params, params);
}

TEST(LrSchedule, WarmupThenCosineToFloor) {
  LrSchedule s{1.0, 0.1, 10, 110, LrScheduleKind::kCosine};
  EXPECT_DOUBLE_EQ(s.At(0), 0.1);
  EXPECT_DOUBLE_EQ(s.At(9), 1.0);
  EXPECT_NEAR(s.At(60), 0.55, 1e-12);  // halfway down the cosine
  EXPECT_NEAR(s.At(110), 0.1, 1e-12);
  LrSchedule c{1.0, 0.1, 0, 100, LrScheduleKind::kConstant};
  EXPECT_DOUBLE_EQ(c.At(50), 1.0);
}

// linear: a straight line from lr at the end of warmup to the floor at the last step. wsd: lr held, then
// the same straight line over the last decay_fraction of the steps (MiniCPM's warmup-stable-decay, nanochat's
// warmdown), never starting inside the warmup.
TEST(LrSchedule, LinearAndWarmupStableDecay) {
  LrSchedule l{1.0, 0.1, 10, 110, LrScheduleKind::kLinear};
  EXPECT_DOUBLE_EQ(l.At(9), 1.0);
  EXPECT_DOUBLE_EQ(l.At(10), 1.0);
  EXPECT_NEAR(l.At(60), 0.55, 1e-12);  // halfway: halfway down
  EXPECT_NEAR(l.At(85), 0.325, 1e-12);
  EXPECT_NEAR(l.At(110), 0.1, 1e-12);
  EXPECT_NEAR(l.At(500), 0.1, 1e-12) << "past the end: the floor";

  LrSchedule w{1.0, 0.0, 10, 110, LrScheduleKind::kWsd, 0.2};  // decays over steps 88..110
  EXPECT_DOUBLE_EQ(w.At(5), 0.6);
  EXPECT_DOUBLE_EQ(w.At(10), 1.0);
  EXPECT_DOUBLE_EQ(w.At(87), 1.0) << "the stable phase";
  EXPECT_DOUBLE_EQ(w.At(88), 1.0) << "the decay starts at lr";
  EXPECT_NEAR(w.At(99), 0.5, 1e-12);
  EXPECT_NEAR(w.At(109), 1.0 / 22, 1e-12);
  EXPECT_NEAR(w.At(110), 0.0, 1e-12);

  LrSchedule all{1.0, 0.1, 10, 110, LrScheduleKind::kWsd, 1.0};  // decay_fraction 1: linear after warmup
  for (int step : {0, 9, 10, 37, 60, 109}) EXPECT_NEAR(all.At(step), l.At(step), 1e-12) << step;
  LrSchedule none{1.0, 0.1, 10, 110, LrScheduleKind::kWsd, 0.0};
  EXPECT_DOUBLE_EQ(none.At(109), 1.0) << "decay_fraction 0: constant";
}

TEST(TrainConfig, OverridesAndValidation) {
  TrainConfig c;
  EXPECT_TRUE(ApplyOverride("train.precision=bf16", &c).ok());
  EXPECT_EQ(c.precision, TrainPrecision::kBf16);
  EXPECT_FALSE(ApplyOverride("train.precision=fp8", &c).ok());
  EXPECT_FALSE(ApplyOverride("nosuch.key=1", &c).ok());
  EXPECT_FALSE(ApplyOverride("train.steps", &c).ok());
  c.data_dir = "x";
  c.batch_size = 4;
  c.seq_len = 8;
  c.total_batch_tokens = 33;
  Status st = c.Validate();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("multiple"), std::string::npos);
}

}  // namespace
}  // namespace tern
