// Multi-LoRA serving (infer/adapter.h, InferenceModel::AddAdapter): a sequence served with an adapter
// computes what the merged model computes (W + s B A, model/lora.h's MergeLoraOnHost: an independent
// formula); sequences with other adapters, or none, in the same batch get bitwise what they get alone; the
// prefix cache keeps each adapter's blocks apart; the adapter file round-trips and refuses a base it was not
// trained on.
#include <gtest/gtest.h>

#include "infer/adapter.h"
#include "infer/inference_model.h"
#include "testing/ops.h"
#include "testing/test_run.h"

namespace tern {
namespace {

using testing::MakeTestRun;
using testing::RunToEnd;

class AdapterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { run_ = MakeTestRun().release(); }
  static void TearDownTestSuite() { delete run_; }

  static LoraAdapter RandomAdapter(int rank, uint8_t targets, float alpha, uint32_t seed) {
    return testing::RandomLoraAdapter(*run_, rank, targets, alpha, seed);
  }
  static std::vector<float> Merged(const LoraAdapter& a) { return testing::MergedLoraParams(*run_, a); }
  static std::unique_ptr<InferenceModel> Model(Backend* be, const std::vector<float>& params,
                                               const std::vector<LoraAdapter>& adapters,
                                               Quantize q = Quantize::kNone) {
    InferenceModelOptions mo;
    mo.quantize = q;
    mo.num_blocks = 32;
    mo.max_rows = 64;
    mo.max_seqs = 8;
    auto m = InferenceModel::Create(be, run_->cfg, params, mo);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    for (const LoraAdapter& a : adapters) {
      auto id = (*m)->AddAdapter(a);
      EXPECT_TRUE(id.ok()) << id.status().ToString();
    }
    return std::move(m).value();
  }
  static std::vector<int32_t> Prompt(int n, int salt) {
    std::vector<int32_t> p;
    for (int i = 0; i < n; i++) p.push_back(3 + (i * 7 + salt * 13) % (run_->cfg.vocab_size - 3));
    return p;
  }
  // Appends sequence `prompt` (prefilled in one chunk, KV in blocks first_block...) with `adapter` to b.
  void AddSeq(ForwardBatch* b, const InferenceModel& m, const std::vector<int32_t>& prompt, int first_block,
              int adapter, bool all_logits) {
    const int bs = m.options().block_size, row0 = b->N(), n = static_cast<int>(prompt.size());
    for (int p = 0; p < n; p++) {
      b->tokens.push_back(prompt[p]);
      b->positions.push_back(p);
      b->slots.push_back((first_block + p / bs) * bs + p % bs);
    }
    b->seqs.insert(b->seqs.end(), {row0, n, n});
    const size_t t0 = b->block_tables.size();
    b->block_tables.resize(t0 + m.max_blocks_per_seq(), 0);
    for (int k = 0; k * bs < n; k++) b->block_tables[t0 + k] = first_block + k;
    for (int r = all_logits ? 0 : n - 1; r < n; r++) b->logit_rows.push_back(row0 + r);
    if (m.num_adapters() > 0) b->adapters.push_back(adapter);
  }
  std::vector<float> Logits(InferenceModel& m, const std::vector<int32_t>& prompt, int adapter) {
    ForwardBatch b;
    AddSeq(&b, m, prompt, 0, adapter, true);
    const float* l = m.Forward(b);
    return std::vector<float>(l, l + b.logit_rows.size() * run_->cfg.vocab_size);
  }

  // An engine of 8 sequences over the model of `params` serving `adapters`.
  std::unique_ptr<Engine> MakeEngine(Backend* be, const std::vector<float>& params,
                                     const std::vector<LoraAdapter>& adapters) {
    EngineOptions eo;
    eo.max_batch = 8;
    eo.max_batch_tokens = 64;
    return std::make_unique<Engine>(Model(be, params, adapters), run_->tok.get(), eo, &metrics_);
  }
  // Greedy, 12 tokens after a 50-token prompt (3 full KV blocks of 16), on `adapter`.
  GenerationRequest Greedy(int adapter) {
    GenerationRequest r;
    r.prompt = Prompt(50, 4);
    r.max_tokens = 12;
    r.sampling.temperature = 0.0f;
    r.ignore_eos = true;
    r.adapter = adapter;
    return r;
  }
  testing::Outcome Run(Engine& e, int adapter) { return RunToEnd(e, {e.Submit(Greedy(adapter)).value()})[0]; }

  static testing::TestRun* run_;
  ServeMetrics metrics_;
};
testing::TestRun* AdapterTest::run_ = nullptr;

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); i++) d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
  return d;
}

// fp32: x W^T + (x A^T)(s B)^T is W + s B A (merged in double on the host) up to fp32 rounding, every row of
// a 37-token prompt (three KV blocks); a rank-3 adapter of two targets too. Beside bf16 and int8 base weights
// the adapters are bf16: their logits are far closer to the merged model's than to the base model's.
TEST_F(AdapterTest, AdaptedLogitsAreTheMergedModels) {
  auto be = MakeCpuFastBackend();
  const auto prompt = Prompt(37, 1);
  for (const LoraAdapter& a :
       {RandomAdapter(4, kLoraAllTargets, 8.0f, 1), RandomAdapter(3, kLoraQkv | kLoraFcproj, 5.0f, 2)}) {
    const std::string what = a.spec.ToString();
    auto served = Model(be.get(), run_->params, {a});
    auto merged = Model(be.get(), Merged(a), {});
    const std::vector<float> want = Logits(*merged, prompt, 0);
    testing::ExpectClose(Logits(*served, prompt, 1), want, 1e-4, 1e-5, "adapter " + what);
    const std::vector<float> base = Logits(*served, prompt, 0);
    EXPECT_GT(MaxAbsDiff(base, want), 0.05) << "the adapter must matter for this test to mean anything";
    for (Quantize q : {Quantize::kBF16, Quantize::kInt8}) {
      auto qm = Model(be.get(), run_->params, {a}, q);
      const std::vector<float> got = Logits(*qm, prompt, 1);
      EXPECT_LT(MaxAbsDiff(got, want), 0.1 * MaxAbsDiff(base, want)) << WeightsName(q) << " " << what;
    }
  }
}

// Four sequences, adapters 0, 1, 2, 1, in one forward: each gets bitwise the logits it gets alone, and the
// base sequence those of a model serving no adapter at all; with fp32 weights (fp32 adapters) and bf16 ones
// (bf16 adapters, half the bytes), and int4 ones (bf16 adapters) where the CPU runs them.
TEST_F(AdapterTest, BatchedSequencesWithDifferentAdaptersMatchEachAlone) {
  auto be = MakeCpuFastBackend();
  const std::vector<LoraAdapter> adapters = {RandomAdapter(4, kLoraAllTargets, 8.0f, 3),
                                             RandomAdapter(3, kLoraQkv | kLoraFc, 6.0f, 4)};
  for (Quantize q : {Quantize::kNone, Quantize::kBF16, Quantize::kInt4}) {
    if (q == Quantize::kInt4 && !be->capabilities().int4_weights) continue;  // no AVX-512 VNNI
    SCOPED_TRACE(WeightsName(q));
    auto model = Model(be.get(), run_->params, adapters, q);
    const int ids[4] = {0, 1, 2, 1}, lens[4] = {5, 19, 3, 6};
    ForwardBatch b;
    for (int s = 0; s < 4; s++) AddSeq(&b, *model, Prompt(lens[s], s), 2 * s, ids[s], false);
    const float* l = model->Forward(b);
    const int V = run_->cfg.vocab_size;
    const std::vector<float> batched(l, l + 4 * V);
    auto plain = Model(be.get(), run_->params, {}, q);
    for (int s = 0; s < 4; s++) {
      auto alone = Model(be.get(), run_->params, adapters, q);
      ForwardBatch one;
      AddSeq(&one, *alone, Prompt(lens[s], s), 0, ids[s], false);
      const float* la = alone->Forward(one);
      EXPECT_EQ(std::vector<float>(la, la + V),
                std::vector<float>(batched.begin() + s * V, batched.begin() + (s + 1) * V))
          << "sequence " << s << " (adapter " << ids[s] << ")";
    }
    for (int s : {0, 1}) {  // the base sequence is the plain model's; the adapted one is not
      ForwardBatch base;
      AddSeq(&base, *plain, Prompt(lens[s], s), 0, 0, false);
      const float* lp = plain->Forward(base);
      const std::vector<float> want(lp, lp + V), got(batched.begin() + s * V, batched.begin() + (s + 1) * V);
      if (s == 0) {
        EXPECT_EQ(got, want);
      }
      if (s == 1) {
        EXPECT_GT(MaxAbsDiff(got, want), 0.05);
      }
    }
    const size_t elem = q == Quantize::kNone ? sizeof(float) : sizeof(uint16_t);
    EXPECT_EQ(model->param_bytes() - plain->param_bytes(),
              (adapters[0].params.size() + adapters[1].params.size()) * elem);
  }
}

// The engine: an adapter's request decodes as the merged model does; the base model's blocks are not reused
// for an adapter's request (or the other way round), an adapter's own blocks are.
TEST_F(AdapterTest, EngineKeepsEachAdaptersPrefixCacheApart) {
  auto be = MakeCpuFastBackend();
  const LoraAdapter a = RandomAdapter(4, kLoraAllTargets, 8.0f, 5);
  auto engine = [&](const std::vector<float>& params, const std::vector<LoraAdapter>& adapters) {
    return MakeEngine(be.get(), params, adapters);
  };
  auto merged = engine(Merged(a), {});
  auto plain = engine(run_->params, {});
  const auto want_adapted = Run(*merged, 0), want_base = Run(*plain, 0);
  ASSERT_NE(want_adapted.tokens, want_base.tokens) << "the adapter must change the greedy text";

  auto served = engine(run_->params, {a});
  const auto first = Run(*served, 1);
  EXPECT_EQ(first.tokens, want_adapted.tokens);
  const auto base = Run(*served, 0);  // same prompt, base model: nothing cached for it
  EXPECT_EQ(base.cached_tokens, 0);
  EXPECT_EQ(base.tokens, want_base.tokens);
  const auto again = Run(*served, 1);  // the adapter's own blocks are found
  EXPECT_EQ(again.cached_tokens, 48);
  EXPECT_EQ(again.tokens, want_adapted.tokens);
  auto bad = served->Submit(Greedy(2));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("adapter 2 is not served"), std::string::npos);
}

// Adapters added and removed while the engine serves (tern serve --allow-lora-updates): an added one answers
// as its merged model; a removed one refuses new requests at once, lets the running one finish on it (the
// merged model's tokens), and is freed after it; ids are not reused, and a later adapter of other weights
// never finds the removed one's cached prompt blocks, while the same adapter added again does.
TEST_F(AdapterTest, EngineAddsAndRemovesAdaptersWhileServing) {
  auto be = MakeCpuFastBackend();
  const LoraAdapter a = RandomAdapter(4, kLoraAllTargets, 8.0f, 5),
                    b = RandomAdapter(2, kLoraQkv | kLoraFc, 4.0f, 9);
  auto engine = [&](const std::vector<float>& params) { return MakeEngine(be.get(), params, {}); };
  ServeMetrics& metrics = metrics_;
  const auto want_a = Run(*engine(Merged(a)), 0), want_b = Run(*engine(Merged(b)), 0);
  ASSERT_NE(want_a.tokens, want_b.tokens);

  auto served = engine(run_->params);
  EXPECT_EQ(served->Submit(Greedy(1)).status().code(), Status::Code::kNotFound);
  ASSERT_EQ(served->AddAdapter(a).value(), 1);
  EXPECT_EQ(served->adapters_served(), 1);
  EXPECT_EQ(metrics.lora_adapters.load(), 1);
  EXPECT_EQ(Run(*served, 1).tokens, want_a.tokens);

  auto running = served->Submit(Greedy(1)).value();
  served->Step();  // the prompt (whose blocks are cached from the request above) and a first token
  served->Step();
  ASSERT_TRUE(served->RemoveAdapter(1).ok());
  EXPECT_EQ(served->adapters_served(), 0);
  EXPECT_EQ(metrics.lora_adapters.load(), 0);
  auto refused = served->Submit(Greedy(1));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Status::Code::kNotFound) << refused.status().ToString();
  EXPECT_EQ(served->RemoveAdapter(1).code(), Status::Code::kNotFound);
  EXPECT_TRUE(served->adapter_weights_held(1)) << "a request still runs on it";
  EXPECT_EQ(RunToEnd(*served, {running})[0].tokens, want_a.tokens) << "it finishes on the removed adapter";
  served->Step();
  EXPECT_FALSE(served->adapter_weights_held(1)) << "freed once no request names it";

  ASSERT_EQ(served->AddAdapter(b).value(), 2) << "ids are not reused";
  const auto on_b = Run(*served, 2);
  EXPECT_EQ(on_b.tokens, want_b.tokens);
  EXPECT_EQ(on_b.cached_tokens, 0) << "adapter 1's cached blocks must not serve adapter 2";
  EXPECT_EQ(Run(*served, 0).cached_tokens, 0) << "nor the base model";

  // The same adapter again (a new id, as a read back by --max-loaded-loras): the prefix cache keys blocks by
  // the adapter's weights, so it finds the blocks it cached before; the same matrices at another alpha are
  // other weights and find none.
  ASSERT_EQ(served->AddAdapter(a).value(), 3);
  const auto again = Run(*served, 3);
  EXPECT_EQ(again.tokens, want_a.tokens);
  EXPECT_GT(again.cached_tokens, 0) << "the same weights must find the blocks they cached under id 1";
  LoraAdapter scaled = a;
  scaled.spec.alpha = 16.0f;
  ASSERT_EQ(served->AddAdapter(scaled).value(), 4);
  EXPECT_EQ(Run(*served, 4).cached_tokens, 0);
}

TEST_F(AdapterTest, FileRoundTripsAndRefusesAnotherBase) {
  const LoraAdapter a = RandomAdapter(3, kLoraAttproj | kLoraFc, 7.0f, 6);
  const std::string file = run_->dir / "adapter.safetensors";
  ASSERT_TRUE(WriteLoraAdapter(file, a, {{"tern.step", "12"}}).ok());
  auto back = LoadLoraAdapter(file);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->params, a.params);
  EXPECT_EQ(back->spec.ToString(), a.spec.ToString());
  EXPECT_EQ(back->spec.alpha, 7.0f);
  EXPECT_EQ(back->config.ToString(), run_->cfg.ToString());
  EXPECT_EQ(back->base_fingerprint, BaseFingerprint(run_->cfg, run_->params));
  // The run directory itself names the file.
  auto by_dir = LoadLoraAdapter(run_->dir.path());
  ASSERT_TRUE(by_dir.ok()) << by_dir.status().ToString();
  EXPECT_EQ(by_dir->params, a.params);
  std::filesystem::remove(file);

  EXPECT_TRUE(CheckAdapterBase(a, "a", run_->cfg, BaseFingerprint(run_->cfg, run_->params), "base").ok());
  std::vector<float> other = run_->params;
  other[12345] += 1e-3f;
  Status wrong = CheckAdapterBase(a, "a", run_->cfg, BaseFingerprint(run_->cfg, other), "other");
  EXPECT_NE(wrong.message().find("trained on other weights"), std::string::npos) << wrong.ToString();
  EXPECT_NE(wrong.message().find("train.init_from"), std::string::npos) << wrong.ToString();
  GptConfig bigger = run_->cfg;
  bigger.n_layer++;
  EXPECT_NE(CheckAdapterBase(a, "a", bigger, a.base_fingerprint, "big").message().find("is for a"),
            std::string::npos);

  // A run without adapters, and nothing at all, say what they are.
  auto none = LoadLoraAdapter(run_->dir.path());
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("not trained with LoRA"), std::string::npos)
      << none.status().ToString();
  auto missing = LoadLoraAdapter(run_->dir / "nowhere");
  EXPECT_EQ(missing.status().code(), Status::Code::kNotFound) << missing.status().ToString();
}

}  // namespace
}  // namespace tern
