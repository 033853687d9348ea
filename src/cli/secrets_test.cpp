// No secret in anything tern writes: a short `tern train` checkpointing to S3 (moto_server on loopback,
// signatures checked) with real credentials, one with a wrong secret (the 403 path, where a message could
// quote what it signed with), then `tern serve` with an API key answering requests (one with a wrong key)
// and /metrics. Every file under the test's directory (metrics.jsonl, config.yaml, summary.json, the
// checkpoints' manifests and trainer.json, the logs, the captured stdout/stderr), the objects in the bucket,
// and the HTTP answers are searched for the secret values: none may appear (docs/hardening.md).
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "testing/prepared_data.h"
#include "testing/processes.h"
#include "testing/skip.h"
#include "testing/tern_binary.h"
#include "testing/tiny_config.h"

namespace tern {
namespace {

namespace fs = std::filesystem;
using testing::RunCommand;

// Values no one would write by chance: any hit is a leak.
constexpr char kApiKey[] = "sk-tern-SECRET-api-key-5c1f0e9a7b";
constexpr char kWrongApiKey[] = "sk-tern-WRONG-api-key-81d2aa40c6";
constexpr char kWrongSecret[] = "tern/WRONG+secret-access-key-0f9e8d7c6b5a";
// --api-keys: several keys with projects and a limit (their usage log and usage file are searched too)
constexpr char kProjectKeyA[] = "sk-tern-SECRET-project-a-3e1b77c2d9";
constexpr char kProjectKeyB[] = "sk-tern-SECRET-project-b-a4f06e18b5";

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class SecretsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tern_ = testing::FindTernBinary();
    ASSERT_FALSE(tern_.empty()) << "build the tern binary first (cmake --build build --target tern)";
    moto_ = testing::StartMoto("secrets");
    if (!moto_->skip_reason.empty()) TERN_SKIP_OR_FAIL_IN_CI("no S3 server: " << moto_->skip_reason);
    data_ = testing::SharedSmallPreparedData();
    ASSERT_FALSE(data_.empty()) << "preparing the small corpus failed";
    root_ = fs::temp_directory_path() / ("tern_secrets_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    std::ofstream(root_ / "tiny.yaml") << testing::TinyTrainYaml(
        data_, {.steps = 4,
                .warmup_steps = 1,
                .eval_every = 2,
                .eval_batches = 1,
                .more = "ckpt: {every: 2, durable: s3://secrets/run, durable_every: 2, s3_endpoint: " +
                        moto_->endpoint + "}\n"});
  }
  void TearDown() override {
    if (!root_.empty()) fs::remove_all(root_);
  }
  // `tern train` with these credentials; stdout and stderr go to files under the test's directory.
  int Train(const std::string& run, const std::string& secret, const std::string& extra = "") {
    const std::string out = (root_ / (run + ".stdout")).string(), err = (root_ / (run + ".stderr")).string();
    return RunCommand("AWS_ACCESS_KEY_ID=" + moto_->key_id + " AWS_SECRET_ACCESS_KEY='" + secret +
                      "' AWS_REGION=us-east-1 OMP_NUM_THREADS=1 " + tern_.string() + " train " +
                      (root_ / "tiny.yaml").string() + " --price-per-hour 1 --set run.dir=" +
                      (root_ / run).string() + " " + extra + " > " + out + " 2> " + err)
        .code;
  }

  fs::path tern_, root_;
  std::unique_ptr<testing::Moto> moto_;
  std::string data_;
};

TEST_F(SecretsTest, NoCredentialOrApiKeyInFilesLogsOrMetrics) {
  ASSERT_EQ(Train("run", moto_->secret), 0) << ReadAll(root_ / "run.stderr");
  // The credentials did their job: the durable tier is in the bucket.
  const fs::path s3_copy = root_ / "s3_objects";
  auto cp =
      RunCommand(moto_->AwsCli() + " s3 cp --only-show-errors --recursive s3://secrets/ " + s3_copy.string());
  ASSERT_EQ(cp.code, 0) << cp.output;
  ASSERT_TRUE(fs::exists(s3_copy / "run/step_00000004/manifest.json"));
  // A wrong secret: S3 answers 403 and tern says so (ckpt.on_error=stop ends the run with the message).
  EXPECT_NE(Train("denied", kWrongSecret, "--set ckpt.on_error=stop"), 0);
  const std::string denied = ReadAll(root_ / "denied.stdout") + ReadAll(root_ / "denied.stderr");
  EXPECT_NE(denied.find("403"), std::string::npos) << denied;

  const int port = testing::FreePort();
  std::map<std::string, std::string> answers;  // what the server sent back, by request
  {
    testing::Child serve({tern_.string(), "serve", (root_ / "run").string(), "--port", std::to_string(port),
                          "--api-key", kApiKey, "--log-requests", "--threads", "1", "--max-seq-len", "32"},
                         {}, (root_ / "serve.log").string());
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60);
    const httplib::Headers auth = {{"Authorization", std::string("Bearer ") + kApiKey}};
    bool up = false;
    for (int i = 0; i < 600 && !up && serve.Running(); i++) {
      auto r = c.Get("/health");
      up = r && r->status == 200;
      if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_TRUE(up) << ReadAll(root_ / "serve.log");
    auto post = [&](const std::string& name, const std::string& path, const std::string& body,
                    const httplib::Headers& h, int want) {
      auto r = c.Post(path, h, body, "application/json");
      ASSERT_TRUE(r) << name;
      EXPECT_EQ(r->status, want) << name << ": " << r->body;
      answers[name] = r->body;
    };
    post("completion", "/v1/completions", R"({"prompt":"And God","max_tokens":4,"temperature":0})", auth,
         200);
    post("chat", "/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":3})",
         auth, 200);
    post("stream", "/v1/completions", R"({"prompt":"x","max_tokens":3,"stream":true})", auth, 200);
    post("wrong key", "/v1/completions", R"({"prompt":"x"})",
         {{"Authorization", std::string("Bearer ") + kWrongApiKey}}, 401);
    post("bad body", "/v1/completions", R"({"prompt":)", auth, 400);
    for (const char* path : {"/v1/models", "/metrics"}) {
      auto r = c.Get(path, auth);
      ASSERT_TRUE(r) << path;
      EXPECT_EQ(r->status, 200) << path;
      answers[path] = r->body;
    }
    EXPECT_NE(answers["/metrics"].find("tern_"), std::string::npos) << answers["/metrics"];
    serve.Signal(SIGTERM);
    serve.Wait();
  }
  {  // several keys: per-project usage, a 429, the usage log and file, a key given as key_env
    // The keys file holds a key by design: it lives outside the scanned directory.
    const fs::path keys = root_.string() + "_keys.yaml";
    std::ofstream(keys) << "keys:\n  - id: team-a\n    key: " << kProjectKeyA
                        << "\n    project: search\n    requests_per_min: 1\n"
                        << "  - id: team-b\n    key_env: TERN_SECRETS_TEST_KEY\n    project: ads\n";
    const int port2 = testing::FreePort();
    testing::Child serve({tern_.string(), "serve", (root_ / "run").string(), "--port", std::to_string(port2),
                          "--api-keys", keys.string(), "--usage-log", (root_ / "usage.jsonl").string(),
                          "--usage-file", (root_ / "usage.json").string(), "--price-per-hour", "2",
                          "--log-requests", "--threads", "1", "--max-seq-len", "32"},
                         {{"TERN_SECRETS_TEST_KEY", kProjectKeyB}}, (root_ / "serve_keys.log").string());
    httplib::Client c("127.0.0.1", port2);
    c.set_read_timeout(60);
    bool up = false;
    for (int i = 0; i < 600 && !up && serve.Running(); i++) {
      auto r = c.Get("/health");
      up = r && r->status == 200;
      if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_TRUE(up) << ReadAll(root_ / "serve_keys.log");
    const auto bearer = [](const char* k) {
      return httplib::Headers{{"Authorization", std::string("Bearer ") + k}};
    };
    const std::string body = R"({"prompt":"And God","max_tokens":2})";
    for (const auto& [name, key, want] :
         std::vector<std::tuple<std::string, const char*, int>>{{"key a", kProjectKeyA, 200},
                                                                {"key a over its limit", kProjectKeyA, 429},
                                                                {"key b", kProjectKeyB, 200},
                                                                {"wrong project key", kWrongApiKey, 401}}) {
      auto r = c.Post("/v1/completions", bearer(key), body, "application/json");
      ASSERT_TRUE(r) << name;
      EXPECT_EQ(r->status, want) << name << ": " << r->body;
      if (want == 429) {
        EXPECT_TRUE(r->has_header("Retry-After")) << name;
      }
      answers[name] = r->body;
    }
    auto m = c.Get("/metrics", bearer(kProjectKeyB));
    ASSERT_TRUE(m);
    EXPECT_NE(m->body.find("key_id=\"team-a\""), std::string::npos) << m->body;
    answers["/metrics with --api-keys"] = m->body;
    serve.Signal(SIGTERM);
    serve.Wait();
    fs::remove(keys);
  }

  const std::map<std::string, std::string> secrets = {
      {"AWS access key id", moto_->key_id},   {"AWS secret access key", moto_->secret},
      {"the wrong AWS secret", kWrongSecret}, {"the API key", kApiKey},
      {"the wrong API key", kWrongApiKey},    {"project key a", kProjectKeyA},
      {"project key b", kProjectKeyB}};
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(root_)) {
    if (!e.is_regular_file()) continue;
    files++;
    const std::string text = ReadAll(e.path());
    for (const auto& [what, value] : secrets)
      EXPECT_EQ(text.find(value), std::string::npos) << what << " appears in " << e.path();
  }
  for (const auto& [name, body] : answers)
    for (const auto& [what, value] : secrets)
      EXPECT_EQ(body.find(value), std::string::npos) << what << " appears in the answer to " << name;
  // What was scanned: the runs' files, their checkpoints, the bucket's copy, the logs.
  for (const char* f :
       {"run/metrics.jsonl", "run/config.yaml", "run/summary.json", "run.stdout", "run.stderr",
        "denied.stderr", "serve.log", "serve_keys.log", "usage.jsonl", "usage.json",
        "run/checkpoints/step_00000004/manifest.json", "run/checkpoints/step_00000004/trainer.json"})
    EXPECT_TRUE(fs::exists(root_ / f)) << f;
  EXPECT_GT(files, 20);
}

}  // namespace
}  // namespace tern
