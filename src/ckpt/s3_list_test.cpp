// A ListObjectsV2 that never ends: a loopback server (cpp-httplib) answers every list call with the same
// truncated page and the same continuation token. tern's S3 storage stops at the repeated token with an
// error that says so, instead of listing forever.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <cstdlib>
#include <thread>

#include "ckpt/s3_storage.h"

namespace tern::ckpt {
namespace {

TEST(S3List, ARepeatedContinuationTokenIsAnErrorNotALoop) {
  httplib::Server server;
  std::atomic<int> calls{0};
  server.Get(".*", [&](const httplib::Request& req, httplib::Response& res) {
    calls++;
    const bool first = !req.has_param("continuation-token");
    res.set_content(
        std::string("<?xml version=\"1.0\"?><ListBucketResult><IsTruncated>true</IsTruncated>") +
            "<Contents><Key>ckpt/step_" + (first ? "1" : "2") + "/manifest.json</Key><Size>3</Size>" +
            "</Contents><NextContinuationToken>same-token</NextContinuationToken></ListBucketResult>",
        "application/xml");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread t([&] { server.listen_after_bind(); });
  ::setenv("AWS_ACCESS_KEY_ID", "test", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "test", 1);
  ::setenv("AWS_REGION", "us-east-1", 1);
  S3Options o;
  o.endpoint = "http://127.0.0.1:" + std::to_string(port);
  o.max_attempts = 1;
  auto s3 = S3Storage::Open("s3://bucket", o);
  ASSERT_TRUE(s3.ok()) << s3.status().ToString();
  auto listed = (*s3)->List("ckpt");
  server.stop();
  t.join();
  ASSERT_FALSE(listed.ok()) << "listed " << listed->size() << " keys";
  EXPECT_NE(listed.status().message().find("'same-token' twice"), std::string::npos)
      << listed.status().ToString();
  EXPECT_NE(listed.status().message().find("s3://bucket/ckpt"), std::string::npos)
      << listed.status().ToString();
  EXPECT_EQ(calls.load(), 2) << "the first page, then the page that hands the same token back";
}

}  // namespace
}  // namespace tern::ckpt
