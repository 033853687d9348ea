// Preemption notices: a local stub answers like AWS IMDSv2 and GCP metadata; signals set the flag.
#include <gtest/gtest.h>

#include <httplib.h>

#include <atomic>
#include <csignal>
#include <ctime>
#include <thread>

#include "ckpt/preemption.h"

namespace tern::ckpt {
namespace {

// Unwraps a Result in an expression (Result's operator* works on lvalues only).
template <typename T>
T V(Result<T> r) {
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : T{};
}

// Answers like the metadata services: IMDSv2 needs a token from PUT /latest/api/token; GCP needs the
// Metadata-Flavor header. Nothing is announced until `armed`.
struct MetadataStub {
  httplib::Server server;
  std::thread thread;
  std::atomic<bool> armed{false};
  std::atomic<int> token_puts{0}, unauthorised{0};
  int port = 0;

  MetadataStub() {
    server.Put("/latest/api/token", [&](const httplib::Request& req, httplib::Response& res) {
      token_puts++;
      if (!req.has_header("X-aws-ec2-metadata-token-ttl-seconds")) {
        res.status = 400;
        return;
      }
      res.set_content("TOKEN123", "text/plain");
    });
    server.Get("/latest/meta-data/spot/instance-action",
               [&](const httplib::Request& req, httplib::Response& res) {
                 if (req.get_header_value("X-aws-ec2-metadata-token") != "TOKEN123") {
                   unauthorised++;
                   res.status = 401;
                   return;
                 }
                 if (!armed) {
                   res.status = 404;
                   return;
                 }
                 std::time_t when = std::time(nullptr) + 120;
                 char buf[32];
                 std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&when));
                 res.set_content(std::string("{\"action\": \"terminate\", \"time\": \"") + buf + "\"}",
                                 "application/json");
               });
    server.Get("/computeMetadata/v1/instance/preempted",
               [&](const httplib::Request& req, httplib::Response& res) {
                 if (req.get_header_value("Metadata-Flavor") != "Google") {
                   res.status = 403;
                   return;
                 }
                 res.set_content(armed ? "TRUE" : "FALSE", "text/plain");
               });
    port = server.bind_to_any_port("127.0.0.1");
    thread = std::thread([this] { server.listen_after_bind(); });
  }
  ~MetadataStub() {
    server.stop();
    thread.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
};

TEST(Preemption, AwsImdsV2TokenThenInstanceAction) {
  MetadataStub stub;
  PreemptionOptions o;
  o.url = stub.url();
  o.kind = "aws";
  std::string token;
  PreemptionNotice n;
  auto r = PreemptionWatcher::PollOnce(o, &token, &n);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(*r) << "404: nothing planned";
  EXPECT_EQ(token, "TOKEN123");
  stub.armed = true;
  r = PreemptionWatcher::PollOnce(o, &token, &n);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(*r);
  EXPECT_EQ(n.source, "aws spot instance-action: terminate");
  EXPECT_NEAR(n.window_s, 120, 3) << "the window comes from the notice's time";
  EXPECT_EQ(stub.token_puts.load(), 1) << "the token is reused";
  EXPECT_EQ(stub.unauthorised.load(), 0);
}

TEST(Preemption, GcpPreemptedWithMetadataFlavor) {
  MetadataStub stub;
  PreemptionOptions o;
  o.url = stub.url();
  o.kind = "gcp";
  o.signal_window_s = 30;
  std::string token;
  PreemptionNotice n;
  EXPECT_FALSE(V(PreemptionWatcher::PollOnce(o, &token, &n)));
  stub.armed = true;
  EXPECT_TRUE(V(PreemptionWatcher::PollOnce(o, &token, &n)));
  EXPECT_EQ(n.window_s, 30);
}

TEST(Preemption, PollerThreadRaisesTheFlag) {
  MetadataStub stub;
  PreemptionOptions o;
  o.url = stub.url();
  o.poll_s = 0.05;
  o.signals = false;
  auto w = PreemptionWatcher::Start(o);
  ASSERT_TRUE(w.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_FALSE((*w)->notified());
  stub.armed = true;
  auto t0 = std::chrono::steady_clock::now();
  while (!(*w)->notified() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE((*w)->notified());
}

TEST(Preemption, UnreachableEndpointIsNotANotice) {
  PreemptionOptions o;
  o.url = "http://127.0.0.1:1";  // nothing listens there
  std::string token;
  PreemptionNotice n;
  EXPECT_FALSE(PreemptionWatcher::PollOnce(o, &token, &n).ok());
}

TEST(Preemption, SigusrSetsTheFlagAndHandlersAreRestored) {
  {
    auto w = PreemptionWatcher::Start({});
    ASSERT_TRUE(w.ok());
    EXPECT_FALSE((*w)->notified());
    std::raise(SIGUSR1);
    EXPECT_TRUE((*w)->notified());
    EXPECT_EQ((*w)->notice().source, "SIGUSR1");
    std::raise(SIGTERM);  // a second signal is absorbed: the first notice stands
    EXPECT_EQ((*w)->notice().source, "SIGUSR1");
  }
  struct sigaction now {};
  sigaction(SIGTERM, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
}

}  // namespace
}  // namespace tern::ckpt
