// response_format json_object in the engine: with untrained weights (garbage text unconstrained) every
// choice that finishes with "stop" is a JSON object, with n > 1 and batched requests; seeded sampling
// stays reproducible; logprobs stay the model's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "testing/test_run.h"

namespace tern {
namespace {

using testing::MakeTestRun;
using testing::Outcome;
using testing::RunToEnd;

class EngineJsonTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { run_ = MakeTestRun().release(); }
  static void TearDownTestSuite() { delete run_; }

  std::unique_ptr<Engine> MakeEngine() {
    InferenceModelOptions mo;
    mo.num_blocks = 512;
    mo.max_rows = 128;
    mo.max_seqs = 8;
    auto model = InferenceModel::Create(backend_.get(), run_->cfg, run_->params, mo);
    EXPECT_TRUE(model.ok()) << model.status().ToString();
    EngineOptions eo;
    eo.max_batch = 8;
    eo.max_batch_tokens = 128;
    return std::make_unique<Engine>(std::move(model).value(), run_->tok.get(), eo, &metrics_);
  }
  // Sampled at temperature 1 from the prompt; the bias on a few closing bytes lets random weights finish
  // an object within the context (the mask alone never closes a string that no token is likely to end).
  GenerationRequest Request(uint64_t seed, bool json_object) const {
    GenerationRequest r;
    r.prompt = run_->tok->Encode("Answer in JSON: ");
    r.max_tokens = run_->cfg.block_size - static_cast<int>(r.prompt.size());
    r.sampling.temperature = 1.0f;
    r.seed = seed;
    r.json_object = json_object;
    for (char c : std::string("\"}]0,:{")) r.logit_bias.emplace_back(3 + static_cast<uint8_t>(c), 4.0f);
    return r;
  }
  std::vector<Outcome> Generate(const std::vector<GenerationRequest>& requests) {
    auto engine = MakeEngine();
    std::vector<std::shared_ptr<RequestHandle>> handles;
    for (const auto& r : requests) {
      auto h = engine->Submit(r);
      EXPECT_TRUE(h.ok()) << h.status().ToString();
      handles.push_back(h.value());
    }
    return RunToEnd(*engine, handles);
  }
  static bool IsObject(const std::string& text) {
    return nlohmann::json::accept(text) && nlohmann::json::parse(text).is_object();
  }

  static testing::TestRun* run_;
  std::unique_ptr<Backend> backend_ = MakeCpuFastBackend();
  ServeMetrics metrics_;
};
testing::TestRun* EngineJsonTest::run_ = nullptr;

TEST_F(EngineJsonTest, EveryStoppedChoiceIsAJsonObject) {
  constexpr int kSeeds = 32;
  std::vector<GenerationRequest> constrained, free;
  for (int seed = 0; seed < kSeeds; seed++) {
    constrained.push_back(Request(seed, true));
    free.push_back(Request(seed, false));
  }
  const std::vector<Outcome> got = Generate(constrained), unconstrained = Generate(free);
  int stopped = 0, free_objects = 0;
  for (int i = 0; i < kSeeds; i++) {
    if (got[i].finish == FinishReason::kStop) {
      stopped++;
      EXPECT_TRUE(IsObject(got[i].text)) << "seed " << i << ": " << got[i].text;
      EXPECT_EQ(got[i].tokens.back(), run_->tok->eos_id());
    } else {
      EXPECT_EQ(got[i].finish, FinishReason::kLength) << "seed " << i;
      JsonRecognizer r;  // cut off by max_tokens: a prefix of an object
      EXPECT_TRUE(r.Feed(got[i].text)) << "seed " << i << ": " << got[i].text;
    }
    free_objects += IsObject(unconstrained[i].text);
  }
  std::printf("%d of %d choices stopped\n", stopped, kSeeds);
  EXPECT_GE(stopped, kSeeds / 2) << "too few choices finished: the test proves little";
  EXPECT_EQ(free_objects, 0) << "unconstrained, the untrained model should not write JSON";
}

// n > 1: one recognizer per choice. Greedy and seeded sampling give the same tokens on a second run.
TEST_F(EngineJsonTest, ChoicesAreConstrainedApartAndReproducible) {
  GenerationRequest r = Request(77, true);
  r.n = 4;
  r.max_tokens = 24;
  r.logit_bias.clear();
  GenerationRequest greedy = Request(0, true);
  greedy.sampling.temperature = 0.0f;
  const std::vector<Outcome> a = Generate({r, greedy}), b = Generate({r, greedy});
  EXPECT_EQ(a[1].tokens, b[1].tokens);
  EXPECT_EQ(a[0].tokens, b[0].tokens);
  auto engine = MakeEngine();
  auto h = engine->Submit(r).value();
  std::vector<std::string> texts(4);
  std::vector<FinishReason> finish(4, FinishReason::kNone);
  for (int guard = 0; guard < 10000 && std::count(finish.begin(), finish.end(), FinishReason::kNone) > 0;
       guard++) {
    engine->Step();
    std::vector<GenerationEvent> events;
    h->Wait(&events, std::chrono::milliseconds(0));
    for (const auto& e : events) {
      texts[e.index] += e.text;
      if (e.finish != FinishReason::kNone) finish[e.index] = e.finish;
    }
  }
  for (int i = 0; i < 4; i++) {
    JsonRecognizer rec;
    EXPECT_TRUE(rec.Feed(texts[i])) << "choice " << i << ": " << texts[i];
    if (finish[i] == FinishReason::kStop) {
      EXPECT_TRUE(IsObject(texts[i])) << texts[i];
    }
  }
  EXPECT_FALSE(texts[0] == texts[1] && texts[1] == texts[2] && texts[2] == texts[3]) << texts[0];
}

// Logprobs are the model's, before the mask: the first token's is the one an unconstrained request forced
// to the same token (logit_bias leaves logprobs raw too) reports.
TEST_F(EngineJsonTest, LogprobsStayTheModels) {
  auto first = [&](GenerationRequest r) {
    r.max_tokens = 1;
    r.logprobs = 0;
    auto engine = MakeEngine();
    auto h = engine->Submit(r).value();
    std::vector<GenerationEvent> all;
    for (int guard = 0; guard < 1000 && (all.empty() || all.back().finish == FinishReason::kNone); guard++) {
      engine->Step();
      std::vector<GenerationEvent> events;
      h->Wait(&events, std::chrono::milliseconds(0));
      for (auto& e : events) all.push_back(std::move(e));
    }
    EXPECT_EQ(all.size(), 1u);
    EXPECT_EQ(all[0].logprobs.size(), 1u);
    return all[0].logprobs.at(0);
  };
  GenerationRequest r = Request(5, true);
  r.logit_bias.clear();
  const TokenLogprob constrained = first(r);
  const std::string bytes = TokenTrie::FromTokenizer(*run_->tok).bytes(constrained.token);
  ASSERT_FALSE(bytes.empty());
  EXPECT_TRUE(bytes[0] == '{' || bytes[0] == ' ' || bytes[0] == '\n' || bytes[0] == '\t') << bytes;
  r.json_object = false;
  r.logit_bias = {{constrained.token, 100.0f}};
  const TokenLogprob raw = first(r);
  ASSERT_EQ(raw.token, constrained.token);
  EXPECT_FLOAT_EQ(raw.logprob, constrained.logprob);
  EXPECT_LT(raw.logprob, std::log(0.5f));  // far from certain before the mask
}

// response_format json_schema: every choice that stops is a document of the schema (checked by walking the
// parsed JSON), with the properties in the schema's order; unconstrained, none is.
TEST_F(EngineJsonTest, EveryStoppedChoiceFollowsTheSchema) {
  const std::string schema_text =
      R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},)"
      R"("ok":{"type":"boolean"},"tags":{"type":"array","items":{"enum":["a","b"]}}},)"
      R"("required":["name","age","ok","tags"]})";
  auto compiled = CompileJsonSchema(nlohmann::ordered_json::parse(schema_text), "schema");
  ASSERT_TRUE(std::holds_alternative<std::shared_ptr<const JsonSchema>>(compiled));
  const auto schema = std::get<std::shared_ptr<const JsonSchema>>(compiled);
  auto valid = [](const std::string& text) {
    if (!nlohmann::json::accept(text)) return false;
    const nlohmann::ordered_json v = nlohmann::ordered_json::parse(text);
    if (!v.is_object() || v.size() != 4 || !v.contains("name") || !v["name"].is_string() ||
        !v.contains("age") || !v["age"].is_number_integer() || !v.contains("ok") || !v["ok"].is_boolean() ||
        !v.contains("tags") || !v["tags"].is_array())
      return false;
    for (const auto& t : v["tags"])
      if (t != "a" && t != "b") return false;
    return v.begin().key() == "name";  // the schema's order
  };
  constexpr int kSeeds = 32;
  std::vector<GenerationRequest> constrained, free;
  for (int seed = 0; seed < kSeeds; seed++) {
    GenerationRequest r = Request(seed, false);
    free.push_back(r);
    r.json_schema = schema;
    constrained.push_back(r);
  }
  const std::vector<Outcome> got = Generate(constrained), unconstrained = Generate(free);
  int stopped = 0, free_valid = 0;
  for (int i = 0; i < kSeeds; i++) {
    if (got[i].finish == FinishReason::kStop) {
      stopped++;
      EXPECT_TRUE(valid(got[i].text)) << "seed " << i << ": " << got[i].text;
      EXPECT_EQ(got[i].tokens.back(), run_->tok->eos_id());
    } else {
      EXPECT_EQ(got[i].finish, FinishReason::kLength) << "seed " << i;
      SchemaRecognizer r(schema.get());  // cut off by max_tokens: a prefix of a document
      EXPECT_TRUE(r.Feed(got[i].text)) << "seed " << i << ": " << got[i].text;
    }
    free_valid += valid(unconstrained[i].text);
  }
  std::printf("%d of %d choices stopped; e.g. %s\n", stopped, kSeeds, got[0].text.c_str());
  EXPECT_GE(stopped, kSeeds / 2) << "too few choices finished: the test proves little";
  EXPECT_EQ(free_valid, 0) << "unconstrained, the untrained model should not write the document";
}

}  // namespace
}  // namespace tern
