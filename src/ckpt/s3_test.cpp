// S3Storage against a real S3 API (moto_server on loopback, signature checking on), checked with a client we
// did not write (the aws CLI); and retries against a stub that fails on purpose.
#include <gtest/gtest.h>

#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "ckpt/format.h"
#include "ckpt/s3_storage.h"
#include "testing/moto_suite.h"
#include "testing/processes.h"
#include "testing/skip.h"

namespace tern::ckpt {
namespace {

// Unwraps a Result in an expression (Result's operator* works on lvalues only).
template <typename T>
T V(Result<T> r) {
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : T{};
}

namespace fs = std::filesystem;
using testing::CommandResult;
using testing::RunCommand;

std::string Pattern(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    s[i] = static_cast<char>(seed >> 24);
  }
  return s;
}

constexpr char kS3TestBucket[] = "ckpt";

class S3Test : public testing::MotoSuite<kS3TestBucket> {
 protected:
  S3Options Options() {
    S3Options o;
    o.endpoint = moto_->endpoint;
    o.multipart_threshold = o.part_size = 5u << 20;  // S3's minimum part size
    o.max_attempts = 2;
    o.backoff_s = 0.05;
    return o;
  }
};

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// One test (one moto_server, one aws CLI run: seconds each on a busy machine) for everything: objects,
// multipart, a checkpoint, what the aws CLI sees, and the 403 on a wrong secret.
TEST_F(S3Test, RoundTripMultipartCheckpointAwsCliAndWrongSecret) {
  auto s = S3Storage::Open("s3://ckpt/unit", Options());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const std::string big = Pattern((5u << 20) + 4097, 7);  // two parts
  ASSERT_TRUE((*s)->Put("a/small.txt", "hello").ok());
  Status st = (*s)->Put("a/big.bin", big);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(V((*s)->Get("a/small.txt")), "hello");
  EXPECT_TRUE(V((*s)->Get("a/big.bin")) == big);
  EXPECT_EQ((*s)->Get("a/none").status().code(), Status::Code::kNotFound);
  auto l = (*s)->List("a/");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  ASSERT_EQ(l->size(), 2u);
  EXPECT_EQ((*l)[0].key, "a/big.bin");
  EXPECT_EQ((*l)[0].size, big.size());
  EXPECT_TRUE(V((*s)->Exists("a/small.txt")));
  ASSERT_TRUE((*s)->Put("a/gone.txt", "x").ok());
  ASSERT_TRUE((*s)->Delete("a/gone.txt").ok());
  EXPECT_FALSE(V((*s)->Exists("a/gone.txt")));

  // A checkpoint: published manifest last, verified through the same store.
  auto run = S3Storage::Open("s3://ckpt/run1", Options());
  ASSERT_TRUE(run.ok());
  Snapshot snap;
  snap.step = 5;
  snap.images.emplace_back("tensors.safetensors",
                           std::make_unique<SafetensorsImage>(std::vector<TensorSpec>{{"w", {1000}}},
                                                              std::map<std::string, std::string>{}));
  for (int i = 0; i < 1000; i++) snap.images[0].second->data()[i] = i * 0.5f;
  snap.small_files["trainer.json"] = "{\"step\": 5}";
  ASSERT_TRUE(PersistSnapshot(snap, **run).ok());
  EXPECT_TRUE(VerifyCheckpoint(**run, "step_00000005").ok);

  // A client we did not write downloads it all; the bytes match and the multipart upload is one object.
  const fs::path local = fs::temp_directory_path() / ("tern_s3_test_download_" + std::to_string(::getpid()));
  fs::remove_all(local);
  CommandResult cp =
      RunCommand(moto_->AwsCli() + " s3 cp --only-show-errors --recursive s3://ckpt/ " + local.string());
  ASSERT_EQ(cp.code, 0) << cp.output;
  EXPECT_TRUE(ReadAll(local / "unit/a/big.bin") == big);
  EXPECT_EQ(ReadAll(local / "unit/a/small.txt"), "hello");
  EXPECT_FALSE(fs::exists(local / "unit/a/gone.txt"));
  EXPECT_TRUE(ReadAll(local / "run1/step_00000005/tensors.safetensors") == snap.images[0].second->bytes());
  auto manifest = Manifest::Parse(ReadAll(local / "run1/step_00000005/manifest.json"));
  ASSERT_TRUE(manifest.ok());
  EXPECT_EQ(manifest->step, 5);
  EXPECT_EQ(manifest->files.size(), 2u);
  fs::remove_all(local);

  // Signature checking is on: a wrong secret gets 403 and a clear error that never shows the secret.
  ::setenv("AWS_SECRET_ACCESS_KEY", "definitely-wrong-secret", 1);
  auto denied = S3Storage::Open("s3://ckpt/denied", Options());
  ASSERT_TRUE(denied.ok());
  Status no = (*denied)->Put("x", "data");
  ASSERT_FALSE(no.ok());
  EXPECT_NE(no.message().find("HTTP 403 SignatureDoesNotMatch"), std::string::npos) << no.message();
  EXPECT_NE(no.message().find("check the secret key"), std::string::npos) << no.message();
  EXPECT_EQ(no.message().find("definitely-wrong-secret"), std::string::npos) << "never print secrets";
  EXPECT_EQ(no.message().find(moto_->key_id), std::string::npos) << "the key id is masked too";
}

// A stub that answers 503 twice, then hangs once past the timeout, then succeeds: S3Storage retries through
// it.
TEST(S3Retry, BacksOffOn5xxAndTimeouts) {
  ::setenv("AWS_ACCESS_KEY_ID", "AKIDSTUB", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "stub", 1);
  httplib::Server server;
  std::atomic<int> calls{0};
  std::string stored;
  server.Put(".*", [&](const httplib::Request& req, httplib::Response& res) {
    int n = ++calls;
    if (n <= 2) {
      res.status = 503;
      res.set_content("<Error><Code>SlowDown</Code></Error>", "application/xml");
    } else if (n == 3) {
      std::this_thread::sleep_for(std::chrono::milliseconds(800));
      res.status = 200;
    } else {
      stored = req.body;
      res.status = 200;
    }
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  std::thread t([&] { server.listen_after_bind(); });
  S3Options o;
  o.endpoint = "http://127.0.0.1:" + std::to_string(port);
  o.max_attempts = 5;
  o.backoff_s = 0.01;
  o.timeout_s = 0.3;
  auto s = S3Storage::Open("s3://b/p", o);
  ASSERT_TRUE(s.ok());
  Status st = (*s)->Put("k", "payload");
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(calls.load(), 4);
  EXPECT_EQ(stored, "payload");
  o.max_attempts = 2;
  calls = 0;
  auto s2 = S3Storage::Open("s3://b/p", o);
  Status fail = (*s2)->Put("k", "payload");
  EXPECT_FALSE(fail.ok());
  EXPECT_NE(fail.message().find("gave up after 2 attempts"), std::string::npos) << fail.message();
  server.stop();
  t.join();
}

}  // namespace
}  // namespace tern::ckpt
