// The server end to end over loopback, with the real curl binary as the client (without curl: skipped, or
// failed under CI): completions and chat, streaming, usage, stop strings, models, health, metrics as
// Prometheus text, bad input and auth, 32 concurrent streams with disconnects, and the prefix cache.
#include "serve/server.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "infer/setup.h"
#include "testing/server_fixture.h"
#include "testing/test_run.h"

namespace tern {
namespace {

using json = nlohmann::json;
using testing::HttpResult;
using testing::kKey;
using testing::Quote;
using testing::ServerTest;
using testing::Shell;

TEST_F(ServerTest, HealthModelsAndMetrics) {
  EXPECT_EQ(Curl("/health", "", "").status, 200);
  HttpResult models = Curl("/v1/models");
  ASSERT_EQ(models.status, 200) << models.body;
  EXPECT_EQ(Json(models)["data"][0]["id"], "tiny");
  EXPECT_EQ(Json(Curl("/v1/models/tiny"))["object"], "model");
  EXPECT_EQ(Curl("/v1/models/other").status, 404);
  auto m = Metrics();
  for (const char* name : {"tern_kv_cache_blocks_used", "tern_kv_cache_blocks_free", "tern_queue_length",
                           "tern_prefix_cache_hits_total", "tern_time_to_first_token_seconds_count",
                           "tern_time_per_output_token_seconds_count", "tern_batch_size_count",
                           "tern_prompt_tokens_total", "tern_generation_tokens_total"})
    EXPECT_TRUE(m.count(name)) << name;
}

TEST_F(ServerTest, CompletionsStreamingAndUsage) {
  const std::string body =
      R"({"model":"tiny","prompt":"And God said","max_tokens":12,"temperature":0,"ignore_eos":true)";
  HttpResult r = Curl("/v1/completions", body + "}");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = Json(r);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);
  EXPECT_EQ(j["usage"]["prompt_tokens"], run_->tok->Encode("And God said").size());
  EXPECT_EQ(j["usage"]["total_tokens"], j["usage"]["prompt_tokens"].get<int>() + 12);
  const std::string text = j["choices"][0]["text"];

  HttpResult s = Curl("/v1/completions", body + R"(,"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_EQ(s.status, 200);
  auto events = Events(s.body);
  ASSERT_GE(events.size(), 3u) << s.body;
  EXPECT_EQ(events.back(), "[DONE]");
  std::string streamed;
  std::string finish;
  for (size_t i = 0; i + 1 < events.size(); i++) {
    json c = json::parse(events[i]);
    if (c["choices"].empty()) {  // the usage chunk
      EXPECT_EQ(c["usage"]["completion_tokens"], 12);
      continue;
    }
    streamed += c["choices"][0]["text"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(finish, "length");

  // stop strings: cut the greedy text at a piece of itself
  ASSERT_GT(text.size(), 6u);
  const std::string stop = text.substr(text.size() / 2, 2);
  json withstop = Json(Curl("/v1/completions", body + R"(,"stop":)" + json(stop).dump() + "}"));
  EXPECT_EQ(withstop["choices"][0]["text"], text.substr(0, text.find(stop)));
  EXPECT_EQ(withstop["choices"][0]["finish_reason"], "stop");
}

TEST_F(ServerTest, ChatCompletions) {
  const std::string body =
      R"({"model":"tiny","messages":[{"role":"user","content":"Hello"}],"max_tokens":6,"seed":3)";
  HttpResult r = Curl("/v1/chat/completions", body + "}");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = Json(r);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_string());
  HttpResult s = Curl("/v1/chat/completions", body + R"(,"stream":true})");
  auto events = Events(s.body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(json::parse(events[0])["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(json::parse(events[0])["object"], "chat.completion.chunk");
  EXPECT_EQ(events.back(), "[DONE]");
  std::string streamed;
  for (size_t i = 1; i + 1 < events.size(); i++)
    streamed += json::parse(events[i])["choices"][0]["delta"].value("content", "");
  EXPECT_EQ(streamed, j["choices"][0]["message"]["content"]);  // same seed, same text
}

// n, echo and logprobs on /v1/completions, whole and streamed.
TEST_F(ServerTest, CompletionsWithNEchoAndLogprobs) {
  const std::string prompt = "And God said";
  const int P = static_cast<int>(run_->tok->Encode(prompt).size());
  json request = {{"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true},
                  {"n", 2},           {"echo", true},    {"logprobs", 3}};
  HttpResult r = Curl("/v1/completions", request.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  json j = Json(r);
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["usage"]["prompt_tokens"], P);  // counted once for both choices
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);
  for (int i = 0; i < 2; i++) {
    const json& c = j["choices"][i];
    EXPECT_EQ(c["index"], i);
    const std::string text = c["text"];
    EXPECT_EQ(text.substr(0, prompt.size()), prompt);  // echo: prompt + completion
    const json& lp = c["logprobs"];
    ASSERT_EQ(lp["tokens"].size(), static_cast<size_t>(P + 6)) << lp.dump();
    ASSERT_EQ(lp["token_logprobs"].size(), lp["tokens"].size());
    ASSERT_EQ(lp["text_offset"].size(), lp["tokens"].size());
    EXPECT_TRUE(lp["token_logprobs"][0].is_null());  // the first prompt token has no logprob
    EXPECT_TRUE(lp["top_logprobs"][0].is_null());
    std::string joined;
    for (size_t t = 0; t < lp["tokens"].size(); t++) {
      EXPECT_EQ(lp["text_offset"][t], static_cast<int>(joined.size()))
          << t;  // ASCII text: bytes = characters
      joined += lp["tokens"][t].get<std::string>();
      if (t == 0) continue;
      // greedy: each generated token is the most likely one, so its logprob is the top entry's
      double best = -1e30;
      for (const auto& [tok, v] : lp["top_logprobs"][t].items()) best = std::max(best, v.get<double>());
      EXPECT_LE(lp["top_logprobs"][t].size(), 4u);
      if (static_cast<int>(t) >= P) {
        EXPECT_DOUBLE_EQ(lp["token_logprobs"][t].get<double>(), best) << t;
      }
    }
    EXPECT_EQ(joined, text);
  }
  EXPECT_EQ(j["choices"][0]["text"], j["choices"][1]["text"]);  // greedy: both choices alike

  // streamed: each choice's chunks add up to its text, and every generated token's chunk carries logprobs
  request["stream"] = true;
  HttpResult s = Curl("/v1/completions", request.dump());
  auto events = Events(s.body);
  ASSERT_GE(events.size(), 4u) << s.body;
  EXPECT_EQ(events.back(), "[DONE]");
  std::vector<std::string> texts(2);
  std::vector<int> tokens(2), finishes(2);
  for (size_t e = 0; e + 1 < events.size(); e++) {
    json c = json::parse(events[e])["choices"][0];
    const int i = c["index"];
    texts[i] += c["text"].get<std::string>();
    if (!c["logprobs"].is_null()) tokens[i] += static_cast<int>(c["logprobs"]["tokens"].size());
    finishes[i] += !c["finish_reason"].is_null();
  }
  for (int i = 0; i < 2; i++) {
    EXPECT_EQ(texts[i], j["choices"][i]["text"]);
    EXPECT_EQ(tokens[i], P + 6);
    EXPECT_EQ(finishes[i], 1);
  }
}

TEST_F(ServerTest, ChatLogprobsAndSeededChoices) {
  const std::string body =
      R"({"messages":[{"role":"user","content":"Hello"}],"max_tokens":5,"seed":11,"n":3,"ignore_eos":true,)"
      R"("logprobs":true,"top_logprobs":2})";
  HttpResult r = Curl("/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  json j = Json(r);
  ASSERT_EQ(j["choices"].size(), 3u);
  for (int i = 0; i < 3; i++) {
    const json& c = j["choices"][i];
    EXPECT_EQ(c["index"], i);
    const json& content = c["logprobs"]["content"];
    ASSERT_EQ(content.size(), 5u) << c.dump();
    for (const json& t : content) {
      EXPECT_TRUE(t["token"].is_string());
      EXPECT_LE(t["logprob"].get<double>(), 0.0);
      EXPECT_TRUE(t["bytes"].is_array() || t["bytes"].is_null());
      EXPECT_EQ(t["top_logprobs"].size(), 2u);
    }
  }
  // same seed, same three texts
  json again = Json(Curl("/v1/chat/completions", body));
  for (int i = 0; i < 3; i++)
    EXPECT_EQ(again["choices"][i]["message"]["content"], j["choices"][i]["message"]["content"]);
}

TEST_F(ServerTest, BadInputGetsTheRightStatusAndTheServerKeepsServing) {
  auto expect = [](const HttpResult& r, int status, const std::string& param) {
    EXPECT_EQ(r.status, status) << r.body;
    json j = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << "not an OpenAI error object: " << r.body;
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_TRUE(j["error"]["type"].is_string());
    if (!param.empty()) {
      EXPECT_EQ(j["error"]["param"], param) << r.body;
    }
  };
  expect(Curl("/v1/completions", "{\"prompt\": \"x\""), 400, "");
  expect(Curl("/v1/completions", R"({"prompt":"x","max_tokens":"many"})"), 400, "max_tokens");
  expect(Curl("/v1/completions", R"({"prompt":"x","model":"gpt-4o"})"), 404, "model");
  expect(Curl("/v1/completions", R"({"prompt":"x","max_tokens":0})"), 400, "max_tokens");
  expect(Curl("/v1/completions", R"({"prompt":"x","max_tokens":100000})"), 400, "max_tokens");
  expect(Curl("/v1/completions", R"({"prompt":""})"), 400, "prompt");
  expect(Curl("/v1/completions", R"({"prompt":"x","logprobs":6})"), 400, "logprobs");
  expect(Curl("/v1/completions", R"({"prompt":"x","n":0})"), 400, "n");
  expect(Curl("/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})"),
         400, "top_logprobs");
  expect(Curl("/v1/chat/completions", R"({"messages":"hi"})"), 400, "messages");
  expect(Curl("/v1/completions", R"({"prompt":"x"})", ""), 401, "");
  expect(Curl("/v1/completions", R"({"prompt":"x"})", "sk-wrong"), 401, "");
  expect(Curl("/metrics", "", "sk-wrong"), 401, "");
  expect(Curl("/v1/nothing-here"), 404, "");
  // a 10 MB body: refused with 413 (the limit is 256 KB here)
  testing::TempDir dir;
  testing::WriteFile(dir / "big.json", "{\"prompt\": \"" + std::string(10 << 20, 'a') + "\"}");
  const std::string big = Shell("curl -s -H 'Expect:' -w '\\n%{http_code}' -H " +
                                Quote(std::string("Authorization: Bearer ") + kKey) + " --data-binary @" +
                                dir / "big.json " + Quote(Url("/v1/completions")));
  expect(Split(big), 413, "");
  // still serving
  EXPECT_EQ(Curl("/v1/completions", R"({"prompt":"x","max_tokens":2})").status, 200);
}

TEST_F(ServerTest, ThirtyTwoStreamsSomeLeavingEarlyLeakNothing) {
  const uint64_t cancelled_before = metrics_->finished_cancelled;
  std::vector<std::future<std::string>> clients;
  for (int i = 0; i < 32; i++) {
    const bool leaves = i % 4 == 1;  // 8 clients hang up after their first few chunks
    const std::string body = fmt::format(
        R"({{"prompt":"Verse {}: and the light","max_tokens":{},"stream":true,"ignore_eos":true,"seed":{}}})",
        i, leaves ? 100 : 24, i);
    std::string cmd = CurlCommand("/v1/completions", body);
    if (leaves) cmd += " | head -c 600";
    clients.push_back(std::async(std::launch::async, [cmd] { return Shell(cmd); }));
  }
  int completed = 0;
  for (int i = 0; i < 32; i++) {
    const std::string out = clients[i].get();
    if (i % 4 == 1) continue;
    EXPECT_NE(out.find("data: [DONE]"), std::string::npos) << "client " << i << ": " << out.substr(0, 300);
    completed += out.find("\"finish_reason\":\"length\"") != std::string::npos;
  }
  EXPECT_EQ(completed, 24);
  // Every slot and block comes back; departed clients were noticed and cancelled.
  std::map<std::string, double> m;
  for (int i = 0; i < 100; i++) {
    m = Metrics();
    if (m["tern_kv_cache_blocks_used"] == 0 && m["tern_running_sequences"] == 0 &&
        m["tern_queue_length"] == 0)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(m["tern_kv_cache_blocks_used"], 0);
  EXPECT_EQ(m["tern_kv_cache_blocks_reserved"], 0);
  EXPECT_EQ(m["tern_running_sequences"], 0);
  EXPECT_EQ(m["tern_queue_length"], 0);
  EXPECT_GE(metrics_->finished_cancelled - cancelled_before, 1u);
  EXPECT_EQ(engine_->active(), 0);
}

TEST_F(ServerTest, RepeatedLongPromptHitsThePrefixCache) {
  std::string prompt;  // about 80 tokens: several blocks, within the tiny model's 128-token context
  while (run_->tok->Encode(prompt).size() < 80)
    prompt += "And the evening and the morning were the first day. ";
  const std::string body = json{{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}}.dump();
  const int prompt_tokens = static_cast<int>(run_->tok->Encode(prompt).size());
  ASSERT_GT(prompt_tokens, 32);
  HttpResult r1 = Curl("/v1/completions", body);
  ASSERT_EQ(r1.status, 200) << r1.body;
  json first = Json(r1);
  auto m0 = Metrics();
  json second = Json(Curl("/v1/completions", body));
  auto m1 = Metrics();
  EXPECT_EQ(second["choices"][0]["text"], first["choices"][0]["text"]);
  const int cached = (prompt_tokens - 1) / 16 * 16;
  EXPECT_EQ(second["usage"]["prompt_tokens_details"]["cached_tokens"], cached);
  EXPECT_EQ(m1["tern_prefill_tokens_total"] - m0["tern_prefill_tokens_total"], prompt_tokens - cached);
  EXPECT_EQ(m1["tern_prefix_cache_hit_tokens_total"] - m0["tern_prefix_cache_hit_tokens_total"], cached);
  EXPECT_GT(m1["tern_prefix_cache_hits_total"], m0["tern_prefix_cache_hits_total"]);
}

// A server of its own: 503 while the model loads, then 429 when the queue is full. Its engine is never
// started, so a submitted request stays queued.
TEST(ServerLifecycle, LoadingThenFullQueue) {
  if (system("curl --version >/dev/null 2>&1") != 0)
    TERN_SKIP_OR_FAIL_IN_CI("curl is not installed (scripts/install-deps)");
  auto run = testing::MakeTestRun();
  ServeMetrics metrics;
  auto be = MakeCpuFastBackend();
  EngineSetup setup;
  setup.kv_cache_mb = 4;
  setup.engine.max_batch = 2;
  setup.engine.max_batch_tokens = 16;
  setup.engine.max_queue = 1;
  auto engine = MakeEngine(be.get(), run->cfg, run->params, run->tok.get(), setup, &metrics);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  ServerOptions so;
  so.port = 0;
  so.model_name = "tiny";
  Server server(so, &metrics);
  ASSERT_TRUE(server.Bind().ok());
  std::thread serving([&] { server.Serve(); });
  const std::string url = "http://127.0.0.1:" + std::to_string(server.port());
  const std::string post =
      "curl -s -w '\\n%{http_code}' -H 'Content-Type: application/json' -d "
      "'{\"prompt\":\"x\",\"max_tokens\":2}' ";
  auto status = [](const std::string& out) { return std::atoi(out.c_str() + out.rfind('\n') + 1); };
  EXPECT_EQ(status(Shell("curl -s -w '\\n%{http_code}' " + url + "/health")), 503);
  EXPECT_EQ(status(Shell(post + url + "/v1/completions")), 503);
  server.SetEngine(engine->get(), {"tiny", run->tok.get(), (*engine)->max_seq_len()});
  EXPECT_EQ(status(Shell("curl -s -w '\\n%{http_code}' " + url + "/health")), 200);
  auto queued =
      std::async(std::launch::async, [&] { return Shell(post + "--max-time 3 " + url + "/v1/completions"); });
  for (int i = 0; i < 100 && metrics.queue_length == 0; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::string refused = Shell(post + "-D - " + url + "/v1/completions");
  EXPECT_EQ(status(refused), 429) << refused;
  EXPECT_NE(refused.find("Retry-After: 1"), std::string::npos);
  EXPECT_NE(refused.find("rate_limit_exceeded"), std::string::npos);
  (*engine)->Stop();  // the queued request ends (cancelled) instead of waiting for its client's timeout
  queued.get();
  server.Stop();
  serving.join();
}

}  // namespace
}  // namespace tern
