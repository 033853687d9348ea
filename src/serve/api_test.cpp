// Request parsing and response shapes without HTTP: every field's validation names the field.
#include "serve/api.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "serve/test_util.h"

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
  ParsedRequest d = Ok(R"({"prompt":[5,6,7]})");  // model optional; token-array prompt
  EXPECT_EQ(d.gen.prompt, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(d.gen.max_tokens, 16);  // OpenAI's default for completions
  EXPECT_FLOAT_EQ(d.gen.sampling.temperature, 1.0f);
  EXPECT_EQ(Ok(R"({"prompt":["one"]})").gen.prompt, run_->tok->Encode("one"));
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
           {R"({"prompt":"x","max_tokens":0})", 400, "max_tokens"},
           {R"({"prompt":"x","max_tokens":-3})", 400, "max_tokens"},
           {R"({"prompt":"x","max_tokens":"ten"})", 400, "max_tokens"},
           {R"({"prompt":"x","max_tokens":2.5})", 400, "max_tokens"},
           {R"({"prompt":"x","max_tokens":128})", 400, "max_tokens"},
           {R"({"prompt":"x","temperature":"hot"})", 400, "temperature"},
           {R"({"prompt":"x","temperature":3})", 400, "temperature"},
           {R"({"prompt":"x","top_p":0})", 400, "top_p"},
           {R"({"prompt":"x","top_k":-1})", 400, "top_k"},
           {R"({"prompt":"x","n":2})", 400, "n"},
           {R"({"prompt":"x","stop":5})", 400, "stop"},
           {R"({"prompt":"x","stop":["a","b","c","d","e"]})", 400, "stop"},
           {R"({"prompt":"x","stream":"yes"})", 400, "stream"},
           {R"({"prompt":"x","echo":true})", 400, "echo"},
           {R"({"prompt":"x","logprobs":2})", 400, "logprobs"},
           {R"({"prompt":"x","seed":"abc"})", 400, "seed"},
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
  EXPECT_EQ(Error(std::string(R"({"prompt":")") + std::string(2000, 'a') + "\"}").code,
            "context_length_exceeded");
}

TEST_F(ApiTest, ResponseShapes) {
  ResponseMeta m = NewResponseMeta("tiny", false);
  EXPECT_EQ(m.id.rfind("cmpl-", 0), 0u);
  json c = json::parse(CompletionJson(m, "hi", FinishReason::kLength, {3, 2, 0}));
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["text"], "hi");
  EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(c["usage"]["total_tokens"], 5);
  ResponseMeta chat = NewResponseMeta("tiny", true);
  json cc = json::parse(CompletionJson(chat, "yo", FinishReason::kStop, {3, 2, 0}));
  EXPECT_EQ(cc["object"], "chat.completion");
  EXPECT_EQ(cc["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(cc["choices"][0]["message"]["content"], "yo");
  json first = json::parse(ChunkJson(chat, "", FinishReason::kNone, true));
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  json last = json::parse(ChunkJson(chat, "", FinishReason::kStop));
  EXPECT_TRUE(last["choices"][0]["delta"].empty());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(json::parse(ChunkJson(m, "a", FinishReason::kNone))["choices"][0]["finish_reason"].is_null());
  // invalid UTF-8 from the model never breaks the JSON
  EXPECT_NO_THROW(json::parse(CompletionJson(m, "bad \xff byte", FinishReason::kStop, {})));
  json models = json::parse(ModelsJson("tiny", 1));
  EXPECT_EQ(models["data"][0]["id"], "tiny");
}

}  // namespace
}  // namespace tern
