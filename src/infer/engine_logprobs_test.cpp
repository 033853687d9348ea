// The engine's logprobs (generated and prompt tokens) against an independent forward of the training model,
// max_tokens = 0 (the prompt scored alone), and n choices per request: shared prompt prefill, reproducible
// seeds, cancellation.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "infer/generate.h"
#include "model/gpt.h"
#include "testing/test_run.h"

namespace tern {
namespace {

class EngineChoicesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { run_ = testing::MakeTestRun().release(); }
  static void TearDownTestSuite() { delete run_; }

  std::unique_ptr<Engine> MakeEngine(Backend* be, int max_batch = 8) {
    InferenceModelOptions mo;
    mo.num_blocks = 128;
    mo.max_rows = 64;
    mo.max_seqs = max_batch;
    auto model = InferenceModel::Create(be, run_->cfg, run_->params, mo);
    EXPECT_TRUE(model.ok()) << model.status().ToString();
    EngineOptions eo;
    eo.max_batch = max_batch;
    eo.max_batch_tokens = 64;
    eo.max_queue = 64;
    return std::make_unique<Engine>(std::move(model).value(), run_->tok.get(), eo, &metrics_);
  }
  std::vector<int32_t> Prompt(int n, int salt) const {
    std::vector<int32_t> p;
    for (int i = 0; i < n; i++) p.push_back(3 + (i * 7 + salt * 13) % (run_->cfg.vocab_size - 3));
    return p;
  }
  // log_softmax of the training model's logits at every position of `tokens` (an independent forward).
  std::vector<std::vector<double>> ReferenceLogSoftmax(Backend* be, const std::vector<int32_t>& tokens) {
    const GptConfig& cfg = run_->cfg;
    const int T = static_cast<int>(tokens.size()), V = cfg.vocab_size;
    Gpt gpt(be, cfg, 1, cfg.block_size, Compute::kF32);
    gpt.SetParameters(run_->params);
    gpt.Forward(tokens.data(), nullptr, 1, T);
    std::vector<std::vector<double>> out(T, std::vector<double>(V));
    std::vector<float> logits(V);
    for (int t = 0; t < T; t++) {
      gpt.GetLogits(0, t, logits.data());
      double mx = *std::max_element(logits.begin(), logits.end()), sum = 0;
      for (float l : logits) sum += std::exp(l - mx);
      for (int v = 0; v < V; v++) out[t][v] = logits[v] - mx - std::log(sum);
    }
    return out;
  }
  // Steps until every choice finished; the events of each choice in order.
  std::vector<std::vector<GenerationEvent>> Collect(Engine& e, const std::shared_ptr<RequestHandle>& h,
                                                    int n) {
    std::vector<std::vector<GenerationEvent>> out(n);
    int finished = 0;
    for (int guard = 0; finished < n && guard < 10000; guard++) {
      e.Step();
      std::vector<GenerationEvent> events;
      h->Wait(&events, std::chrono::milliseconds(0));
      for (auto& ev : events) {
        finished += ev.finish != FinishReason::kNone;
        out.at(ev.index).push_back(std::move(ev));
      }
    }
    EXPECT_EQ(finished, n);
    return out;
  }

  static testing::TestRun* run_;
  ServeMetrics metrics_;
};
testing::TestRun* EngineChoicesTest::run_ = nullptr;

TEST_F(EngineChoicesTest, LogprobsAreTheLogSoftmaxOfTheModel) {
  auto be = MakeCpuFastBackend();
  auto engine = MakeEngine(be.get());
  GenerationRequest r;
  r.prompt = Prompt(21, 1);
  r.max_tokens = 6;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  r.logprobs = 5;
  r.prompt_logprobs = true;
  auto h = engine->Submit(r);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  auto events = Collect(*engine, *h, 1)[0];
  ASSERT_EQ(events.size(), 6u);
  std::vector<int32_t> all = r.prompt;
  for (const auto& ev : events) all.insert(all.end(), ev.tokens.begin(), ev.tokens.end());
  const auto ref = ReferenceLogSoftmax(be.get(), all);
  // prompt tokens 1..P-1, scored by the logits one position earlier
  ASSERT_TRUE(events[0].prompt_logprobs);
  const auto& plp = *events[0].prompt_logprobs;
  ASSERT_EQ(plp.size(), r.prompt.size() - 1);
  for (size_t i = 0; i < plp.size(); i++) {
    EXPECT_EQ(plp[i].token, r.prompt[i + 1]);
    EXPECT_NEAR(plp[i].logprob, ref[i][r.prompt[i + 1]], 1e-4) << "prompt position " << i + 1;
    ASSERT_EQ(plp[i].top.size(), 5u);
  }
  for (size_t k = 1; k < events.size(); k++) EXPECT_FALSE(events[k].prompt_logprobs);
  // generated tokens: greedy, so the chosen token is the best of the top list, with the same logprob
  for (size_t k = 0; k < events.size(); k++) {
    ASSERT_EQ(events[k].logprobs.size(), 1u);
    const TokenLogprob& lp = events[k].logprobs[0];
    const size_t pos = r.prompt.size() - 1 + k;
    EXPECT_EQ(lp.token, all[pos + 1]);
    EXPECT_NEAR(lp.logprob, ref[pos][lp.token], 1e-4);
    ASSERT_EQ(lp.top.size(), 5u);
    EXPECT_EQ(lp.top[0].first, lp.token);
    EXPECT_EQ(lp.top[0].second, lp.logprob);
    for (size_t j = 1; j < lp.top.size(); j++) EXPECT_LE(lp.top[j].second, lp.top[j - 1].second);
  }
}

TEST_F(EngineChoicesTest, FullVocabularyLogprobsSumToOne) {
  auto be = MakeCpuFastBackend();
  const std::vector<int32_t> prompt = Prompt(9, 2);
  const auto ref = ReferenceLogSoftmax(be.get(), prompt);
  const int V = run_->cfg.vocab_size;
  std::vector<float> logits(V);
  Gpt gpt(be.get(), run_->cfg, 1, run_->cfg.block_size, Compute::kF32);
  gpt.SetParameters(run_->params);
  gpt.Forward(prompt.data(), nullptr, 1, static_cast<int>(prompt.size()));
  gpt.GetLogits(0, static_cast<int>(prompt.size()) - 1, logits.data());
  TokenLogprob lp = ComputeLogprob(logits.data(), V, 7, V);
  ASSERT_EQ(static_cast<int>(lp.top.size()), V);
  double mass = 0;
  for (const auto& [id, l] : lp.top) mass += std::exp(static_cast<double>(l));
  EXPECT_NEAR(mass, 1.0, 1e-5);
  EXPECT_NEAR(lp.logprob, ref.back()[7], 1e-5);
}

TEST_F(EngineChoicesTest, NChoicesShareThePromptAndAreReproducible) {
  auto be = MakeCpuFastBackend();
  GenerationRequest r;
  r.prompt = Prompt(40, 3);  // 2 full blocks of 16 + 8 tokens
  r.max_tokens = 12;
  r.sampling = {1.0f, 0, 1.0f};
  r.seed = 42;
  r.ignore_eos = true;
  r.n = 3;
  auto run = [&](const GenerationRequest& req) {
    auto engine = MakeEngine(be.get());
    const uint64_t prefill0 = metrics_.prefill_tokens, prompt0 = metrics_.prompt_tokens;
    auto h = engine->Submit(req);
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    auto out = RunToCompletion(*engine, *h, req.n);
    EXPECT_EQ(engine->kv_blocks_used(), 0);
    EXPECT_EQ(engine->active(), 0);
    return std::make_tuple(out, metrics_.prefill_tokens - prefill0, metrics_.prompt_tokens - prompt0);
  };
  auto [a, prefill, prompt_tokens] = run(r);
  ASSERT_EQ(a.size(), 3u);
  for (const auto& g : a) {
    EXPECT_EQ(g.tokens.size(), 12u);
    EXPECT_EQ(g.finish, FinishReason::kLength);
  }
  EXPECT_NE(a[0].tokens, a[1].tokens);
  EXPECT_NE(a[1].tokens, a[2].tokens);
  // the prompt is prefilled once; choices 1 and 2 recompute only its last, partial block
  EXPECT_EQ(prefill, 40u + 2u * 8u);
  EXPECT_EQ(prompt_tokens, 40u);
  auto [b, prefill2, unused] = run(r);
  for (int i = 0; i < 3; i++) EXPECT_EQ(b[i].tokens, a[i].tokens) << "choice " << i;
  // choice 0 is what the same request with n = 1 gives
  GenerationRequest one = r;
  one.n = 1;
  auto [c, p3, u3] = run(one);
  EXPECT_EQ(c[0].tokens, a[0].tokens);
}

TEST_F(EngineChoicesTest, ChoicesGetThePromptLogprobsOfChoiceZero) {
  auto be = MakeCpuFastBackend();
  auto engine = MakeEngine(be.get());
  GenerationRequest r;
  r.prompt = Prompt(20, 4);
  r.max_tokens = 3;
  r.n = 2;
  r.logprobs = 0;
  r.prompt_logprobs = true;
  r.seed = 5;
  auto h = engine->Submit(r);
  ASSERT_TRUE(h.ok());
  auto events = Collect(*engine, *h, 2);
  ASSERT_TRUE(events[0][0].prompt_logprobs && events[1][0].prompt_logprobs);
  EXPECT_EQ(events[0][0].prompt_logprobs, events[1][0].prompt_logprobs);
  EXPECT_EQ(events[1][0].prompt_logprobs->size(), 19u);
  EXPECT_TRUE(events[1][0].logprobs[0].top.empty());  // logprobs = 0: the chosen token only
}

// max_tokens = 0 (echo scoring a text): the prompt is prefilled and scored, nothing is generated, and its
// logprobs are exactly those of the same request with max_tokens = 1.
TEST_F(EngineChoicesTest, MaxTokensZeroScoresThePromptOnly) {
  auto be = MakeCpuFastBackend();
  auto engine = MakeEngine(be.get());
  GenerationRequest r;
  r.prompt = Prompt(37, 7);  // 2 full blocks + 5 tokens
  r.logprobs = 3;
  r.prompt_logprobs = true;
  r.seed = 9;
  r.max_tokens = 1;
  auto h1 = engine->Submit(r);
  ASSERT_TRUE(h1.ok()) << h1.status().ToString();
  const auto one = Collect(*engine, *h1, 1)[0];
  ASSERT_TRUE(one[0].prompt_logprobs);
  const uint64_t generated0 = metrics_.generation_tokens;
  r.max_tokens = 0;
  r.n = 2;
  auto h0 = engine->Submit(r);
  ASSERT_TRUE(h0.ok()) << h0.status().ToString();
  const auto zero = Collect(*engine, *h0, 2);
  for (int i = 0; i < 2; i++) {
    ASSERT_EQ(zero[i].size(), 1u) << "choice " << i << ": one event, the last";
    const GenerationEvent& ev = zero[i][0];
    EXPECT_TRUE(ev.tokens.empty() && ev.logprobs.empty() && ev.text.empty());
    EXPECT_EQ(ev.finish, FinishReason::kLength);
    EXPECT_EQ(ev.completion_tokens, 0);
    EXPECT_EQ(ev.prompt_tokens, 37);
    ASSERT_TRUE(ev.prompt_logprobs);
    const auto& got = *ev.prompt_logprobs;
    const auto& want = *one[0].prompt_logprobs;
    ASSERT_EQ(got.size(), 36u);
    for (size_t k = 0; k < got.size(); k++) {
      EXPECT_EQ(got[k].token, want[k].token);
      EXPECT_EQ(got[k].logprob, want[k].logprob) << "prompt position " << k + 1;
      EXPECT_EQ(got[k].top, want[k].top);
    }
  }
  EXPECT_EQ(metrics_.generation_tokens, generated0);
  EXPECT_EQ(engine->kv_blocks_used(), 0);
  EXPECT_EQ(engine->active(), 0);
  // a prompt that fills the whole context can be scored; without prompt logprobs it just ends
  GenerationRequest full;
  full.prompt = Prompt(engine->max_seq_len(), 8);
  full.max_tokens = 0;
  auto hf = engine->Submit(full);
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  const auto f = Collect(*engine, *hf, 1)[0];
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].finish, FinishReason::kLength);
  EXPECT_FALSE(f[0].prompt_logprobs);
  EXPECT_EQ(engine->kv_blocks_used(), 0);
  full.max_tokens = -1;
  EXPECT_EQ(engine->Submit(full).status().code(), Status::Code::kInvalidArgument);
}

TEST_F(EngineChoicesTest, CancellingARequestEndsAllItsChoices) {
  auto be = MakeCpuFastBackend();
  auto engine = MakeEngine(be.get());
  GenerationRequest r;
  r.prompt = Prompt(100, 5);  // two prefill steps at 64 rows: the other choices are still held
  r.max_tokens = 20;
  r.n = 4;
  auto h = engine->Submit(r);
  ASSERT_TRUE(h.ok());
  engine->Step();
  EXPECT_EQ(engine->active(), 4);
  (*h)->Cancel();
  engine->Step();
  EXPECT_EQ(engine->active(), 0);
  EXPECT_EQ(engine->kv_blocks_used(), 0);
  EXPECT_EQ(metrics_.queue_length, 0);
}

TEST_F(EngineChoicesTest, BadChoicesAndLogprobsAreRefused) {
  auto be = MakeCpuFastBackend();
  auto engine = MakeEngine(be.get());
  GenerationRequest r;
  r.prompt = Prompt(5, 6);
  r.n = 0;
  EXPECT_EQ(engine->Submit(r).status().code(), Status::Code::kInvalidArgument);
  r.n = 1;
  r.logprobs = kMaxTopLogprobs + 1;
  EXPECT_EQ(engine->Submit(r).status().code(), Status::Code::kInvalidArgument);
  r.logprobs = -1;
  r.prompt_logprobs = true;
  EXPECT_EQ(engine->Submit(r).status().code(), Status::Code::kInvalidArgument);
}

// Top-p sorts only a growing head of the vocabulary; it must draw exactly what a full sort draws.
TEST(SamplerTest, TopPMatchesAFullSort) {
  const int V = 50257;
  std::mt19937_64 gen(3);
  for (float spread : {0.5f, 4.0f}) {  // a flat distribution (large nucleus) and a peaked one
    std::vector<float> logits(V);
    for (float& l : logits) l = spread * static_cast<float>(UniformDouble(gen) * 2 - 1);
    logits[17] = logits[99];  // a tie: the lower id ranks first
    for (SamplingParams p :
         {SamplingParams{1.0f, 0, 0.9f}, SamplingParams{0.7f, 0, 0.5f}, SamplingParams{1.0f, 1000, 0.8f}}) {
      std::mt19937_64 a(11), b(11);
      for (int draw = 0; draw < 20; draw++) {
        // reference: sort everything, cut the nucleus, draw with the same arithmetic
        std::vector<int32_t> ids(V);
        std::iota(ids.begin(), ids.end(), 0);
        std::sort(ids.begin(), ids.end(), [&](int32_t x, int32_t y) {
          return logits[x] > logits[y] || (logits[x] == logits[y] && x < y);
        });
        const int keep = p.top_k > 0 ? p.top_k : V;
        const float mx = logits[ids[0]];
        std::vector<double> w(keep);
        double total = 0;
        for (int i = 0; i < keep; i++) total += w[i] = std::exp((logits[ids[i]] - mx) / p.temperature);
        int cut = 0;
        double mass = 0, sum = 0;
        while (cut < keep && mass < p.top_p * total) mass += w[cut++];
        for (int i = 0; i < cut; i++) sum += w[i];
        const double r = UniformDouble(b) * sum;
        double acc = 0;
        int32_t want = ids[cut - 1];
        for (int i = 0; i < cut; i++)
          if (r < (acc += w[i])) {
            want = ids[i];
            break;
          }
        EXPECT_EQ(SampleToken(logits.data(), V, p, a), want) << "spread " << spread << ", draw " << draw;
      }
    }
  }
}

// Greedy picks the first of the largest logits, as std::max_element: ties anywhere, in the last partial
// block, and vocabularies shorter than one block.
TEST(SamplerTest, GreedyIsTheFirstLargestLogit) {
  std::mt19937_64 gen(5), rng(1);
  for (int V : {1, 7, 256, 300, 50257}) {
    for (int trial = 0; trial < 20; trial++) {
      std::vector<float> logits(V);
      for (float& l : logits) l = static_cast<float>(UniformDouble(gen) * 8 - 4);
      const int a = static_cast<int>(gen() % V), b = static_cast<int>(gen() % V);
      if (trial % 2) logits[a] = logits[b] = 5.0f;  // a tie for the maximum
      if (trial == 3) logits[V - 1] = 6.0f;         // the maximum in the last block
      const int32_t want =
          static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      EXPECT_EQ(SampleToken(logits.data(), V, SamplingParams{0.0f, 0, 1.0f}, rng), want) << "V " << V;
    }
  }
}

}  // namespace
}  // namespace tern
