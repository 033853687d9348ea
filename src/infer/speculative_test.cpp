// Speculative decoding by prompt lookup: the proposer, and the engine's promise that speculation changes
// how many forwards a request takes, never what it returns (tokens, text, logprobs, finish), in every weight
// and KV format, for greedy and seeded sampling, penalties, JSON, n choices and stop strings.
#include <gtest/gtest.h>

#include "infer/speculative.h"
#include "testing/ops.h"
#include "testing/test_run.h"

namespace tern {
namespace {

std::vector<int32_t> Propose(const std::vector<int32_t>& t, int lo, int hi, int k) {
  std::vector<int32_t> d = {99};  // replaced
  ProposeByLookup(t.data(), static_cast<int>(t.size()), lo, hi, k, &d);
  return d;
}

TEST(ProposeByLookup, ProposesWhatFollowedTheLatestOccurrenceOfTheLongestSuffix) {
  // The suffix (7, 8) occurs at 1 and 5; the latest one was followed by 4, 5.
  EXPECT_EQ(Propose({6, 7, 8, 1, 2, 7, 8, 4, 5, 7, 8}, 1, 4, 2), (std::vector<int32_t>{4, 5}));
  // (1, 7, 8) is longer and only matches at 0: its continuation wins over the two-token match's.
  EXPECT_EQ(Propose({1, 7, 8, 3, 9, 7, 8, 4, 1, 7, 8}, 1, 4, 3), (std::vector<int32_t>{3, 9, 7}));
  // Fewer tokens follow the match than asked: the draft continues the repeat (a loop of period 3).
  EXPECT_EQ(Propose({1, 2, 3, 1, 2, 3}, 2, 4, 5), (std::vector<int32_t>{1, 2, 3, 1, 2}));
  EXPECT_EQ(Propose({5, 5, 5}, 1, 4, 3), (std::vector<int32_t>{5, 5, 5}));
}

TEST(ProposeByLookup, NothingWithoutAMatchOfAtLeastTheMinimum) {
  EXPECT_TRUE(Propose({1, 2, 3, 4, 5}, 1, 4, 3).empty());
  EXPECT_TRUE(Propose({1, 2, 9, 4, 2}, 2, 4, 3).empty());  // only the last token matches
  EXPECT_EQ(Propose({1, 2, 9, 4, 2}, 1, 4, 3), (std::vector<int32_t>{9, 4, 2}));
  EXPECT_TRUE(Propose({1, 2, 1, 2}, 1, 4, 0).empty());  // no room
  EXPECT_TRUE(Propose({7}, 1, 4, 3).empty());
  EXPECT_EQ(Propose({1, 2, 1, 2}, 1, 4, 1), (std::vector<int32_t>{1}));
}

// Everything a client receives of one choice.
struct Received {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<std::vector<std::pair<int32_t, float>>> top;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  int completion_tokens = 0, cached_tokens = 0;
  bool operator==(const Received&) const = default;
};

class SpeculativeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { run_ = testing::MakeTestRun().release(); }
  static void TearDownTestSuite() { delete run_; }

  std::unique_ptr<Engine> MakeEngine(Backend* be, Quantize q, DType kv, int num_tokens, int max_batch = 8,
                                     int spec_max_batch = 0) {
    InferenceModelOptions mo;
    mo.quantize = q;
    mo.kv_dtype = kv;
    mo.num_blocks = 160;
    mo.max_rows = 64;
    mo.max_seqs = max_batch;
    mo.max_logit_rows = max_batch * (1 + num_tokens) + 16;
    EngineOptions eo;
    eo.max_batch = max_batch;
    eo.max_batch_tokens = 64;
    eo.speculative.num_tokens = num_tokens;
    eo.speculative.lookup_min = 1;
    eo.speculative.max_batch = spec_max_batch;
    return std::make_unique<Engine>(InferenceModel::Create(be, run_->cfg, run_->params, mo).value(),
                                    run_->tok.get(), eo, &metrics_);
  }

  // A prompt that repeats a phrase, as a prompt quoting a document the answer copies from.
  std::vector<int32_t> Repetitive(int salt) {
    std::vector<int32_t> phrase;
    for (int i = 0; i < 5 + salt % 3; i++)
      phrase.push_back(3 + (i * 31 + salt * 17) % (run_->cfg.vocab_size - 3));
    std::vector<int32_t> p;
    for (int r = 0; r < 4; r++) p.insert(p.end(), phrase.begin(), phrase.end());
    return p;
  }

  std::vector<GenerationRequest> Requests() {
    std::vector<GenerationRequest> reqs;
    for (int i = 0; i < 8; i++) {
      GenerationRequest r;
      r.prompt = Repetitive(i);
      r.max_tokens = 24 + 5 * i;
      r.ignore_eos = true;
      r.sampling.temperature = 0.0f;
      r.seed = 100 + i;
      switch (i) {
        case 1:  // seeded sampling
          r.sampling.temperature = 0.7f;
          r.sampling.top_k = 20;
          break;
        case 2:  // logprobs with alternatives
          r.logprobs = 3;
          break;
        case 3:  // penalties change the distribution with every token kept
          r.frequency_penalty = 0.4f;
          r.presence_penalty = 0.3f;
          r.logit_bias = {{5, 2.0f}};
          break;
        case 4:  // choices, sampled
          r.n = 3;
          r.sampling.temperature = 1.0f;
          r.sampling.top_p = 0.9f;
          r.logprobs = 0;
          break;
        case 5:  // stops at the first newline or at the end-of-text token
          r.stop = {"\n"};
          r.ignore_eos = false;
          break;
        case 6:
          r.json_object = true;
          r.max_tokens = 40;
          break;
        case 7:  // the draft is cut at the last token the reservation holds
          r.max_tokens = 2;
          break;
      }
      reqs.push_back(r);
    }
    return reqs;
  }

  std::vector<std::vector<Received>> RunAll(Engine& e, const std::vector<GenerationRequest>& reqs) {
    std::vector<std::shared_ptr<RequestHandle>> handles;
    std::vector<std::vector<Received>> out;
    for (const auto& r : reqs) {
      auto h = e.Submit(r);
      EXPECT_TRUE(h.ok()) << h.status().ToString();
      handles.push_back(h.value());
      out.emplace_back(r.n);
    }
    size_t open = 0;
    for (const auto& r : reqs) open += r.n;
    for (int guard = 0; open > 0 && guard < 100000; guard++) {
      e.Step();
      for (size_t i = 0; i < handles.size(); i++) {
        std::vector<GenerationEvent> events;
        handles[i]->Wait(&events, std::chrono::milliseconds(0));
        for (auto& ev : events) {
          Received& c = out[i][ev.index];
          c.tokens.insert(c.tokens.end(), ev.tokens.begin(), ev.tokens.end());
          for (const auto& lp : ev.logprobs) {
            c.logprobs.push_back(lp.logprob);
            c.top.push_back(lp.top);
          }
          c.text += ev.text;
          if (ev.finish != FinishReason::kNone) {
            c.finish = ev.finish;
            c.completion_tokens = ev.completion_tokens;
            c.cached_tokens = ev.cached_tokens;
            open--;
          }
        }
      }
    }
    EXPECT_EQ(open, 0u);
    EXPECT_EQ(e.kv_blocks_used(), 0);
    EXPECT_EQ(e.active(), 0);
    return out;
  }

  static testing::TestRun* run_;
  ServeMetrics metrics_;
};
testing::TestRun* SpeculativeTest::run_ = nullptr;

TEST_F(SpeculativeTest, SameOutputInFewerForwardsInEveryFormat) {
  for (auto [q, kv] : {std::pair{Quantize::kNone, DType::kF32}, std::pair{Quantize::kBF16, DType::kBF16},
                       std::pair{Quantize::kInt8, DType::kI8}, std::pair{Quantize::kInt4, DType::kBF16}}) {
    SCOPED_TRACE(std::string(QuantizeName(q)) + " KV " + KvDtypeName(kv));
    auto be = MakeCpuFastBackend();
    if (q == Quantize::kInt4 && !be->capabilities().int4_weights) {
      std::printf("int4 not run: this CPU has no AVX-512 VNNI\n");
      continue;
    }
    const auto reqs = Requests();
    metrics_.forward_steps = 0;
    auto plain = MakeEngine(be.get(), q, kv, 0);
    const auto expected = RunAll(*plain, reqs);
    const uint64_t plain_steps = metrics_.forward_steps;
    EXPECT_EQ(metrics_.spec_drafts, 0u);

    metrics_.forward_steps = 0;
    auto spec = MakeEngine(be.get(), q, kv, 4);
    const auto got = RunAll(*spec, reqs);
    for (size_t i = 0; i < reqs.size(); i++)
      for (int c = 0; c < reqs[i].n; c++) {
        EXPECT_EQ(got[i][c], expected[i][c]) << "request " << i << " choice " << c;
        EXPECT_EQ(got[i][c].tokens.size(), static_cast<size_t>(got[i][c].completion_tokens));
      }
    EXPECT_EQ(expected[0][0].completion_tokens, reqs[0].max_tokens);
    EXPECT_EQ(expected[7][0].completion_tokens, 2);
    // The random model falls into loops that lookup predicts: most draft tokens are confirmed, and every
    // confirmed one is a forward the engine did not run.
    EXPECT_GT(metrics_.spec_drafts, 0u);
    EXPECT_GT(metrics_.spec_accepted_tokens * 2, metrics_.spec_draft_tokens);
    EXPECT_LT(metrics_.forward_steps, plain_steps);
    std::printf("%s: %llu forwards without speculation, %llu with; %llu of %llu draft tokens accepted\n",
                QuantizeName(q), static_cast<unsigned long long>(plain_steps),
                static_cast<unsigned long long>(metrics_.forward_steps.load()),
                static_cast<unsigned long long>(metrics_.spec_accepted_tokens.load()),
                static_cast<unsigned long long>(metrics_.spec_draft_tokens.load()));
    metrics_.spec_drafts = metrics_.spec_draft_tokens = metrics_.spec_accepted_tokens = 0;
  }
}

// The blocks a drafted sequence filled reach the prefix cache as a plain decode's do: a second request
// with the first one's prompt and completion as its prompt finds the same cached tokens either way.
TEST_F(SpeculativeTest, ConfirmedDraftsArePublishedToThePrefixCache) {
  auto be = MakeCpuFastBackend();
  std::vector<int> cached;
  for (int k : {0, 4}) {
    auto e = MakeEngine(be.get(), Quantize::kNone, DType::kF32, k);
    GenerationRequest r = Requests()[0];
    r.max_tokens = 40;
    const auto first = RunAll(*e, {r});
    GenerationRequest again = r;
    again.prompt.insert(again.prompt.end(), first[0][0].tokens.begin(), first[0][0].tokens.end());
    again.max_tokens = 4;
    cached.push_back(RunAll(*e, {again})[0][0].cached_tokens);
  }
  EXPECT_EQ(cached[1], cached[0]);
  EXPECT_GE(cached[0], 48);  // 20 prompt + 40 generated tokens, of which all but the last are in the cache
}

// vLLM's disable_by_batch_size: a batch of more decoding sequences than the limit drafts nothing.
TEST_F(SpeculativeTest, NoDraftsAboveTheBatchLimit) {
  auto be = MakeCpuFastBackend();
  auto e = MakeEngine(be.get(), Quantize::kNone, DType::kF32, 4, 8, /*spec_max_batch=*/2);
  std::vector<GenerationRequest> reqs(3, Requests()[0]);
  RunAll(*e, reqs);  // the same prompt and length: the three decode side by side to the end
  EXPECT_EQ(metrics_.spec_drafts, 0u);
  RunAll(*e, {Requests()[0]});
  EXPECT_GT(metrics_.spec_drafts, 0u);
}

// Drafts leave room for prompts: with 5 rows a step, a drafting stream (1 + 4 rows) would leave none for a
// waiting request's prompt; it takes at most half of what its decode row leaves, so the new request starts at
// once and streams beside it.
TEST_F(SpeculativeTest, DraftsLeaveRowsForWaitingPrompts) {
  auto be = MakeCpuFastBackend();
  InferenceModelOptions mo;
  mo.num_blocks = 64;
  mo.max_rows = 5;
  mo.max_seqs = 2;
  mo.max_logit_rows = 16;
  EngineOptions eo;
  eo.max_batch = 2;
  eo.max_batch_tokens = 5;
  eo.speculative.num_tokens = 4;
  eo.speculative.lookup_min = 1;
  Engine e(InferenceModel::Create(be.get(), run_->cfg, run_->params, mo).value(), run_->tok.get(), eo,
           &metrics_);
  GenerationRequest loop = Requests()[0];
  loop.max_tokens = 100;
  auto first = e.Submit(loop).value();
  for (int i = 0; i < 8; i++) e.Step();  // decoding and drafting
  ASSERT_GT(metrics_.spec_drafts, 0u);
  GenerationRequest next = Requests()[1];
  next.max_tokens = 4;
  auto second = e.Submit(next).value();
  std::vector<GenerationEvent> events;
  bool first_done = false;
  int steps = 0;
  for (; steps < 1000; steps++) {
    e.Step();
    events.clear();
    first->Wait(&events, std::chrono::milliseconds(0));
    for (const auto& ev : events) first_done = first_done || ev.finish != FinishReason::kNone;
    events.clear();
    second->Wait(&events, std::chrono::milliseconds(0));
    if (std::any_of(events.begin(), events.end(),
                    [](const auto& ev) { return ev.finish != FinishReason::kNone; }))
      break;
  }
  EXPECT_FALSE(first_done) << "the second request waited for the first to end";
  EXPECT_LT(steps, 20);
}

}  // namespace
}  // namespace tern
