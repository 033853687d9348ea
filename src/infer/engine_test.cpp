// The inference model against the training model (an independent forward), and the engine's promises:
// batching invariance, seeded reproducibility, the prefix cache, cancellation, admission control, stop
// strings.
#include <gtest/gtest.h>

#include "infer/text_stream.h"
#include "model/gpt.h"
#include "testing/ops.h"
#include "testing/test_run.h"

namespace tern {
namespace {

using testing::MakeTestRun;
using testing::Outcome;
using testing::RunToEnd;

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { run_ = MakeTestRun().release(); }
  static void TearDownTestSuite() { delete run_; }

  std::unique_ptr<Engine> MakeEngine(Backend* be, Quantize q = Quantize::kNone, int max_batch_tokens = 64,
                                     int num_blocks = 128, int max_queue = 64, DType kv_dtype = DType::kF32,
                                     bool priority_preemption = true) {
    InferenceModelOptions mo;
    mo.quantize = q;
    mo.kv_dtype = kv_dtype;
    mo.num_blocks = num_blocks;
    mo.max_rows = max_batch_tokens;
    mo.max_seqs = 8;
    auto model = InferenceModel::Create(be, run_->cfg, run_->params, mo);
    EXPECT_TRUE(model.ok()) << model.status().ToString();
    EngineOptions eo;
    eo.max_batch = 8;
    eo.max_batch_tokens = max_batch_tokens;
    eo.max_queue = max_queue;
    eo.priority_preemption = priority_preemption;
    return std::make_unique<Engine>(std::move(model).value(), run_->tok.get(), eo, &metrics_);
  }
  std::vector<int32_t> Prompt(int n, int salt) {
    std::vector<int32_t> p;
    for (int i = 0; i < n; i++) p.push_back(3 + (i * 7 + salt * 13) % (run_->cfg.vocab_size - 3));
    return p;
  }
  static GenerationRequest Greedy(std::vector<int32_t> prompt, int max_tokens) {
    GenerationRequest r;
    r.prompt = std::move(prompt);
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0.0f;
    r.ignore_eos = true;
    return r;
  }
  static std::shared_ptr<RequestHandle> Submit(Engine& e, GenerationRequest r) {
    auto h = e.Submit(std::move(r));
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    return h.ok() ? h.value() : nullptr;
  }

  static testing::TestRun* run_;
  ServeMetrics metrics_;
};
testing::TestRun* EngineTest::run_ = nullptr;

// Chunked prefill plus decode steps give the logits of a full-context forward of the training model.
TEST_F(EngineTest, LogitsMatchTheTrainingModel) {
  auto be = MakeCpuFastBackend();
  const GptConfig& cfg = run_->cfg;
  const int V = cfg.vocab_size, bs = 16;
  InferenceModelOptions mo;
  mo.num_blocks = 8;
  mo.max_rows = 32;
  mo.max_seqs = 2;
  auto model = InferenceModel::Create(be.get(), cfg, run_->params, mo).value();
  Gpt gpt(be.get(), cfg, 1, cfg.block_size, Compute::kF32);
  gpt.SetParameters(run_->params);
  std::vector<int32_t> tokens = Prompt(40, 1);
  std::vector<int32_t> table = {5, 2, 7};  // any blocks, in any order
  std::vector<float> got(V), want(V);
  ForwardBatch b;
  // prompt in chunks of 30 and 7, then 3 single-token steps
  int done = 0;
  for (int n : {30, 7, 1, 1, 1}) {
    b.Clear();
    for (int p = done; p < done + n; p++) {
      b.tokens.push_back(tokens[p]);
      b.positions.push_back(p);
      b.slots.push_back(table[p / bs] * bs + p % bs);
    }
    b.seqs = {0, n, done + n};
    b.block_tables.assign(model->max_blocks_per_seq(), 0);
    std::copy(table.begin(), table.end(), b.block_tables.begin());
    b.logit_rows = {n - 1};
    const float* logits = model->Forward(b);
    got.assign(logits, logits + got.size());
    done += n;
    gpt.Forward(tokens.data(), nullptr, 1, done);
    gpt.GetLogits(0, done - 1, want.data());
    testing::ExpectClose(got, want, 1e-4, 1e-5, "logits after " + std::to_string(done) + " tokens");
  }
}

// With bf16 weights the device holds no fp32 copy of them: bf16 matmul weights and token table, fp32 for the
// rest only. int8 keeps the fp32 token table (its embedding reads it) and drops the fp32 matmul weights.
TEST_F(EngineTest, Bf16Int8AndInt4ModelsHoldNoFp32CopyOfTheirWeights) {
  auto be = MakeCpuFastBackend();
  size_t matmul = 0, wte = 0;
  for (const auto& t : GptParamLayout(run_->cfg)) {
    if (t.name == "qkvw" || t.name == "attprojw" || t.name == "fcw" || t.name == "fcprojw") matmul += t.numel;
    if (t.name == "wte") wte = t.numel;
  }
  const size_t total = run_->params.size(), rest = total - matmul - wte;
  auto bytes = [&](Quantize q) {
    InferenceModelOptions mo;
    mo.quantize = q;
    mo.num_blocks = 4;
    return InferenceModel::Create(be.get(), run_->cfg, run_->params, mo).value()->param_bytes();
  };
  EXPECT_EQ(bytes(Quantize::kNone), total * 4);
  EXPECT_EQ(bytes(Quantize::kBF16), (matmul + wte) * 2 + rest * 4);
  // int8: the matmul weights and the LM head packed (a byte each, plus fp32 row scales and padding), the
  // fp32 token table for the embedding, fp32 for the rest.
  const size_t int8 = bytes(Quantize::kInt8), floor = (rest + wte) * 4 + matmul + wte;
  EXPECT_GE(int8, floor);
  EXPECT_LT(int8, floor + (matmul + wte) / 4);
  // int4: the same with a nibble a weight and an fp32 scale per 64 (4.5 bits; channels padded to 16).
  if (be->capabilities().int4_weights) {
    const size_t int4 = bytes(Quantize::kInt4), floor4 = (rest + wte) * 4 + (matmul + wte) * 9 / 16;
    EXPECT_GE(int4, floor4);
    EXPECT_LT(int4, floor4 + (matmul + wte) / 16);
  }
}

TEST_F(EngineTest, GreedyIsTheSameAloneOrBatchedWithSevenOthers) {
  for (auto [q, kv] : {std::pair{Quantize::kNone, DType::kF32}, std::pair{Quantize::kNone, DType::kBF16},
                       std::pair{Quantize::kBF16, DType::kBF16}, std::pair{Quantize::kInt8, DType::kBF16},
                       std::pair{Quantize::kInt8, DType::kI8}, std::pair{Quantize::kInt4, DType::kBF16}}) {
    auto be = MakeCpuFastBackend();
    if (q == Quantize::kInt4 && !be->capabilities().int4_weights) {
      std::printf("int4 not run: this CPU has no AVX-512 VNNI\n");
      continue;
    }
    std::vector<GenerationRequest> reqs;
    for (int i = 0; i < 8; i++) reqs.push_back(Greedy(Prompt(3 + 11 * i, i), 20 + 3 * i));
    std::vector<Outcome> alone;
    for (const auto& r : reqs) {
      auto engine = MakeEngine(be.get(), q, 64, 128, 64, kv);
      alone.push_back(RunToEnd(*engine, {Submit(*engine, r)})[0]);
    }
    // Batched: small token budget, so prompts are chunked and mixed with other sequences' decode rows.
    auto engine = MakeEngine(be.get(), q, /*max_batch_tokens=*/24, 128, 64, kv);
    std::vector<std::shared_ptr<RequestHandle>> handles;
    for (const auto& r : reqs) handles.push_back(Submit(*engine, r));
    auto batched = RunToEnd(*engine, handles);
    for (int i = 0; i < 8; i++) {
      EXPECT_EQ(batched[i].tokens, alone[i].tokens)
          << QuantizeName(q) << " KV " << KvDtypeName(kv) << " request " << i;
      EXPECT_EQ(batched[i].text, alone[i].text);
      EXPECT_EQ(batched[i].finish, FinishReason::kLength);
      EXPECT_EQ(batched[i].completion_tokens, reqs[i].max_tokens);
    }
    EXPECT_EQ(engine->kv_blocks_used(), 0);
    EXPECT_EQ(engine->active(), 0);
  }
}

// OpenAI's arithmetic: logit -= frequency_penalty * count + presence_penalty * (count > 0), plus the bias.
TEST(AdjustLogits, PenaltiesCountGeneratedTokensAndBiasAdds) {
  GenerationRequest r;
  r.frequency_penalty = 0.5f;
  r.presence_penalty = 1.0f;
  r.logit_bias = {{5, 3.0f}, {1, -100.0f}};
  std::vector<float> logits(8, 10.0f);
  const std::vector<int32_t> generated = {3, 5, 3, 3};
  AdjustLogits(r, generated.data(), static_cast<int>(generated.size()), logits.data());
  EXPECT_EQ(logits, (std::vector<float>{10.0f, -90.0f, 10.0f, 10.0f - 1.5f - 1.0f, 10.0f,
                                        10.0f - 0.5f - 1.0f + 3.0f, 10.0f, 10.0f}));
}

TEST_F(EngineTest, LogitBiasAndPenaltiesSteerSamplingNotLogprobs) {
  auto be = MakeCpuFastBackend();
  auto engine = MakeEngine(be.get());
  GenerationRequest plain = Greedy(Prompt(12, 4), 24);
  plain.logprobs = 0;
  const Outcome base = RunToEnd(*engine, {Submit(*engine, plain)})[0];
  // +100 on one token: greedy picks it every time; the logprobs reported are still the model's own
  GenerationRequest forced = plain;
  const int32_t x = base.tokens[0] == 7 ? 8 : 7;
  forced.logit_bias = {{x, 100.0f}};
  auto h = Submit(*engine, forced);
  std::vector<GenerationEvent> events;
  while (events.empty() || events.back().finish == FinishReason::kNone) {
    engine->Step();
    h->Wait(&events, std::chrono::milliseconds(0));
  }
  int generated = 0;
  for (const auto& e : events)
    for (size_t i = 0; i < e.tokens.size(); i++, generated++) {
      EXPECT_EQ(e.tokens[i], x);
      EXPECT_LT(e.logprobs[i].logprob, -0.1f) << "the model's logprob, not the biased one (about 0)";
    }
  EXPECT_EQ(generated, plain.max_tokens);
  // -100 on greedy's first choice: another token comes first
  GenerationRequest avoid = plain;
  avoid.logit_bias = {{base.tokens[0], -100.0f}};
  EXPECT_NE(RunToEnd(*engine, {Submit(*engine, avoid)})[0].tokens[0], base.tokens[0]);
  // a frequency penalty changes a greedy text that repeats tokens
  std::vector<int32_t> sorted = base.tokens;
  std::sort(sorted.begin(), sorted.end());
  ASSERT_NE(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << "greedy output repeats";
  GenerationRequest penalised = plain;
  penalised.frequency_penalty = 2.0f;
  penalised.presence_penalty = 2.0f;
  EXPECT_NE(RunToEnd(*engine, {Submit(*engine, penalised)})[0].tokens, base.tokens);
  // a bias on a token outside the vocabulary is refused
  GenerationRequest bad = plain;
  bad.logit_bias = {{run_->cfg.vocab_size, 1.0f}};
  EXPECT_FALSE(engine->Submit(bad).ok());
}

TEST_F(EngineTest, SeededSamplingIsReproducible) {
  auto be = MakeCpuFastBackend();
  GenerationRequest r = Greedy(Prompt(10, 3), 30);
  r.sampling = {1.0f, 50, 0.95f};
  r.seed = 1234;
  auto engine = MakeEngine(be.get());
  auto a = RunToEnd(*engine, {Submit(*engine, r)})[0];
  // again, now sharing the batch with other requests
  GenerationRequest other = r;
  other.seed = 99;
  auto both = RunToEnd(
      *engine, {Submit(*engine, other), Submit(*engine, r), Submit(*engine, Greedy(Prompt(5, 9), 9))});
  EXPECT_EQ(both[1].tokens, a.tokens);
  EXPECT_NE(both[0].tokens, a.tokens);
}

TEST_F(EngineTest, PrefixCacheSkipsTheSharedPrefillAndKeepsTheOutput) {
  auto be = MakeCpuFastBackend();
  auto engine = MakeEngine(be.get());
  auto prompt = Prompt(50, 4);  // 3 full blocks of 16
  auto first = RunToEnd(*engine, {Submit(*engine, Greedy(prompt, 12))})[0];
  const uint64_t prefill_before = metrics_.prefill_tokens, hits_before = metrics_.prefix_cache_hits;
  auto second = RunToEnd(*engine, {Submit(*engine, Greedy(prompt, 12))})[0];
  EXPECT_EQ(second.tokens, first.tokens);
  EXPECT_EQ(second.cached_tokens, 48);
  EXPECT_EQ(metrics_.prefill_tokens - prefill_before, 2u);
  EXPECT_EQ(metrics_.prefix_cache_hits - hits_before, 3u);
  // A prompt that is exactly whole blocks still computes its last block (its last token gives the logits).
  auto exact = RunToEnd(
      *engine, {Submit(*engine, Greedy(std::vector<int32_t>(prompt.begin(), prompt.begin() + 32), 4))})[0];
  EXPECT_EQ(exact.cached_tokens, 16);
  EXPECT_EQ(engine->kv_blocks_used(), 0);
}

TEST_F(EngineTest, CancelledRequestsFreeTheirBlocksAtOnce) {
  auto be = MakeCpuFastBackend();
  auto engine = MakeEngine(be.get());
  auto keep = Submit(*engine, Greedy(Prompt(20, 5), 40));
  auto gone = Submit(*engine, Greedy(Prompt(30, 6), 40));
  auto queued = Submit(*engine, Greedy(Prompt(30, 7), 40));
  for (int i = 0; i < 5; i++) engine->Step();
  EXPECT_GT(engine->kv_blocks_used(), 0);
  gone->Cancel();
  queued->Cancel();
  engine->Step();
  std::vector<GenerationEvent> events;
  gone->Wait(&events, std::chrono::milliseconds(0));
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().finish, FinishReason::kCancelled);
  auto rest = RunToEnd(*engine, {keep});
  EXPECT_EQ(rest[0].finish, FinishReason::kLength);
  EXPECT_EQ(engine->kv_blocks_used(), 0);
  EXPECT_EQ(engine->active(), 0);
}

// Priority (vLLM's): with room for one request at a time, the waiting ones are admitted lowest value first,
// in arrival order within a value. The one running (value 3) is preempted by the -2 one and runs again before
// the 5s; without preemption it runs to its end first.
TEST_F(EngineTest, WaitingRequestsAreAdmittedByPriorityThenArrival) {
  for (bool preemption : {true, false}) {
    auto be = MakeCpuFastBackend();
    auto engine = MakeEngine(be.get(), Quantize::kNone, 64, /*num_blocks=*/6, 64, DType::kF32,
                             preemption);  // 4 blocks a request: one at a time
    auto request = [&](int salt, int priority) {
      GenerationRequest r = Greedy(Prompt(20, salt), 44);  // 20 + 44 - 1 positions: 4 blocks of 16
      r.priority = priority;
      return Submit(*engine, r);
    };
    std::vector<std::shared_ptr<RequestHandle>> handles = {request(0, 3)};
    engine->Step();  // the first is running
    engine->Step();  // and decoding
    for (const auto& [salt, priority] :
         std::vector<std::pair<int, int>>{{1, 5}, {2, 5}, {3, 0}, {4, -2}, {5, 0}})
      handles.push_back(request(salt, priority));
    std::vector<int> finished;
    for (int guard = 0; finished.size() < handles.size() && guard < 10000; guard++) {
      engine->Step();
      for (size_t i = 0; i < handles.size(); i++) {
        std::vector<GenerationEvent> events;
        handles[i]->Wait(&events, std::chrono::milliseconds(0));
        for (const auto& e : events)
          if (e.finish != FinishReason::kNone) finished.push_back(static_cast<int>(i));
      }
    }
    EXPECT_EQ(finished,
              preemption ? (std::vector<int>{4, 3, 5, 0, 1, 2}) : (std::vector<int>{0, 4, 3, 5, 1, 2}));
  }
}

// A preempted sequence is computed again from its prompt and generated tokens (most of them from the prefix
// cache) and goes on with the same generator: its tokens, text and counts are those of a run alone, greedy
// or sampled, whether the batch or the KV pool was what made room short.
TEST_F(EngineTest, PreemptedSequencesReturnWhatTheyWouldHaveAlone) {
  auto be = MakeCpuFastBackend();
  auto low = [&](int salt) {
    GenerationRequest r = Greedy(Prompt(37, salt), 40);
    r.priority = 10;
    if (salt % 2) {
      r.sampling.temperature = 0.9f;
      r.seed = 40 + salt;
    }
    return r;
  };
  GenerationRequest high = Greedy(Prompt(20, 9), 30);
  std::vector<Outcome> alone;
  for (int salt : {1, 2}) {
    auto e = MakeEngine(be.get());
    alone.push_back(RunToEnd(*e, {Submit(*e, low(salt))})[0]);
  }
  // KV bound: 5 blocks of 16 a low request (37 + 40 - 1 positions), 4 for the high one, 11 in all. Batch
  // bound: blocks enough, 2 sequences a step.
  for (auto [num_blocks, max_batch] : {std::pair{11, 8}, std::pair{128, 2}}) {
    SCOPED_TRACE(max_batch == 2 ? "batch bound" : "KV bound");
    metrics_.preemptions = 0;
    InferenceModelOptions mo;
    mo.num_blocks = num_blocks;
    mo.max_rows = 64;
    mo.max_seqs = max_batch;
    EngineOptions eo;
    eo.max_batch = max_batch;
    eo.max_batch_tokens = 64;
    Engine e(InferenceModel::Create(be.get(), run_->cfg, run_->params, mo).value(), run_->tok.get(), eo,
             &metrics_);
    std::vector<std::shared_ptr<RequestHandle>> handles = {Submit(e, low(1)), Submit(e, low(2))};
    for (int i = 0; i < 12; i++) e.Step();  // both decoding, a dozen tokens in
    handles.push_back(Submit(e, high));
    e.Step();
    EXPECT_EQ(metrics_.preemptions, 1u);  // the later of the two made room
    EXPECT_EQ(e.active(), 3);
    const auto out = RunToEnd(e, handles);  // (the events of the steps above were waiting in the handles)
    for (int i = 0; i < 2; i++) {
      EXPECT_EQ(out[i].tokens, alone[i].tokens) << i;
      EXPECT_EQ(out[i].text, alone[i].text) << i;
      EXPECT_EQ(out[i].completion_tokens, alone[i].completion_tokens) << i;
      EXPECT_EQ(out[i].prompt_tokens, alone[i].prompt_tokens) << i;
      EXPECT_EQ(out[i].cached_tokens, alone[i].cached_tokens) << i;
    }
    EXPECT_EQ(out[2].completion_tokens, 30);
    EXPECT_EQ(metrics_.preemptions, 1u);
    EXPECT_EQ(e.kv_blocks_used(), 0);
    EXPECT_EQ(e.active(), 0);
  }
}

// Preemption counts blocks as Admit will: a waiting request whose prompt the prefix cache holds (in a running
// sequence's blocks) needs fewer new blocks, and fits without preempting anyone.
TEST_F(EngineTest, PreemptionCountsTheBlocksThePrefixCacheSupplies) {
  auto be = MakeCpuFastBackend();
  GenerationRequest low = Greedy(Prompt(48, 1), 20), high = low;  // 48 + 20 - 1 positions: 5 blocks of 16
  low.priority = 10;
  auto alone_engine = MakeEngine(be.get());
  const Outcome alone = RunToEnd(*alone_engine, {Submit(*alone_engine, low)})[0];
  // 8 blocks: 5 for the running one, 3 left; the second needs 5 less the 2 cached blocks of the shared
  // prompt.
  auto e = MakeEngine(be.get(), Quantize::kNone, 64, /*num_blocks=*/8);
  std::vector<std::shared_ptr<RequestHandle>> handles = {Submit(*e, low)};
  for (int i = 0; i < 3; i++) e->Step();
  handles.push_back(Submit(*e, high));
  e->Step();
  EXPECT_EQ(metrics_.preemptions, 0u) << "the prefix cache made room: nobody needed to go";
  const auto out = RunToEnd(*e, handles);
  EXPECT_EQ(out[0].tokens, alone.tokens);
  EXPECT_EQ(out[1].tokens, alone.tokens);  // the same greedy request
  EXPECT_EQ(out[1].cached_tokens, 32);
  EXPECT_EQ(metrics_.preemptions, 0u);
  EXPECT_EQ(e->kv_blocks_used(), 0);
}

// A victim's prefix blocks that a request which stays also holds are not freed by preempting it: when that
// leaves too few blocks, nobody is preempted (for nothing) until it would make room.
TEST_F(EngineTest, NoPreemptionThatWouldNotMakeRoom) {
  auto be = MakeCpuFastBackend();
  GenerationRequest keep = Greedy(Prompt(32, 2), 8), victim = keep, urgent = Greedy(Prompt(20, 3), 44);
  keep.priority = urgent.priority = -5;  // the same priority: `keep` is never a victim of `urgent`
  victim.priority = 10;
  // 6 blocks: keep 3 (39 positions), victim 3 of which the first is keep's: 1 left; urgent needs 4 (63
  // positions). Preempting the victim frees 2, not 3.
  auto e = MakeEngine(be.get(), Quantize::kNone, 64, /*num_blocks=*/6);
  std::vector<std::shared_ptr<RequestHandle>> handles = {Submit(*e, keep)};
  e->Step();
  handles.push_back(Submit(*e, victim));
  e->Step();
  e->Step();
  handles.push_back(Submit(*e, urgent));
  e->Step();
  EXPECT_EQ(metrics_.preemptions, 0u);
  const auto out = RunToEnd(*e, handles);
  EXPECT_EQ(out[0].completion_tokens, 8);
  EXPECT_EQ(out[1].completion_tokens, 8);
  EXPECT_EQ(out[2].completion_tokens, 44);
  // Once `keep` has ended, the shared block is the victim's alone: preempting it then makes room (1 + 3 of
  // 4).
  EXPECT_EQ(metrics_.preemptions, 1u);
  EXPECT_EQ(e->kv_blocks_used(), 0);
}

TEST_F(EngineTest, AdmissionWaitsForKvBlocksAndRefusesWhatNeverFits) {
  auto be = MakeCpuFastBackend();
  auto engine = MakeEngine(be.get(), Quantize::kNone, 64, /*num_blocks=*/6, /*max_queue=*/2);
  // Each needs 4 blocks of 16 (20 + 44 - 1 positions): only one runs at a time.
  auto a = Submit(*engine, Greedy(Prompt(20, 1), 44));
  auto b = Submit(*engine, Greedy(Prompt(20, 2), 44));
  auto full = engine->Submit(Greedy(Prompt(5, 3), 4));
  EXPECT_EQ(full.status().code(), Status::Code::kUnavailable);
  auto too_big = engine->Submit(Greedy(Prompt(60, 3), 60));
  EXPECT_EQ(too_big.status().code(), Status::Code::kInvalidArgument);
  auto too_long = engine->Submit(Greedy(Prompt(100, 3), 29));
  EXPECT_EQ(too_long.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(too_long.status().message().find("maximum context length is 128"), std::string::npos);
  auto out = RunToEnd(*engine, {a, b});
  EXPECT_EQ(out[0].completion_tokens, 44);
  EXPECT_EQ(out[1].completion_tokens, 44);
  EXPECT_EQ(engine->kv_blocks_used(), 0);
}

TEST_F(EngineTest, StopStringsCutTheTextAndEndTheRequest) {
  auto be = MakeCpuFastBackend();
  auto engine = MakeEngine(be.get());
  GenerationRequest r = Greedy(run_->tok->Encode("And God said"), 40);
  auto full = RunToEnd(*engine, {Submit(*engine, r)})[0];
  ASSERT_GT(full.text.size(), 12u);
  const std::string stop = full.text.substr(full.text.size() / 2, 3);
  const size_t cut = full.text.find(stop);
  r.stop = {"never-appears", stop};
  auto stopped = RunToEnd(*engine, {Submit(*engine, r)})[0];
  EXPECT_EQ(stopped.text, full.text.substr(0, cut));
  EXPECT_EQ(stopped.finish, FinishReason::kStop);
  EXPECT_LT(stopped.completion_tokens, 40);
}

TEST_F(EngineTest, TextStreamHoldsBackPossibleStopStringsAndSplitCharacters) {
  const Tokenizer& tok = *run_->tok;
  const std::string text = "caf\xc3\xa9 and the light";
  std::vector<int32_t> ids = tok.Encode(text);
  TextStream plain(&tok, {}, {});
  std::string got;
  bool stopped = false;
  for (int32_t id : ids) {
    std::string piece = plain.Add(id, &stopped);
    EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos) << "a split character was sent";
    got += piece;
  }
  got += plain.Flush();
  EXPECT_EQ(got, text);
  TextStream with_stop(&tok, {}, {"the li"});
  got.clear();
  for (int32_t id : ids) {
    got += with_stop.Add(id, &stopped);
    if (stopped) break;
  }
  EXPECT_TRUE(stopped);
  EXPECT_EQ(got, "caf\xc3\xa9 and ");
}

}  // namespace
}  // namespace tern
