// OpenAI fields end to end over HTTP (the fixture of server_test.cpp): echo with max_tokens 0 (scoring a
// text), best_of, and the order of top_logprobs as the client reads the raw response.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>

#include "testing/server_fixture.h"

namespace tern {
namespace {

using json = nlohmann::json;
using testing::HttpResult;
using testing::ServerTest;

// What evaluation harnesses send: the prompt's logprobs and no new tokens. They must be those an echo with
// max_tokens 1 gives for the same prompt; streamed, one chunk carries it all.
TEST_F(ServerTest, EchoWithZeroMaxTokensScoresThePrompt) {
  const std::string prompt = "And God said unto Moses, I AM THAT I AM";
  const int P = static_cast<int>(run_->tok->Encode(prompt).size());
  json request = {{"prompt", prompt}, {"echo", true}, {"logprobs", 2}, {"max_tokens", 1}, {"temperature", 0}};
  HttpResult one = Curl("/v1/completions", request.dump());
  ASSERT_EQ(one.status, 200) << one.body;
  const json ref = Json(one)["choices"][0]["logprobs"];
  request["max_tokens"] = 0;
  HttpResult zero = Curl("/v1/completions", request.dump());
  ASSERT_EQ(zero.status, 200) << zero.body;
  json j = Json(zero);
  const json& c = j["choices"][0];
  EXPECT_EQ(c["text"], prompt);
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 0);
  EXPECT_EQ(j["usage"]["prompt_tokens"], P);
  const json& lp = c["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), static_cast<size_t>(P)) << lp.dump();
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  for (int t = 0; t < P; t++) {
    EXPECT_EQ(lp["tokens"][t], ref["tokens"][t]) << t;
    EXPECT_EQ(lp["token_logprobs"][t], ref["token_logprobs"][t]) << t;
    EXPECT_EQ(lp["top_logprobs"][t], ref["top_logprobs"][t]) << t;
    EXPECT_EQ(lp["text_offset"][t], ref["text_offset"][t]) << t;
  }

  request["stream"] = true;
  HttpResult s = Curl("/v1/completions", request.dump());
  ASSERT_EQ(s.status, 200) << s.body;
  auto events = Events(s.body);
  ASSERT_EQ(events.size(), 2u) << s.body;
  EXPECT_EQ(events[1], "[DONE]");
  json chunk = json::parse(events[0])["choices"][0];
  EXPECT_EQ(chunk["text"], prompt);
  EXPECT_EQ(chunk["finish_reason"], "length");
  EXPECT_EQ(chunk["logprobs"], lp);

  // without logprobs: the prompt text alone; without echo: refused
  json plain =
      Json(Curl("/v1/completions", json{{"prompt", prompt}, {"echo", true}, {"max_tokens", 0}}.dump()));
  EXPECT_EQ(plain["choices"][0]["text"], prompt);
  EXPECT_TRUE(plain["choices"][0]["logprobs"].is_null());
  HttpResult refused = Curl("/v1/completions", json{{"prompt", prompt}, {"max_tokens", 0}}.dump());
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(Json(refused)["error"]["param"], "max_tokens");
}

// best_of = 4 with a seed draws the same four candidates as n = 4 with that seed (choice i's seed derives
// from the request's); the response keeps the two with the highest mean token logprob, best first. A stop
// string makes the candidates' lengths differ; the seed is one where the two best by mean are neither the
// first two choices nor the two best by sum, so neither mistake passes.
TEST_F(ServerTest, BestOfReturnsTheCandidatesWithTheBestMeanLogprob) {
  json request, a;
  std::vector<int> order(4);
  bool telling = false;
  for (int seed = 1; seed <= 40 && !telling; seed++) {
    request = {{"prompt", "And the earth was"},
               {"max_tokens", 10},
               {"seed", seed},
               {"n", 4},
               {"logprobs", 0},
               {"stop", "e"}};
    HttpResult all = Curl("/v1/completions", request.dump());
    ASSERT_EQ(all.status, 200) << all.body;
    a = Json(all);
    ASSERT_EQ(a["choices"].size(), 4u);
    std::vector<double> mean, sum;
    for (const json& c : a["choices"]) {
      const json& lps = c["logprobs"]["token_logprobs"];
      sum.push_back(0);
      for (const json& x : lps) sum.back() += x.get<double>();
      mean.push_back(lps.empty() ? 0 : sum.back() / lps.size());
    }
    std::vector<int> by_sum(4);
    std::iota(order.begin(), order.end(), 0);
    std::iota(by_sum.begin(), by_sum.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return mean[x] > mean[y]; });
    std::stable_sort(by_sum.begin(), by_sum.end(), [&](int x, int y) { return sum[x] > sum[y]; });
    telling = order[0] != 0 && (order[0] != by_sum[0] || order[1] != by_sum[1]);
  }
  ASSERT_TRUE(telling) << "no seed tells the mean from the sum and from the first choices";

  request.erase("n");
  request.erase("logprobs");
  request["best_of"] = 4;
  request["n"] = 2;
  HttpResult best = Curl("/v1/completions", request.dump());
  ASSERT_EQ(best.status, 200) << best.body;
  json b = Json(best);
  ASSERT_EQ(b["choices"].size(), 2u);
  for (int i = 0; i < 2; i++) {
    EXPECT_EQ(b["choices"][i]["index"], i);
    EXPECT_EQ(b["choices"][i]["text"], a["choices"][order[i]]["text"]) << "rank " << i;
    EXPECT_EQ(b["choices"][i]["finish_reason"], a["choices"][order[i]]["finish_reason"]);
    EXPECT_TRUE(b["choices"][i]["logprobs"].is_null());
  }
  EXPECT_EQ(b["usage"]["completion_tokens"], a["usage"]["completion_tokens"]);  // every candidate is billed
  // with logprobs: the winner's own
  request["n"] = 1;
  request["logprobs"] = 0;
  json w = Json(Curl("/v1/completions", request.dump()));
  ASSERT_EQ(w["choices"].size(), 1u);
  EXPECT_EQ(w["choices"][0]["logprobs"], a["choices"][order[0]]["logprobs"]);
  // greedy candidates are alike, and allowed
  json greedy =
      Json(Curl("/v1/completions", R"({"prompt":"x","max_tokens":3,"temperature":0,"ignore_eos":true,)"
                                   R"("best_of":3})"));
  ASSERT_EQ(greedy["choices"].size(), 1u) << greedy.dump();
  EXPECT_EQ(greedy["usage"]["completion_tokens"], 9);
}

TEST_F(ServerTest, BestOfRules) {
  for (const char* body : {R"({"prompt":"x","n":3,"best_of":2})", R"({"prompt":"x","best_of":17})",
                           R"({"prompt":"x","best_of":2,"stream":true})"}) {
    HttpResult r = Curl("/v1/completions", body);
    EXPECT_EQ(r.status, 400) << body << ": " << r.body;
    EXPECT_EQ(Json(r)["error"]["param"], "best_of") << r.body;
  }
  HttpResult streamed = Curl("/v1/completions", R"({"prompt":"x","n":2,"best_of":2,"stream":true})");
  EXPECT_EQ(streamed.status, 200) << streamed.body;  // best_of = n is plain n
  EXPECT_EQ(Events(streamed.body).back(), "[DONE]");
}

// The raw text, read in order (ordered_json keeps it): a completion's top_logprobs maps and chat's
// top_logprobs arrays list the most likely first, whole and streamed.
TEST_F(ServerTest, TopLogprobsAreMostLikelyFirst) {
  auto descending = [](const nlohmann::ordered_json& top, const std::string& where) {
    double last = 1;
    int entries = 0;
    if (top.is_object()) {
      for (const auto& [k, v] : top.items()) {
        EXPECT_LE(v.get<double>(), last) << where << ": " << top.dump();
        last = v.get<double>();
        entries++;
      }
    } else {
      for (const auto& e : top) {
        EXPECT_LE(e["logprob"].get<double>(), last) << where << ": " << top.dump();
        last = e["logprob"].get<double>();
        entries++;
      }
    }
    return entries;
  };
  const std::string completion =
      R"({"prompt":"In the beginning","max_tokens":8,"seed":4,"ignore_eos":true,"echo":true,"logprobs":5)";
  HttpResult r = Curl("/v1/completions", completion + "}");
  ASSERT_EQ(r.status, 200) << r.body;
  auto j = nlohmann::ordered_json::parse(r.body);
  int entries = 0;
  for (const auto& top : j["choices"][0]["logprobs"]["top_logprobs"])
    if (!top.is_null()) entries += descending(top, "completion");
  EXPECT_GE(entries, 5 * 8);
  HttpResult s = Curl("/v1/completions", completion + R"(,"stream":true})");
  for (const std::string& e : Events(s.body)) {
    if (e == "[DONE]") continue;
    const auto c = nlohmann::ordered_json::parse(e)["choices"][0];
    if (c["logprobs"].is_null()) continue;
    for (const auto& top : c["logprobs"]["top_logprobs"])
      if (!top.is_null()) descending(top, "stream");
  }
  HttpResult chat =
      Curl("/v1/chat/completions", R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":6,"seed":4,)"
                                   R"("ignore_eos":true,"logprobs":true,"top_logprobs":8})");
  ASSERT_EQ(chat.status, 200) << chat.body;
  auto cj = nlohmann::ordered_json::parse(chat.body);
  for (const auto& t : cj["choices"][0]["logprobs"]["content"])
    EXPECT_EQ(descending(t["top_logprobs"], "chat"), 8);
}

// POST /tokenize and /detokenize (vLLM's): the count is what a completion or chat request of the same prompt
// is billed as prompt tokens, the tokens decode back to the text, and errors name the field.
TEST_F(ServerTest, TokenizeCountsWhatARequestIsBilled) {
  const HttpResult t =
      Curl("/tokenize", R"({"prompt":"And God said, Let there be light","return_token_strs":true})");
  ASSERT_EQ(t.status, 200) << t.body;
  const json tj = Json(t);
  const json done =
      Json(Curl("/v1/completions", R"({"prompt":"And God said, Let there be light","max_tokens":1})"));
  EXPECT_EQ(tj["count"], done["usage"]["prompt_tokens"]);
  EXPECT_EQ(tj["tokens"].size(), tj["count"].get<size_t>());
  EXPECT_EQ(tj["token_strs"].size(), tj["count"].get<size_t>());
  EXPECT_EQ(tj["max_model_len"], engine_->max_seq_len());
  const HttpResult back = Curl("/detokenize", json({{"tokens", tj["tokens"]}}).dump());
  ASSERT_EQ(back.status, 200) << back.body;
  EXPECT_EQ(Json(back)["prompt"], "And God said, Let there be light");

  const std::string messages = R"("messages":[{"role":"user","content":"Hello there"}])";
  const json chat_count = Json(Curl("/tokenize", "{" + messages + "}"));
  const json chat = Json(Curl("/v1/chat/completions", "{" + messages + R"(,"max_tokens":1})"));
  EXPECT_EQ(chat_count["count"], chat["usage"]["prompt_tokens"]) << chat_count.dump();
  EXPECT_EQ(chat_count["token_strs"], nullptr);

  const HttpResult bad = Curl("/detokenize", R"({"tokens":[1,-4]})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(Json(bad)["error"]["param"], "tokens");
  EXPECT_EQ(Curl("/tokenize", R"({"prompt":"x","model":"gpt-4"})").status, 404);
  EXPECT_EQ(Curl("/tokenize", R"({"max_tokens":3})").status, 400);
  EXPECT_EQ(Curl("/tokenize", R"({"prompt":"x"})", "").status, 401);
}

}  // namespace
}  // namespace tern
