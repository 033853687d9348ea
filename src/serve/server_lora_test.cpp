// Multi-LoRA over HTTP (`tern serve BASE --lora NAME=PATH`): /v1/models lists each adapter with its parent,
// a request naming an adapter gets the merged model's completion (an engine over MergeLoraOnHost's weights,
// built here), the base model's name or none gets the base model's, an unknown name is a 404 that lists what
// is served, and usage is counted per model in /metrics.
#include "testing/server_fixture.h"

namespace tern::testing {
namespace {

class LoraServerTest : public ServerTest {
 protected:
  static void SetUpTestSuite() {
    ServerOptions so = DefaultOptions();
    so.adapters = {{"psalms", "runs/psalms"}, {"law", "models:/law@production"}};
    StartServer(so);
  }
  static std::string Body(const std::string& model) {
    std::string body = R"({"prompt":"And God said","max_tokens":8,"temperature":0,"ignore_eos":true)";
    if (!model.empty()) body += R"(,"model":")" + model + "\"";
    return body + "}";
  }
  // The greedy completion of Body() by an engine of its own over `params` (no server, no adapters).
  static std::string Direct(const std::vector<float>& params) {
    return GreedyText(*run_, params, "And God said", 8);
  }
};

TEST_F(LoraServerTest, ModelsListTheAdaptersWithTheirParent) {
  const json list = Json(Curl("/v1/models"));
  ASSERT_EQ(list["data"].size(), 3u) << list.dump();
  EXPECT_EQ(list["data"][0]["id"], "tiny");
  EXPECT_FALSE(list["data"][0].contains("parent"));
  EXPECT_EQ(list["data"][1]["id"], "psalms");
  EXPECT_EQ(list["data"][2]["id"], "law");
  EXPECT_EQ(list["data"][2]["parent"], "tiny");
  const HttpResult one = Curl("/v1/models/law");
  EXPECT_EQ(one.status, 200);
  EXPECT_EQ(Json(one)["parent"], "tiny");
  EXPECT_EQ(Curl("/v1/models/gospels").status, 404);
}

TEST_F(LoraServerTest, EachAdapterAnswersAsItsMergedModel) {
  const std::string base = Direct(run_->params);
  for (size_t i = 0; i < 2; i++) {
    const std::string name = i == 0 ? "psalms" : "law";
    const HttpResult r = Curl("/v1/completions", Body(name));
    ASSERT_EQ(r.status, 200) << r.body;
    const json j = Json(r);
    EXPECT_EQ(j["model"], name);
    const std::string text = j["choices"][0]["text"];
    EXPECT_EQ(text, Direct(MergedLoraParams(*run_, adapters_[i]))) << name;
    EXPECT_NE(text, base) << name
                          << ": the adapter must change the completion for this test to mean anything";
  }
  // The base model, named or not, in a chat request too.
  for (const std::string& model : {std::string("tiny"), std::string()}) {
    const json j = Json(Curl("/v1/completions", Body(model)));
    EXPECT_EQ(j["model"], "tiny");
    EXPECT_EQ(j["choices"][0]["text"], base);
  }
  const json chat =
      Json(Curl("/v1/chat/completions",
                R"({"model":"law","messages":[{"role":"user","content":"Hi"}],"max_tokens":3})"));
  EXPECT_EQ(chat["model"], "law") << chat.dump();
}

TEST_F(LoraServerTest, UnknownModelsAre404AndUsageIsCountedPerModel) {
  const HttpResult r = Curl("/v1/completions", Body("gospels"));
  EXPECT_EQ(r.status, 404);
  const std::string message = Json(r)["error"]["message"];
  EXPECT_NE(message.find("'tiny', 'psalms', 'law'"), std::string::npos) << message;

  const double before = Metrics()["tern_usage_model_requests_total{model=\"psalms\"}"];
  ASSERT_EQ(Curl("/v1/completions", Body("psalms")).status, 200);
  const auto m = Metrics();  // parsed strictly as Prometheus text
  EXPECT_EQ(m.at("tern_usage_model_requests_total{model=\"psalms\"}"), before + 1);
  EXPECT_GE(m.at("tern_usage_model_generation_tokens_total{model=\"psalms\"}"), 8);
}

}  // namespace
}  // namespace tern::testing
