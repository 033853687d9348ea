// response_format over HTTP (the fixture of server_test.cpp): with json_object the untrained test model's
// content is a JSON object (or, cut by max_tokens, a prefix of one), streamed or not; a bad response_format
// is a 400 that names the field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "infer/json_constraint.h"
#include "testing/server_fixture.h"

namespace tern {
namespace {

using json = nlohmann::json;
using testing::HttpResult;
using testing::ServerTest;

// A bias on a few closing byte tokens lets random weights finish an object within the context.
json JsonRequest(uint64_t seed) {
  json bias = json::object();
  for (char c : std::string("\"}]0,:{")) bias[std::to_string(3 + static_cast<uint8_t>(c))] = 4;
  return {{"messages", {{{"role", "user"}, {"content", "Reply in JSON."}}}},
          {"response_format", {{"type", "json_object"}}},
          {"max_tokens", 64},
          {"seed", seed},
          {"logit_bias", bias}};
}

bool IsPrefixOfObject(const std::string& text) {
  JsonRecognizer r;
  return r.Feed(text);
}

TEST_F(ServerTest, JsonObjectContentParses) {
  int stopped = 0;
  for (uint64_t seed = 1; seed <= 6; seed++) {
    HttpResult r = Curl("/v1/chat/completions", JsonRequest(seed).dump());
    ASSERT_EQ(r.status, 200) << r.body;
    const json c = Json(r)["choices"][0];
    const std::string content = c["message"]["content"];
    if (c["finish_reason"] == "stop") {
      stopped++;
      EXPECT_TRUE(json::accept(content) && json::parse(content).is_object()) << content;
    } else {
      EXPECT_EQ(c["finish_reason"], "length");
      EXPECT_TRUE(IsPrefixOfObject(content)) << content;
    }
  }
  EXPECT_GE(stopped, 3);

  // streamed, with two choices: each choice's deltas add up to an object
  json req = JsonRequest(3);
  req["stream"] = true;
  req["n"] = 2;
  HttpResult s = Curl("/v1/chat/completions", req.dump());
  ASSERT_EQ(s.status, 200) << s.body;
  std::string content[2], finish[2];
  for (const std::string& e : Events(s.body)) {
    if (e == "[DONE]") continue;
    const json chunk = json::parse(e);
    for (const json& c : chunk["choices"]) {
      const int i = c["index"];
      if (c["delta"].contains("content")) content[i] += c["delta"]["content"].get<std::string>();
      if (!c["finish_reason"].is_null()) finish[i] = c["finish_reason"];
    }
  }
  for (int i = 0; i < 2; i++) {
    if (finish[i] == "stop") {
      EXPECT_TRUE(json::accept(content[i]) && json::parse(content[i]).is_object()) << content[i];
    } else {
      EXPECT_TRUE(IsPrefixOfObject(content[i])) << content[i];
    }
  }

  // /v1/completions takes it too
  HttpResult comp =
      Curl("/v1/completions",
           json{{"prompt", "{"}, {"max_tokens", 8}, {"response_format", {{"type", "json_object"}}}}.dump());
  ASSERT_EQ(comp.status, 200) << comp.body;
  EXPECT_TRUE(IsPrefixOfObject(Json(comp)["choices"][0]["text"])) << comp.body;
}

TEST_F(ServerTest, BadResponseFormatIsA400NamingTheField) {
  for (const char* rf : {R"("json")", R"({"type":"xml"})", R"({"type":"json_schema","json_schema":{}})"}) {
    HttpResult r =
        Curl("/v1/chat/completions",
             std::string(R"({"messages":[{"role":"user","content":"hi"}],"response_format":)") + rf + "}");
    EXPECT_EQ(r.status, 400) << rf;
    const json err = Json(r)["error"];
    EXPECT_NE(err["param"].get<std::string>().find("response_format"), std::string::npos) << r.body;
  }
}

}  // namespace
}  // namespace tern
