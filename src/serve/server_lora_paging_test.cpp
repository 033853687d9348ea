// Many LoRA adapters served from a few in memory (`tern serve --max-loaded-loras N`, adapter_pager.h): five
// adapters, two in memory. Every adapter answers as its merged model whether or not it was in memory when
// asked, the least recently used one leaves memory (not one just used), the counters count each read-back
// and eviction, concurrent requests over more adapters than fit all answer right, and the load and unload
// routes keep the cap.
#include <atomic>
#include <thread>

#include "serve/adapter_pager.h"
#include "testing/server_fixture.h"

namespace tern::testing {
namespace {

class LoraPagingServerTest : public ServerTest {
 public:
  static void SetUpTestSuite() {
    ServerOptions so = DefaultOptions();
    for (int i = 1; i <= 5; i++)
      so.adapters.push_back({"a" + std::to_string(i), "seed:" + std::to_string(i)});
    so.max_loaded_loras = 2;
    so.allow_lora_updates = true;
    // "seed:N" is RandomLoraAdapter seed N; "once:N" too, the first time only (then its file is gone).
    so.lora_loader = [](const std::string& path) -> Result<LoraAdapter> {
      static std::atomic<int> once_reads{0};
      if (path.rfind("once:", 0) == 0 && once_reads++ == 0) return Seeded(std::stoi(path.substr(5)));
      if (path.rfind("seed:", 0) != 0) return Status::NotFound(path + ": no such file or directory");
      return Seeded(std::stoi(path.substr(5)));
    };
    StartServer(so);
  }
  static LoraAdapter Seeded(int seed) {
    return RandomLoraAdapter(*run_, 4, kLoraAllTargets, 8.0f, static_cast<uint32_t>(seed));
  }
  static HttpResult Complete(const std::string& model) {
    return Curl("/v1/completions",
                R"({"prompt":"And God said","max_tokens":6,"temperature":0,"ignore_eos":true,"model":")" +
                    model + "\"}");
  }
  // What adapter `seed` answers: the greedy text of the model with it merged in.
  static const std::string& Expected(int seed) {
    static std::map<int, std::string> texts;
    auto it = texts.find(seed);
    if (it == texts.end())
      it = texts.emplace(seed, GreedyText(*run_, MergedLoraParams(*run_, Seeded(seed)), "And God said", 6))
               .first;
    return it->second;
  }
  static std::string Text(const HttpResult& r) {
    const json j = Json(r);
    return j.is_object() && j.contains("choices") ? j["choices"][0]["text"].get<std::string>() : r.body;
  }
  static double Loads() { return Metrics()["tern_lora_loads_total"]; }
  static double Evictions() { return Metrics()["tern_lora_evictions_total"]; }
  static double InMemory() { return Metrics()["tern_lora_adapters"]; }
};

// a1..a5 in turn: each answers as its merged model, in memory or read back; two stay, a4 and a5.
void UseAllInTurn() {
  for (int i = 1; i <= 5; i++) {
    const HttpResult r = LoraPagingServerTest::Complete("a" + std::to_string(i));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(LoraPagingServerTest::Text(r), LoraPagingServerTest::Expected(i)) << "a" << i;
  }
}

TEST_F(LoraPagingServerTest, EveryAdapterAnswersAndTheLeastRecentlyUsedLeaves) {
  UseAllInTurn();
  EXPECT_EQ(InMemory(), 2);
  const double loads0 = Loads(), evictions0 = Evictions();
  auto step = [&](int i, double loads) {
    EXPECT_EQ(Text(Complete("a" + std::to_string(i))), Expected(i)) << "a" << i;
    EXPECT_EQ(Loads() - loads0, loads) << "after a" << i;
  };
  step(5, 0);  // in memory: a4, a5
  step(1, 1);  // a4 (least recently used) leaves
  step(4, 2);  // a5 leaves
  step(1, 2);  // in memory
  step(2, 3);  // a4 leaves, not a1: a1 was used since
  step(1, 3);
  EXPECT_EQ(Evictions() - evictions0, 3);
  EXPECT_EQ(InMemory(), 2);
  EXPECT_GT(Metrics()["tern_lora_load_seconds_total"], 0);

  // Every served adapter is listed, in memory or not; the base model still answers.
  const json list = Json(Curl("/v1/models"));
  ASSERT_EQ(list["data"].size(), 6u) << list.dump();
  EXPECT_EQ(Complete("tiny").status, 200);
  EXPECT_EQ(Complete("a9").status, 404);
}

TEST_F(LoraPagingServerTest, ConcurrentRequestsOverMoreAdaptersThanFit) {
  // 15 requests at once over five adapters with two in memory: each is read back, retired while others
  // still use it, and read back again, and every answer is its own adapter's.
  std::vector<std::thread> clients;
  std::vector<HttpResult> results(15);
  for (int k = 0; k < 15; k++)
    clients.emplace_back([k, &results] { results[k] = Complete("a" + std::to_string(k % 5 + 1)); });
  for (auto& t : clients) t.join();
  for (int k = 0; k < 15; k++) {
    ASSERT_EQ(results[k].status, 200) << results[k].body;
    EXPECT_EQ(Text(results[k]), Expected(k % 5 + 1)) << "request " << k;
  }
  // Retired adapters' weights are freed once their requests end: the engine holds at most the cap again.
  for (int i = 0; i < 100 && InMemory() > 2; i++) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_LE(InMemory(), 2);
}

TEST_F(LoraPagingServerTest, LoadAndUnloadRoutesKeepTheCap) {
  UseAllInTurn();  // in memory: a4, a5
  const HttpResult loaded =
      Curl("/v1/load_lora_adapter", json({{"lora_name", "a6"}, {"lora_path", "seed:6"}}).dump());
  ASSERT_EQ(loaded.status, 200) << loaded.body;
  EXPECT_EQ(InMemory(), 2) << "the load retired one to make room";
  EXPECT_EQ(Text(Complete("a6")), Expected(6));
  // a1 is not in memory: it unloads all the same, and is gone.
  const HttpResult gone = Curl("/v1/unload_lora_adapter", json({{"lora_name", "a1"}}).dump());
  ASSERT_EQ(gone.status, 200) << gone.body;
  EXPECT_EQ(Complete("a1").status, 404);
  EXPECT_EQ(InMemory(), 2);

  // A source that cannot be read back once its adapter left memory: 503 naming the adapter and its source.
  ASSERT_EQ(
      Curl("/v1/load_lora_adapter", json({{"lora_name", "once"}, {"lora_path", "once:7"}}).dump()).status,
      200);
  EXPECT_EQ(Text(Complete("once")), Expected(7));
  EXPECT_EQ(Text(Complete("a2")), Expected(2));
  EXPECT_EQ(Text(Complete("a3")), Expected(3));  // "once" is the least recently used now: it leaves
  const HttpResult lost = Complete("once");
  EXPECT_EQ(lost.status, 503) << lost.body;
  const std::string message = Json(lost)["error"]["message"];
  EXPECT_NE(message.find("'once'"), std::string::npos) << message;
  EXPECT_NE(message.find("once:7"), std::string::npos) << message;
  EXPECT_EQ(Text(Complete("a2")), Expected(2)) << "the others still answer";
}

}  // namespace
}  // namespace tern::testing
