// The engine's scheduling under a random mix of everything it does at once: prompts that share prefixes (the
// prefix cache), priorities that preempt, speculative drafts, n choices, seeded sampling, penalties, stop
// strings, cancellations, chunked prefill, a KV pool too small for all of them and requests arriving while
// others run. The oracle is row independence (docs/serving.md): every request that is not cancelled returns
// exactly what it returns alone on an engine of its own without speculation (tokens, text, finish, counts),
// and every block comes back.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "testing/test_run.h"

namespace tern {
namespace {

using testing::Outcome;

class EngineTortureTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { run_ = testing::MakeTestRun().release(); }
  static void TearDownTestSuite() { delete run_; }

  // max_batch sequences a step, 32 rows (long prompts are chunked), `blocks` KV blocks of 16 positions.
  std::unique_ptr<Engine> MakeEngine(Backend* be, int blocks, int speculative_tokens, ServeMetrics* metrics) {
    InferenceModelOptions mo;
    mo.num_blocks = blocks;
    mo.max_rows = 32;
    mo.max_seqs = 4;
    mo.max_logit_rows = 4 * (1 + speculative_tokens) + 8;
    EngineOptions eo;
    eo.max_batch = 4;
    eo.max_batch_tokens = 32;
    eo.max_queue = 256;
    eo.speculative.num_tokens = speculative_tokens;
    eo.speculative.lookup_min = 1;
    return std::make_unique<Engine>(InferenceModel::Create(be, run_->cfg, run_->params, mo).value(),
                                    run_->tok.get(), eo, metrics);
  }

  // A request drawn at random: a prompt starting with one of three shared documents (or not), some of them
  // repetitive (lookup drafts), at most 96 positions in all (6 blocks, so each fits the pool alone).
  GenerationRequest Draw(std::mt19937& rng, const std::vector<std::vector<int32_t>>& documents) {
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    const int V = run_->cfg.vocab_size;
    GenerationRequest r;
    const int doc = uniform(-1, 2);
    if (doc >= 0) r.prompt.assign(documents[doc].begin(), documents[doc].begin() + uniform(8, 40));
    const int tail = uniform(1, 16), period = uniform(2, 5), salt = uniform(0, 99);
    for (int i = 0; i < tail; i++) r.prompt.push_back(3 + ((i % period) * 37 + salt) % (V - 3));
    r.max_tokens = uniform(1, 96 - static_cast<int>(r.prompt.size()));
    r.priority = std::vector<int>{-1, 0, 0, 5}[uniform(0, 3)];
    r.n = uniform(0, 4) == 0 ? 2 : 1;
    if (uniform(0, 1)) {
      r.sampling.temperature = 0.0f;
    } else {
      r.sampling.temperature = 0.8f;
      r.sampling.top_k = uniform(0, 40);
      r.seed = rng();
    }
    if (uniform(0, 4) == 0) r.frequency_penalty = 0.5f;
    if (uniform(0, 5) == 0)
      if (std::string stop = run_->tok->Decode({r.prompt.back()}); !stop.empty()) r.stop = {stop};
    r.ignore_eos = uniform(0, 1);
    return r;
  }

  static testing::TestRun* run_;
};
testing::TestRun* EngineTortureTest::run_ = nullptr;

// One outcome per choice, whatever the interleaving of the events.
using Choices = std::vector<Outcome>;

void Collect(RequestHandle& h, Choices* out, int* finished) {
  std::vector<GenerationEvent> events;
  h.Wait(&events, std::chrono::milliseconds(0));
  for (auto& e : events) {
    Outcome& o = (*out)[e.index];
    o.tokens.insert(o.tokens.end(), e.tokens.begin(), e.tokens.end());
    o.text += e.text;
    if (e.finish != FinishReason::kNone) {
      o.finish = e.finish;
      o.prompt_tokens = e.prompt_tokens;
      o.completion_tokens = e.completion_tokens;
      ++*finished;
    }
  }
}

TEST_F(EngineTortureTest, EveryRequestReturnsWhatItWouldAlone) {
  auto be = MakeCpuFastBackend();
  uint64_t preemptions = 0, accepted = 0, cancelled = 0, compared = 0;
  for (uint32_t seed = 1; seed <= 4; seed++) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    std::vector<std::vector<int32_t>> documents(3);
    for (int d = 0; d < 3; d++)
      for (int i = 0; i < 40; i++) documents[d].push_back(3 + (i * 11 + d * 101 + (i / 7) * 5) % 200);
    const int count = 24;
    std::vector<GenerationRequest> requests;
    std::vector<int> arrival;
    for (int i = 0; i < count; i++) {
      requests.push_back(Draw(rng, documents));
      arrival.push_back(std::uniform_int_distribution<int>(0, 60)(rng));
    }
    ServeMetrics metrics;
    auto engine = MakeEngine(be.get(), /*blocks=*/14, /*speculative_tokens=*/seed % 2 ? 3 : 0, &metrics);
    std::vector<std::shared_ptr<RequestHandle>> handles(count);
    std::vector<Choices> got(count);
    std::vector<int> finished(count, 0);
    std::vector<bool> cancel(count, false);
    int done = 0;
    for (int step = 0; done < count && step < 20000; step++) {
      for (int i = 0; i < count; i++)
        if (arrival[i] == step) {
          auto h = engine->Submit(requests[i]);
          ASSERT_TRUE(h.ok()) << h.status().ToString();
          handles[i] = *h;
          got[i].resize(requests[i].n);
        }
      // Now and then a client leaves.
      if (std::uniform_int_distribution<int>(0, 40)(rng) == 0) {
        const int i = std::uniform_int_distribution<int>(0, count - 1)(rng);
        if (handles[i] && finished[i] < requests[i].n) {
          handles[i]->Cancel();
          cancel[i] = true;
        }
      }
      engine->Step();
      done = 0;
      for (int i = 0; i < count; i++) {
        if (handles[i]) Collect(*handles[i], &got[i], &finished[i]);
        done += handles[i] && finished[i] == requests[i].n;
      }
    }
    ASSERT_EQ(done, count);
    EXPECT_EQ(engine->kv_blocks_used(), 0);
    EXPECT_EQ(engine->active(), 0);
    preemptions += metrics.preemptions;
    accepted += metrics.spec_accepted_tokens;
    for (int i = 0; i < count; i++) {
      if (cancel[i]) {
        cancelled++;
        continue;
      }
      ServeMetrics alone_metrics;
      auto alone = MakeEngine(be.get(), /*blocks=*/64, 0, &alone_metrics);
      auto h = alone->Submit(requests[i]);
      ASSERT_TRUE(h.ok());
      Choices want(requests[i].n);
      int f = 0;
      for (int guard = 0; f < requests[i].n && guard < 10000; guard++) {
        alone->Step();
        Collect(**h, &want, &f);
      }
      for (int c = 0; c < requests[i].n; c++) {
        SCOPED_TRACE("request " + std::to_string(i) + " choice " + std::to_string(c));
        EXPECT_EQ(got[i][c].tokens, want[c].tokens);
        EXPECT_EQ(got[i][c].text, want[c].text);
        EXPECT_EQ(got[i][c].finish, want[c].finish);
        EXPECT_EQ(got[i][c].completion_tokens, want[c].completion_tokens);
        EXPECT_EQ(got[i][c].prompt_tokens, want[c].prompt_tokens);
        compared++;
      }
    }
  }
  // The mix did what it is for: some requests were preempted, some drafts kept, some clients left.
  EXPECT_GT(preemptions, 0u);
  EXPECT_GT(accepted, 0u);
  EXPECT_GT(cancelled, 0u);
  EXPECT_GT(compared, 60u);
  std::printf("torture: %llu choices compared, %llu preemptions, %llu draft tokens kept, %llu cancelled\n",
              static_cast<unsigned long long>(compared), static_cast<unsigned long long>(preemptions),
              static_cast<unsigned long long>(accepted), static_cast<unsigned long long>(cancelled));
}

}  // namespace
}  // namespace tern
