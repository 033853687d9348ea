// Request parsing and response shapes without HTTP: every field's validation names the field.
#include "serve/api.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "serve/response_builder.h"
#include "testing/test_run.h"

namespace tern {
namespace {

using json = nlohmann::json;

class ApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { run_ = testing::MakeTestRun().release(); }
  static void TearDownTestSuite() { delete run_; }
  ApiContext Ctx() const { return {"tiny", run_->tok.get(), 128}; }
  ApiError Error(const std::string& body, bool chat = false) {
    auto r = ParseRequest(body, chat, Ctx());
    EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << body;
    return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
  }
  ParsedRequest Ok(const std::string& body, bool chat = false) {
    auto r = ParseRequest(body, chat, Ctx());
    if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << body << " -> " << e->message;
    return std::holds_alternative<ParsedRequest>(r) ? std::get<ParsedRequest>(r) : ParsedRequest{};
  }
  static testing::TestRun* run_;
};
testing::TestRun* ApiTest::run_ = nullptr;

TEST_F(ApiTest, CompletionFieldsAndDefaults) {
  ParsedRequest r =
      Ok(R"({"model":"tiny","prompt":"And God said","max_tokens":5,"temperature":0.5,"top_p":0.9,
                          "top_k":40,"stop":["\n", "Amen"],"seed":7,"stream":true,"stream_options":{"include_usage":true}})");
  EXPECT_EQ(r.gen.prompt, run_->tok->Encode("And God said"));
  EXPECT_EQ(r.gen.max_tokens, 5);
  EXPECT_FLOAT_EQ(r.gen.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.gen.sampling.top_p, 0.9f);
  EXPECT_EQ(r.gen.sampling.top_k, 40);
  EXPECT_EQ(r.gen.stop, (std::vector<std::string>{"\n", "Amen"}));
  EXPECT_EQ(r.gen.seed, 7u);
  EXPECT_TRUE(r.stream && r.include_usage);
  EXPECT_EQ(r.gen.priority, 0);  // by default
  EXPECT_EQ(Ok(R"({"prompt":"x","priority":-3})").gen.priority, -3);
  ParsedRequest d = Ok(R"({"prompt":[5,6,7]})");  // model optional; token-array prompt
  EXPECT_EQ(d.gen.prompt, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(d.gen.max_tokens, 16);  // OpenAI's default for completions
  EXPECT_FLOAT_EQ(d.gen.sampling.temperature, 1.0f);
  EXPECT_EQ(Ok(R"({"prompt":["one"]})").gen.prompt, run_->tok->Encode("one"));
  EXPECT_FALSE(d.gen.AdjustsLogits());  // no penalties, no bias by default
  ParsedRequest p = Ok(R"({"prompt":"x","presence_penalty":0.5,"frequency_penalty":-1,
                           "logit_bias":{"7":-100,"12":2.5}})");
  EXPECT_FLOAT_EQ(p.gen.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(p.gen.frequency_penalty, -1.0f);
  auto bias = p.gen.logit_bias;
  std::sort(bias.begin(), bias.end());
  EXPECT_EQ(bias, (std::vector<std::pair<int32_t, float>>{{7, -100.0f}, {12, 2.5f}}));
}

TEST_F(ApiTest, ChatUsesTheTemplateAndStopsAtTheNextUserTurn) {
  ParsedRequest r = Ok(R"({"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},
                          {"role":"assistant","content":"Hello."},{"role":"user","content":[{"type":"text","text":"Why?"}]}]})",
                       true);
  EXPECT_EQ(run_->tok->Decode(r.gen.prompt),
            "Be brief.\n\nUser: Hi\nAssistant: Hello.\nUser: Why?\nAssistant:");
  EXPECT_EQ(r.gen.stop, std::vector<std::string>{kChatStop});
  EXPECT_EQ(r.gen.max_tokens, 128 - static_cast<int>(r.gen.prompt.size()));  // until the context ends
  EXPECT_EQ(
      Ok(R"({"messages":[{"role":"user","content":"x"}],"max_completion_tokens":3})", true).gen.max_tokens,
      3);
}

TEST_F(ApiTest, ChoicesEchoAndLogprobs) {
  ParsedRequest r = Ok(R"({"prompt":"And God said","n":3,"echo":true,"logprobs":2})");
  EXPECT_EQ(r.gen.n, 3);
  EXPECT_EQ(r.gen.logprobs, 2);
  EXPECT_TRUE(r.echo && r.gen.prompt_logprobs);
  EXPECT_EQ(r.echo_text, "And God said");
  ParsedRequest tokens = Ok(R"({"prompt":[[5,6,7]],"echo":true})");
  EXPECT_EQ(tokens.echo_text, run_->tok->Decode({5, 6, 7}));
  EXPECT_FALSE(tokens.gen.prompt_logprobs);  // echo without logprobs: text only
  EXPECT_EQ(tokens.gen.logprobs, -1);
  EXPECT_EQ(Ok(R"({"prompt":"x","logprobs":0})").gen.logprobs, 0);
  EXPECT_EQ(Ok(R"({"prompt":"x","logprobs":false})").gen.logprobs, -1);
  const std::string user = R"("messages":[{"role":"user","content":"x"}])";
  EXPECT_EQ(Ok("{" + user + R"(,"logprobs":true,"top_logprobs":20})", true).gen.logprobs, 20);
  EXPECT_EQ(Ok("{" + user + R"(,"logprobs":true})", true).gen.logprobs, 0);
  EXPECT_EQ(Ok("{" + user + R"(,"logprobs":false})", true).gen.logprobs, -1);
}

// echo with max_tokens 0 scores the prompt: allowed only with echo, and then the prompt may fill the context.
TEST_F(ApiTest, EchoWithZeroMaxTokens) {
  ParsedRequest r = Ok(R"({"prompt":"And God said","echo":true,"max_tokens":0,"logprobs":1})");
  EXPECT_EQ(r.gen.max_tokens, 0);
  EXPECT_TRUE(r.echo && r.gen.prompt_logprobs && r.logprobs);
  EXPECT_EQ(Ok(R"({"prompt":"x","echo":true,"max_tokens":0,"stream":true})").gen.max_tokens, 0);
  EXPECT_EQ(Error(R"({"prompt":"x","max_tokens":0})").param, "max_tokens");
  EXPECT_EQ(Error(R"({"prompt":"x","echo":false,"max_tokens":0})").param, "max_tokens");
  EXPECT_EQ(Error(R"({"prompt":"x","echo":true,"max_tokens":-1})").param, "max_tokens");
  const std::string user = R"("messages":[{"role":"user","content":"x"}])";
  EXPECT_EQ(Error("{" + user + R"(,"max_tokens":0})", true).param, "max_tokens");
  json full = json::array();
  for (int i = 0; i < 128; i++) full.push_back(5 + i % 50);
  EXPECT_EQ(Ok(json{{"prompt", full}, {"echo", true}, {"max_tokens", 0}}.dump()).gen.prompt.size(), 128u);
  EXPECT_EQ(Error(json{{"prompt", full}, {"echo", true}, {"max_tokens", 1}}.dump()).code,
            "context_length_exceeded");
  full.push_back(5);
  EXPECT_EQ(Error(json{{"prompt", full}, {"echo", true}, {"max_tokens", 0}}.dump()).code,
            "context_length_exceeded");
}

// best_of: candidates generated (gen.n), n returned, logprobs computed for the ranking but shown only when
// asked; the rules of OpenAI's reference.
TEST_F(ApiTest, BestOf) {
  ParsedRequest r = Ok(R"({"prompt":"x","n":2,"best_of":5,"temperature":0})");
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.gen.n, 5);
  EXPECT_TRUE(r.ranks());
  EXPECT_EQ(r.gen.logprobs, 0);  // needed to rank
  EXPECT_FALSE(r.logprobs);      // not shown
  EXPECT_FALSE(r.gen.prompt_logprobs);
  ParsedRequest shown = Ok(R"({"prompt":"x","best_of":3,"logprobs":2})");
  EXPECT_EQ(shown.n, 1);
  EXPECT_EQ(shown.gen.n, 3);
  EXPECT_EQ(shown.gen.logprobs, 2);
  EXPECT_TRUE(shown.logprobs);
  ParsedRequest same = Ok(R"({"prompt":"x","n":3,"best_of":3,"stream":true})");  // best_of = n: plain n
  EXPECT_EQ(same.gen.n, 3);
  EXPECT_FALSE(same.ranks());
  EXPECT_EQ(same.gen.logprobs, -1);
  EXPECT_EQ(Ok(R"({"prompt":"x","n":4})").gen.n, 4);  // best_of defaults to n
  EXPECT_EQ(Ok(R"({"prompt":"x","best_of":16})").gen.n, 16);
  for (const char* body :
       {R"({"prompt":"x","best_of":0})", R"({"prompt":"x","best_of":17})", R"({"prompt":"x","best_of":2.5})",
        R"({"prompt":"x","best_of":"3"})", R"({"prompt":"x","n":3,"best_of":2})",
        R"({"prompt":"x","best_of":2,"stream":true})", R"({"prompt":"x","n":2,"best_of":3,"stream":true})"}) {
    ApiError e = Error(body);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, "best_of") << body << ": " << e.message;
  }
  const std::string user = R"("messages":[{"role":"user","content":"x"}])";
  EXPECT_EQ(Ok("{" + user + R"(,"best_of":1,"n":2})", true).gen.n, 2);
  EXPECT_EQ(Error("{" + user + R"(,"best_of":2})", true).param, "best_of");
}

// The response keeps the best_of candidates with the highest mean token logprob (not the highest sum), best
// first and renumbered; usage counts every candidate.
TEST_F(ApiTest, BestOfReturnsTheHighestMeanLogprobs) {
  ParsedRequest r = Ok(R"({"prompt":"ab","n":2,"best_of":4})");
  ResponseBuilder b(r, NewResponseMeta("tiny", false, run_->tok.get()));
  const int32_t x = run_->tok->Encode("x")[0];
  // candidate: its tokens' logprobs. Means -1.0, -0.5, -0.9, -2.0; sums -1.0, -2.0, -2.7, -2.0.
  const std::vector<std::vector<float>> lps = {
      {-1.0f}, {-0.5f, -0.5f, -0.5f, -0.5f}, {-0.9f, -0.9f, -0.9f}, {-2.0f}};
  for (int i = 0; i < 4; i++) {
    for (size_t t = 0; t < lps[i].size(); t++) {
      GenerationEvent e;
      e.index = i;
      e.text = std::to_string(i);
      e.tokens = {x};
      e.logprobs = {{x, lps[i][t], {}}};
      if (t + 1 == lps[i].size()) {
        e.finish = FinishReason::kLength;
        e.prompt_tokens = 2;
        e.completion_tokens = static_cast<int>(lps[i].size());
      }
      b.Add(e);
    }
  }
  ASSERT_TRUE(b.finished());
  json j = json::parse(b.Body());
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][0]["text"], "1111");  // mean -0.5
  EXPECT_EQ(j["choices"][1]["text"], "222");   // mean -0.9
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][1]["index"], 1);
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());  // not asked for
  EXPECT_EQ(j["usage"]["completion_tokens"], 1 + 4 + 3 + 1);
}

// A score-only echo (max_tokens 0): the prompt and its logprobs, in one chunk when streamed.
TEST_F(ApiTest, EchoOnlyResponseAndStream) {
  for (bool stream : {false, true}) {
    ParsedRequest r = Ok(json{{"prompt", "And God"},
                              {"echo", true},
                              {"max_tokens", 0},
                              {"logprobs", 1},
                              {"stream", stream},
                              {"stream_options", stream ? json{{"include_usage", true}} : json()}}
                             .dump());
    const int P = static_cast<int>(r.gen.prompt.size());
    ResponseBuilder b(r, NewResponseMeta("tiny", false, run_->tok.get()));
    auto lp = std::make_shared<std::vector<TokenLogprob>>();
    for (int i = 1; i < P; i++) lp->push_back({r.gen.prompt[i], -2.0f, {{r.gen.prompt[i], -2.0f}}});
    GenerationEvent e;  // what the engine sends for max_tokens 0
    e.prompt_logprobs = lp;
    e.finish = FinishReason::kLength;
    e.prompt_tokens = P;
    if (!stream) {
      b.Add(e);
      ASSERT_TRUE(b.finished());
      json j = json::parse(b.Body());
      EXPECT_EQ(j["choices"][0]["text"], "And God");
      EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
      EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"].size(), static_cast<size_t>(P));
      EXPECT_TRUE(j["choices"][0]["logprobs"]["token_logprobs"][0].is_null());
      EXPECT_EQ(j["usage"]["completion_tokens"], 0);
      continue;
    }
    auto chunks = b.Stream(e);
    ASSERT_EQ(chunks.size(), 2u);  // the echo with its finish_reason, then the usage
    json c = json::parse(chunks[0])["choices"][0];
    EXPECT_EQ(c["text"], "And God");
    EXPECT_EQ(c["finish_reason"], "length");
    EXPECT_EQ(c["logprobs"]["token_logprobs"].size(), static_cast<size_t>(P));
    EXPECT_EQ(json::parse(chunks[1])["usage"]["completion_tokens"], 0);
    EXPECT_TRUE(b.finished());
  }
}

// Completions' top_logprobs maps list their keys most likely first, whatever their alphabetical order (the
// raw text is read, in order); chat's top_logprobs arrays keep the same order.
TEST_F(ApiTest, TopLogprobsAreMostLikelyFirst) {
  const Tokenizer& tok = *run_->tok;
  std::vector<int32_t> ids;
  for (const char* w : {"z", "m", "a", "q"}) ids.push_back(tok.Encode(w).back());
  ChoiceOut c;
  c.has_logprobs = true;
  c.text = "a";
  // chosen "a" is outside the top 3 ("z", "m", "q" by logprob): it goes last
  c.logprobs.push_back({ids[2], -3.0f, {{ids[0], -0.5f}, {ids[1], -1.0f}, {ids[3], -2.0f}}});
  c.logprobs.push_back({ids[0], -0.25f, {{ids[0], -0.25f}, {ids[2], -1.5f}}});  // chosen is the best
  for (bool chat : {false, true}) {
    const std::string body = CompletionJson(NewResponseMeta("tiny", chat, &tok), {c}, {});
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(body);
    std::vector<std::vector<std::pair<std::string, double>>> tops;
    if (!chat) {
      for (const auto& top : j["choices"][0]["logprobs"]["top_logprobs"]) {
        tops.emplace_back();
        for (const auto& [k, v] : top.items()) tops.back().emplace_back(k, v.get<double>());
      }
    } else {
      for (const auto& t : j["choices"][0]["logprobs"]["content"]) {
        tops.emplace_back();
        for (const auto& e : t["top_logprobs"])
          tops.back().emplace_back(e["token"], e["logprob"].get<double>());
      }
    }
    ASSERT_EQ(tops.size(), 2u) << body;
    auto values = [](const std::vector<std::pair<std::string, double>>& e) {
      std::vector<double> v;
      for (const auto& [k, x] : e) v.push_back(x);
      return v;
    };
    const std::vector<double> want =
        chat ? std::vector<double>{-0.5, -1.0, -2.0} : std::vector<double>{-0.5, -1.0, -2.0, -3.0};
    EXPECT_EQ(values(tops[0]), want) << body;
    EXPECT_EQ(values(tops[1]), (std::vector<double>{-0.25, -1.5})) << body;
    // the test means something only if alphabetical order differs
    std::vector<std::string> keys;
    for (const auto& [k, x] : tops[0]) keys.push_back(k);
    EXPECT_FALSE(std::is_sorted(keys.begin(), keys.end())) << body;
  }
}

// Events in, response out: echo and its null first logprob, text offsets, the chat space, usage over n.
TEST_F(ApiTest, ResponseBuilderAssemblesChoices) {
  ParsedRequest r = Ok(R"({"prompt":"ab","n":2,"echo":true,"logprobs":1,"max_tokens":2})");
  const std::vector<int32_t>& prompt = r.gen.prompt;
  ResponseBuilder b(r, NewResponseMeta("tiny", false, run_->tok.get()));
  auto lp = std::make_shared<std::vector<TokenLogprob>>();
  for (size_t i = 1; i < prompt.size(); i++) lp->push_back({prompt[i], -1.5f, {{prompt[i], -1.5f}}});
  const int32_t x = run_->tok->Encode("x")[0];
  auto event = [&](int index, const char* text, FinishReason f) {
    GenerationEvent e;
    e.index = index;
    e.text = text;
    e.tokens = {x};
    e.logprobs = {{x, -0.25f, {{x, -0.25f}}}};
    e.finish = f;
    if (f != FinishReason::kNone) {
      e.prompt_tokens = static_cast<int>(prompt.size());
      e.completion_tokens = 2;
      e.cached_tokens = 7 * index;
    }
    return e;
  };
  GenerationEvent first = event(1, "x", FinishReason::kNone);
  first.prompt_logprobs = lp;
  b.Add(first);
  first.index = 0;
  b.Add(first);
  b.Add(event(0, "x", FinishReason::kLength));
  EXPECT_FALSE(b.finished());
  b.Add(event(1, "x", FinishReason::kStop));
  ASSERT_TRUE(b.finished());
  json j = json::parse(b.Body());
  EXPECT_EQ(j["usage"]["prompt_tokens"], prompt.size());
  EXPECT_EQ(j["usage"]["completion_tokens"], 4);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);  // choice 0's
  for (int i = 0; i < 2; i++) {
    const json& c = j["choices"][i];
    EXPECT_EQ(c["text"], "abxx");
    EXPECT_EQ(c["finish_reason"], i == 0 ? "length" : "stop");
    const json& l = c["logprobs"];
    ASSERT_EQ(l["tokens"].size(), prompt.size() + 2);
    EXPECT_TRUE(l["token_logprobs"][0].is_null());
    EXPECT_FLOAT_EQ(l["token_logprobs"].back().get<float>(), -0.25f);
    EXPECT_EQ(l["text_offset"].back(), 3);
    EXPECT_EQ(l["tokens"].back(), "x");
  }
  // chat: the template's space is dropped from the first text, and the stream opens with role chunks
  ParsedRequest chat = Ok(R"({"messages":[{"role":"user","content":"x"}],"n":2})", true);
  ResponseBuilder cb(chat, NewResponseMeta("tiny", true, run_->tok.get()));
  EXPECT_EQ(cb.StreamStart().size(), 2u);
  GenerationEvent e = event(0, " Hi", FinishReason::kNone);
  auto chunks = cb.Stream(e);
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(json::parse(chunks[0])["choices"][0]["delta"]["content"], "Hi");
  EXPECT_TRUE(json::parse(chunks[0])["choices"][0]["logprobs"].is_null());  // not asked for
}

TEST_F(ApiTest, BadRequestsNameTheField) {
  struct Case {
    const char* body;
    int status;
    const char* param;
  };
  for (const Case& c : std::vector<Case>{
           {"{not json", 400, ""},
           {"[1,2]", 400, ""},
           {R"({"prompt":"x","model":"gpt-4"})", 404, "model"},
           {R"({"prompt":"x","model":5})", 400, "model"},
           {R"({})", 400, "prompt"},
           {R"({"prompt":""})", 400, "prompt"},
           {R"({"prompt":[]})", 400, "prompt"},
           {R"({"prompt":[1,99999]})", 400, "prompt"},
           {R"({"prompt":["a","b"]})", 400, "prompt"},
           {R"({"prompt":7})", 400, "prompt"},
           {R"({"prompt":"x","max_tokens":0})", 400, "max_tokens"},  // 0 only with echo
           {R"({"prompt":"x","max_tokens":-3})", 400, "max_tokens"},
           {R"({"prompt":"x","max_tokens":"ten"})", 400, "max_tokens"},
           {R"({"prompt":"x","max_tokens":2.5})", 400, "max_tokens"},
           {R"({"prompt":"x","max_tokens":128})", 400, "max_tokens"},
           {R"({"prompt":"x","temperature":"hot"})", 400, "temperature"},
           {R"({"prompt":"x","temperature":3})", 400, "temperature"},
           {R"({"prompt":"x","top_p":0})", 400, "top_p"},
           {R"({"prompt":"x","top_k":-1})", 400, "top_k"},
           {R"({"prompt":"x","n":0})", 400, "n"},
           {R"({"prompt":"x","n":17})", 400, "n"},
           {R"({"prompt":"x","n":1.5})", 400, "n"},
           {R"({"prompt":"x","logprobs":6})", 400, "logprobs"},
           {R"({"prompt":"x","logprobs":-1})", 400, "logprobs"},
           {R"({"prompt":"x","logprobs":true})", 400, "logprobs"},
           {R"({"prompt":"x","top_logprobs":2})", 400, "top_logprobs"},
           {R"({"prompt":"x","echo":"yes"})", 400, "echo"},
           {R"({"prompt":"x","stop":5})", 400, "stop"},
           {R"({"prompt":"x","stop":["a","b","c","d","e"]})", 400, "stop"},
           {R"({"prompt":"x","stream":"yes"})", 400, "stream"},
           {R"({"prompt":"x","seed":"abc"})", 400, "seed"},
           {R"({"prompt":"x","priority":1001})", 400, "priority"},
           {R"({"prompt":"x","priority":0.5})", 400, "priority"},
           {R"({"prompt":"x","presence_penalty":2.5})", 400, "presence_penalty"},
           {R"({"prompt":"x","frequency_penalty":"high"})", 400, "frequency_penalty"},
           {R"({"prompt":"x","logit_bias":[1,2]})", 400, "logit_bias"},
           {R"({"prompt":"x","logit_bias":{"abc":1}})", 400, "logit_bias"},
           {R"({"prompt":"x","logit_bias":{"99999":1}})", 400, "logit_bias"},
           {R"({"prompt":"x","logit_bias":{"-1":1}})", 400, "logit_bias"},
           {R"({"prompt":"x","logit_bias":{"5":101}})", 400, "logit_bias"},
           {R"({"prompt":"x","logit_bias":{"5":"up"}})", 400, "logit_bias"},
       }) {
    ApiError e = Error(c.body);
    EXPECT_EQ(e.status, c.status) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << ": " << e.message;
    EXPECT_FALSE(e.message.empty());
    json j = json::parse(ErrorJson(e));
    EXPECT_TRUE(j["error"].contains("message") && j["error"].contains("type") &&
                j["error"].contains("param") && j["error"].contains("code"));
  }
  EXPECT_EQ(Error(R"({"messages":[]})", true).param, "messages");
  EXPECT_EQ(Error(R"({"messages":[{"role":"wizard","content":"x"}]})", true).param, "messages[0].role");
  EXPECT_EQ(Error(R"({"messages":[{"role":"user","content":5}]})", true).param, "messages[0].content");
  // A content part whose type is not a string threw from nlohmann's value() (found by fuzz/chat_jsonl).
  EXPECT_EQ(Error(R"({"messages":[{"role":"user","content":[{"type":[1],"text":"a"}]}]})", true).param,
            "messages[0].content");
  const std::string user = R"("messages":[{"role":"user","content":"x"}])";
  EXPECT_EQ(Error("{" + user + R"(,"logprobs":true,"top_logprobs":21})", true).param, "top_logprobs");
  EXPECT_EQ(Error("{" + user + R"(,"top_logprobs":2})", true).param, "top_logprobs");
  EXPECT_EQ(Error("{" + user + R"(,"logprobs":3})", true).param, "logprobs");
  EXPECT_EQ(Error("{" + user + R"(,"echo":true})", true).param, "echo");
  EXPECT_EQ(Error(std::string(R"({"prompt":")") + std::string(2000, 'a') + "\"}").code,
            "context_length_exceeded");
}

ChoiceOut Choice(int index, std::string text, FinishReason finish = FinishReason::kNone) {
  ChoiceOut c;
  c.index = index;
  c.text = std::move(text);
  c.finish = finish;
  return c;
}

TEST_F(ApiTest, ResponseShapes) {
  ResponseMeta m = NewResponseMeta("tiny", false);
  EXPECT_EQ(m.id.rfind("cmpl-", 0), 0u);
  json c = json::parse(CompletionJson(m, {Choice(0, "hi", FinishReason::kLength)}, {3, 2, 0}));
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["text"], "hi");
  EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(c["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(c["usage"]["total_tokens"], 5);
  ResponseMeta chat = NewResponseMeta("tiny", true);
  json cc = json::parse(CompletionJson(chat, {Choice(0, "yo", FinishReason::kStop)}, {3, 2, 0}));
  EXPECT_EQ(cc["object"], "chat.completion");
  EXPECT_EQ(cc["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(cc["choices"][0]["message"]["content"], "yo");
  json first = json::parse(ChunkJson(chat, {}, true));
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  json last = json::parse(ChunkJson(chat, Choice(0, "", FinishReason::kStop)));
  EXPECT_TRUE(last["choices"][0]["delta"].empty());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(json::parse(ChunkJson(m, Choice(0, "a")))["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(json::parse(ChunkJson(m, Choice(2, "a")))["choices"][0]["index"], 2);
  // invalid UTF-8 from the model never breaks the JSON
  EXPECT_NO_THROW(json::parse(CompletionJson(m, {Choice(0, "bad \xff byte", FinishReason::kStop)}, {})));
  json models = json::parse(ModelsJson("tiny", std::vector<ServedAdapters::Entry>{}, 1));
  EXPECT_EQ(models["data"][0]["id"], "tiny");
}

TEST_F(ApiTest, ResponseFormat) {
  EXPECT_FALSE(Ok(R"({"prompt":"a"})").gen.json_object);
  EXPECT_FALSE(Ok(R"({"prompt":"a","response_format":{"type":"text"}})").gen.json_object);
  EXPECT_TRUE(Ok(R"({"prompt":"a","response_format":{"type":"json_object"}})").gen.json_object);
  EXPECT_TRUE(
      Ok(R"({"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_object"}})", true)
          .gen.json_object);
  for (const char* bad : {R"("json")", R"({})", R"({"type":3})", R"({"type":"yaml"})",
                          R"({"type":"json_schema","json_schema":{"name":"x","schema":{}}})"}) {
    ApiError e = Error(std::string(R"({"prompt":"a","response_format":)") + bad + "}");
    EXPECT_EQ(e.status, 400) << bad;
    EXPECT_NE(e.param.find("response_format"), std::string::npos) << bad;
    EXPECT_NE(e.message.find("response_format"), std::string::npos) << bad << ": " << e.message;
  }
  EXPECT_NE(Error(R"({"prompt":"a","response_format":{"type":"yaml"}})").message.find("yaml"),
            std::string::npos);
}

// response_format json_schema: compiled into the request (properties in the listed order, not sorted);
// an unsupported keyword is refused with its path.
TEST_F(ApiTest, JsonSchemaIsCompiledInTheListedOrder) {
  const ParsedRequest r =
      Ok(R"({"prompt":"x","response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,)"
         R"("schema":{"type":"object","properties":{"z":{"type":"string"},"a":{"type":"integer"}}}}}})");
  ASSERT_TRUE(r.gen.json_schema);
  EXPECT_FALSE(r.gen.json_object);
  EXPECT_EQ(r.gen.json_schema->nodes[0].segments[0], "{\"z\":");
  SchemaRecognizer rec(r.gen.json_schema.get());
  EXPECT_TRUE(rec.Feed(R"({"z":"q","a":3})") && rec.complete());
  const ApiError e =
      Error(R"({"prompt":"x","response_format":{"type":"json_schema","json_schema":{"name":"p",)"
            R"("schema":{"type":"object","properties":{"s":{"type":"string","format":"date"}}}}}})");
  EXPECT_EQ(e.param, "response_format.json_schema.schema.properties.s.format");
  EXPECT_NE(e.message.find("is not supported"), std::string::npos) << e.message;
  EXPECT_EQ(
      Error(R"({"prompt":"x","response_format":{"type":"json_schema","json_schema":{"name":"p"}}})").param,
      "response_format.json_schema.schema");
}

}  // namespace
}  // namespace tern
