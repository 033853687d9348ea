// response_format over HTTP (the fixture of server_test.cpp): with json_object the untrained test model's
// content is a JSON object (or, cut by max_tokens, a prefix of one), streamed or not; with json_schema a
// document of the schema; a bad response_format or an unsupported schema keyword is a 400 that names it.
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

// json_schema: the content follows the schema, the properties in its order (not nlohmann's sorted order).
TEST_F(ServerTest, JsonSchemaContentFollowsTheSchema) {
  const std::string schema =
      R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},)"
      R"("ok":{"type":"boolean"},"tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":3}},)"
      R"("required":["name","age","ok","tags"]})";
  int stopped = 0;
  for (uint64_t seed = 1; seed <= 4; seed++) {
    json req = JsonRequest(seed);
    req["max_tokens"] = 96;
    req["response_format"] = {
        {"type", "json_schema"},
        {"json_schema", {{"name", "person"}, {"strict", true}, {"schema", json::parse(schema)}}}};
    // the body's own text keeps the listed order: splice the schema in as written
    std::string body = req.dump();
    const std::string sorted = json::parse(schema).dump();
    body.replace(body.find(sorted), sorted.size(), schema);
    HttpResult r = Curl("/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    const json c = Json(r)["choices"][0];
    const std::string content = c["message"]["content"];
    if (c["finish_reason"] != "stop") continue;
    stopped++;
    ASSERT_TRUE(json::accept(content)) << content;
    const nlohmann::ordered_json v = nlohmann::ordered_json::parse(content);
    ASSERT_TRUE(v.is_object() && v.size() == 4) << content;
    EXPECT_EQ(v.begin().key(), "name") << content;
    EXPECT_TRUE(v["name"].is_string() && v["age"].is_number_integer() && v["ok"].is_boolean()) << content;
    EXPECT_TRUE(v["tags"].is_array() && v["tags"].size() <= 3) << content;
    for (const auto& t : v["tags"]) EXPECT_TRUE(t == "a" || t == "b") << content;
  }
  EXPECT_GE(stopped, 2);
}

TEST_F(ServerTest, UnsupportedSchemaKeywordIsA400WithItsPath) {
  HttpResult r = Curl(
      "/v1/chat/completions",
      R"({"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":)"
      R"({"name":"p","schema":{"type":"object","properties":{"age":{"type":"integer","minimum":0}}}}}})");
  ASSERT_EQ(r.status, 400) << r.body;
  const json err = Json(r)["error"];
  EXPECT_EQ(err["param"], "response_format.json_schema.schema.properties.age.minimum") << r.body;
  EXPECT_NE(err["message"].get<std::string>().find(
                "response_format.json_schema.schema.properties.age.minimum is not supported"),
            std::string::npos)
      << r.body;
}

TEST_F(ServerTest, BadResponseFormatIsA400NamingTheField) {
  for (const char* rf :
       {R"("json")", R"({"type":"xml"})", R"({"type":"json_schema","json_schema":{}})",
        R"({"type":"json_schema"})", R"({"type":"json_schema","json_schema":{"schema":{"type":"string"}}})",
        R"({"type":"json_schema","json_schema":{"schema":{"type":"object"},"extra":1}})"}) {
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
