// Graceful shutdown (`tern serve` on SIGTERM or a spot notice, DrainServer): while draining, /health is 503
// "draining" and a new request 503 server_shutting_down, and a stream accepted before runs to its [DONE];
// at the drain deadline what still runs is reported, and stopping the engine cancels it.
#include <thread>

#include "testing/server_fixture.h"

namespace tern::testing {
namespace {

class Draining : public ServerTest {
 protected:
  // A streamed completion of max_tokens tokens on a thread (the engine steps every 4 ms: it lasts).
  static std::thread Stream(int max_tokens, HttpResult* out) {
    return std::thread([=] {
      *out =
          Curl("/v1/completions", fmt::format(R"({{"prompt":"And God said","max_tokens":{},"temperature":0,)"
                                              R"("ignore_eos":true,"stream":true}})",
                                              max_tokens));
    });
  }
  static void WaitActive() {
    for (int i = 0; i < 2000 && engine_->active() == 0; i++)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
};

class DrainServerTest : public Draining {};

TEST_F(DrainServerTest, AcceptedRequestsFinishAndNewOnesAreTurnedAway) {
  HttpResult streamed;
  std::thread client = Stream(60, &streamed);
  WaitActive();
  if (engine_->active() == 0) {
    client.join();
    FAIL() << "the request did not start: " << streamed.body;
  }
  server_->StartDrain();
  const HttpResult health = Curl("/health");
  EXPECT_EQ(health.status, 503);
  EXPECT_EQ(Json(health)["status"], "draining");
  const HttpResult turned = Curl("/v1/completions", R"({"prompt":"And","max_tokens":2})");
  EXPECT_EQ(turned.status, 503);
  EXPECT_EQ(Json(turned)["error"]["code"], "server_shutting_down") << turned.body;
  EXPECT_EQ(DrainServer(*server_, *engine_, 30), 0) << "the stream must finish within the drain";
  client.join();
  ASSERT_EQ(streamed.status, 200);
  const std::vector<std::string> events = Events(streamed.body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(streamed.body.find("cancelled"), std::string::npos) << streamed.body;
  int tokens = 0;
  for (const std::string& e : events)
    if (e != "[DONE]" && !Json({200, e})["choices"].empty() &&
        Json({200, e})["choices"][0]["finish_reason"].is_null())
      tokens++;
  EXPECT_EQ(tokens, 60) << "every token of the accepted request";
  EXPECT_EQ(Metrics()["tern_ready"], 0);
}

class DrainDeadlineServerTest : public Draining {};

TEST_F(DrainDeadlineServerTest, WhatOutlivesTheDeadlineIsReportedAndCancelled) {
  HttpResult streamed;
  std::thread client = Stream(100, &streamed);  // 100 steps of >= 4 ms: longer than the deadline
  WaitActive();
  if (engine_->active() == 0) {
    client.join();
    FAIL() << "the request did not start: " << streamed.body;
  }
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(DrainServer(*server_, *engine_, 0.2), 1);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  engine_->Stop();  // as tern serve does after the drain
  client.join();
  EXPECT_NE(streamed.body.find("cancelled"), std::string::npos) << streamed.body;
  EXPECT_EQ(Events(streamed.body).back(), "[DONE]");
}

}  // namespace
}  // namespace tern::testing
