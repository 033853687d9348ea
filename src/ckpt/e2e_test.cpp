// The tern binary end to end: a spot notice makes `tern train` save and exit 75, and `--resume auto`
// continues bit for bit; a durable tier on a real S3 API (moto, signatures checked) survives the loss of the
// local disk, and the aws CLI sees what was written; `tern ckpt ls|verify|export|gc` name damage and exit 1.
#include <gtest/gtest.h>

#include <httplib.h>
#include <unistd.h>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "testing/metrics_rows.h"
#include "testing/processes.h"
#include "testing/skip.h"
#include "testing/tiny_config.h"

namespace tern::ckpt {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;
using testing::RunCommand;

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class E2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* b = std::getenv("TERN_BINARY_DIR");
    tern_ = std::string(b ? b : "build") + "/tern";
    // One directory per process: ctest runs each test case as its own process, in parallel.
    root_ = fs::temp_directory_path() / ("tern_ckpt_e2e_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    const std::string data =
        testing::SharedPreparedData([](const std::string& corpus, const std::string& out) {
          CommandResult r = RunCommand(tern_ + " prepare --input " + corpus + " --out " + out +
                                       " --vocab-size 300 --val-fraction 0.1 --threads 1");
          EXPECT_EQ(r.code, 0) << r.output;
          return r.code == 0;
        });
    ASSERT_FALSE(data.empty());
    // Constant LR after warmup, so a run may be extended (train.steps is a safe change) and still match a
    // reference run of the extended length bit for bit.
    std::ofstream(root_ / "tiny.yaml") << testing::TinyTrainYaml(
        data,
        {.n_layer = 2, .total_batch_tokens = 256, .warmup_steps = 2, .lr = "3.0e-3", .schedule = "constant"});
  }
  // `tern train` on the tiny config, single-threaded (bit-exactness holds per thread count; one thread
  // also keeps OpenMP barriers from stalling on a busy machine).
  static CommandResult Train(const std::string& run, const std::string& args, const std::string& env = "") {
    return RunCommand("OMP_NUM_THREADS=1 " + env + " " + tern_ + " train " + (root_ / "tiny.yaml").string() +
                      " --quiet --set run.dir=" + (root_ / run).string() + " " + args);
  }
  static std::map<int, double> Losses(const std::string& run) {
    return testing::StepLosses((root_ / run).string());
  }
  static nlohmann::json Event(const std::string& run, const std::string& event) {
    std::ifstream in(root_ / run / "metrics.jsonl");
    std::string line;
    nlohmann::json last;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line);
      if (j.value("event", "") == event) last = j;
    }
    return last;
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }
  static std::string tern_;
  static fs::path root_;
};
std::string E2eTest::tern_;
fs::path E2eTest::root_;

TEST_F(E2eTest, SpotNoticeSavesExitsWith75ThenResumesBitForBit) {
  // An IMDSv2 stub: token, then 404 for the first polls, then a terminate notice two minutes ahead.
  httplib::Server imds;
  std::atomic<int> polls{0};
  imds.Put("/latest/api/token",
           [](const httplib::Request&, httplib::Response& res) { res.set_content("T", "text/plain"); });
  imds.Get("/latest/meta-data/spot/instance-action", [&](const httplib::Request& req,
                                                         httplib::Response& res) {
    if (req.get_header_value("X-aws-ec2-metadata-token") != "T" || ++polls < 3) {
      res.status = 404;
      return;
    }
    std::time_t when = std::time(nullptr) + 120;
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&when));
    res.set_content(std::string("{\"action\":\"terminate\",\"time\":\"") + buf + "\"}", "application/json");
  });
  const int port = imds.bind_to_any_port("127.0.0.1");
  std::thread server([&] { imds.listen_after_bind(); });

  CommandResult a = Train("spot",
                          "--set train.steps=100000 --set ckpt.every=50 --set ckpt.notice_poll_s=0.05 "
                          "--set ckpt.notice_url=http://127.0.0.1:" +
                              std::to_string(port));
  imds.stop();
  server.join();
  ASSERT_EQ(a.code, 75) << a.output;
  EXPECT_NE(a.output.find("preempted (aws spot instance-action: terminate)"), std::string::npos) << a.output;
  nlohmann::json pre = Event("spot", "preempted");
  ASSERT_FALSE(pre.is_null());
  EXPECT_TRUE(pre["saved"].get<bool>());
  EXPECT_NEAR(pre["window_s"].get<double>(), 120, 3);
  EXPECT_GT(pre["margin_s"].get<double>(), 100) << "saved well inside the two-minute window";
  const int k = pre["step"].get<int>();
  ASSERT_GT(k, 0);
  ASSERT_LT(k, 100000);

  CommandResult b = Train("spot", "--resume auto --set train.steps=" + std::to_string(k + 5));
  ASSERT_EQ(b.code, 0) << b.output;
  EXPECT_EQ(Event("spot", "resume")["step"].get<int>(), k);
  CommandResult ref = Train("spot_ref", "--set train.steps=" + std::to_string(k + 5));
  ASSERT_EQ(ref.code, 0) << ref.output;
  EXPECT_EQ(Losses("spot"), Losses("spot_ref")) << "every loss bit for bit";
  EXPECT_TRUE(ReadAll(root_ / "spot/model.safetensors") == ReadAll(root_ / "spot_ref/model.safetensors"))
      << "final weights identical";
}

TEST_F(E2eTest, SigtermSavesAndExits75) {
  testing::Child c({tern_, "train", (root_ / "tiny.yaml").string(), "--quiet", "--set",
                    "run.dir=" + (root_ / "term").string(), "--set", "train.steps=1000000"},
                   {{"OMP_NUM_THREADS", "1"}});
  // Signal once training runs (a SIGTERM before the handlers are installed just ends the process: there is
  // nothing to save yet).
  const auto t0 = std::chrono::steady_clock::now();
  while (Losses("term").empty() && c.Running() &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  c.Signal(SIGTERM);
  EXPECT_EQ(c.Wait(), 75);
  nlohmann::json pre = Event("term", "preempted");
  EXPECT_EQ(pre["source"], "SIGTERM");
  EXPECT_TRUE(pre["saved"].get<bool>());
  CommandResult v = RunCommand(tern_ + " ckpt verify " + (root_ / "term").string());
  EXPECT_EQ(v.code, 0) << v.output;
}

TEST_F(E2eTest, DurableS3TierSurvivesLosingTheLocalDisk) {
  auto moto = testing::StartMoto("ckpt");
  if (!moto->skip_reason.empty()) TERN_SKIP_OR_FAIL_IN_CI("no S3 server: " << moto->skip_reason);
  const std::string creds = "AWS_ACCESS_KEY_ID=" + moto->key_id + " AWS_SECRET_ACCESS_KEY=" + moto->secret +
                            " AWS_REGION=us-east-1";
  const std::string s3 =
      "--set ckpt.durable=s3://ckpt/e2e --set ckpt.durable_every=5 --set ckpt.s3_endpoint=" + moto->endpoint;
  CommandResult a = Train("s3", s3 + " --set ckpt.every=2", creds);
  ASSERT_EQ(a.code, 0) << a.output;
  // A client we did not write sees the checkpoint, manifest included, and the weights bytes match ours.
  const fs::path dl = root_ / "s3_download";
  // (The whole bucket: moto_server rejects signed list prefixes containing '/', from any client.)
  CommandResult cp =
      RunCommand(moto->AwsCli() + " s3 cp --only-show-errors --recursive s3://ckpt/ " + dl.string());
  ASSERT_EQ(cp.code, 0) << cp.output;
  for (const char* f : {"manifest.json", "tensors.safetensors", "optimizer.safetensors", "trainer.json"})
    EXPECT_TRUE(fs::exists(dl / "e2e/step_00000010" / f)) << f;
  EXPECT_TRUE(ReadAll(dl / "e2e/step_00000010/tensors.safetensors") ==
              ReadAll(root_ / "s3/checkpoints/step_00000010/tensors.safetensors"));
  // The instance (and its disk) is gone: only the durable tier remains.
  fs::remove_all(root_ / "s3/checkpoints");
  CommandResult b = Train("s3", s3 + " --resume auto --set train.steps=14", creds);
  ASSERT_EQ(b.code, 0) << b.output;
  EXPECT_EQ(Event("s3", "resume")["from"], "s3://ckpt/e2e/step_00000010");
  CommandResult ref = Train("s3_ref", "--set train.steps=14");
  ASSERT_EQ(ref.code, 0) << ref.output;
  EXPECT_EQ(Losses("s3"), Losses("s3_ref"));
  CommandResult v =
      RunCommand(creds + " " + tern_ + " ckpt verify s3://ckpt/e2e --s3-endpoint " + moto->endpoint);
  EXPECT_EQ(v.code, 0) << v.output;
  // A wrong secret: the save fails with a clear 403, and ckpt.on_error=stop ends the run with exit 1.
  CommandResult bad =
      Train("s3_denied", s3 + " --set ckpt.on_error=stop",
            "AWS_ACCESS_KEY_ID=" + moto->key_id + " AWS_SECRET_ACCESS_KEY=wrong AWS_REGION=us-east-1");
  EXPECT_EQ(bad.code, 1) << bad.output;
  EXPECT_NE(bad.output.find("HTTP 403"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("check the secret key"), std::string::npos) << bad.output;
  EXPECT_EQ(bad.output.find("wrong"), std::string::npos) << "the secret is never printed";
}

// The data goes where the checkpoints go: prepared once and published to S3, a run's data.dir names it, and a
// relaunch on a machine that has neither the run's disk nor the data fetches both and continues exactly.
TEST_F(E2eTest, DataOnS3FollowsTheJobToAFreshMachine) {
  auto moto = testing::StartMoto("ckpt");
  if (!moto->skip_reason.empty()) TERN_SKIP_OR_FAIL_IN_CI("no S3 server: " << moto->skip_reason);
  const std::string creds = "AWS_ACCESS_KEY_ID=" + moto->key_id + " AWS_SECRET_ACCESS_KEY=" + moto->secret +
                            " AWS_REGION=us-east-1";
  std::ofstream(root_ / "corpus.txt") << testing::SmallCorpus();
  CommandResult prep =
      RunCommand(creds + " " + tern_ + " prepare --input " + (root_ / "corpus.txt").string() +
                 " --out s3://ckpt/data/small --vocab-size 300 --val-fraction 0.1 --threads 1" +
                 " --s3-endpoint " + moto->endpoint + " --cache-dir " + (root_ / "machine_a").string());
  ASSERT_EQ(prep.code, 0) << prep.output;
  EXPECT_NE(prep.output.find("published"), std::string::npos) << prep.output;
  EXPECT_NE(prep.output.find("data.dir=s3://ckpt/data/small"), std::string::npos) << "the next command";

  const std::string on_s3 = "--set data.dir=s3://ckpt/data/small --set ckpt.s3_endpoint=" + moto->endpoint;
  auto on = [&](const std::string& machine) { return " --set data.cache_dir=" + (root_ / machine).string(); };
  const std::string durable = " --set ckpt.durable=s3://ckpt/data-run --set ckpt.durable_every=5";
  CommandResult a = Train("s3data", on_s3 + on("machine_a") + durable, creds);
  ASSERT_EQ(a.code, 0) << a.output;
  EXPECT_EQ(Event("s3data", "start").value("data_fetch_bytes", -1), 0)
      << "prepare kept its copy on machine A";
  // Machine B: no run disk, no data.
  fs::remove_all(root_ / "s3data/checkpoints");
  CommandResult b =
      Train("s3data", on_s3 + on("machine_b") + durable + " --resume auto --set train.steps=14", creds);
  ASSERT_EQ(b.code, 0) << b.output;
  EXPECT_EQ(Event("s3data", "resume")["from"], "s3://ckpt/data-run/step_00000010");
  EXPECT_GT(Event("s3data", "start").value("data_fetch_bytes", 0), 1000) << "machine B fetched the data";
  CommandResult ref = Train("s3data_ref", on_s3 + on("machine_a") + " --set train.steps=14", creds);
  ASSERT_EQ(ref.code, 0) << ref.output;
  EXPECT_EQ(Losses("s3data"), Losses("s3data_ref"));
  // tern eval on the run reads its data.dir from the store too (its config names the endpoint).
  CommandResult ev = RunCommand(creds + " TERN_DATA_CACHE=" + (root_ / "machine_d").string() + " " + tern_ +
                                " eval " + (root_ / "s3data").string());
  EXPECT_EQ(ev.code, 0) << ev.output;
  EXPECT_NE(ev.output.find("on s3://ckpt/data/small/val_*.bin: loss"), std::string::npos) << ev.output;

  // --verify reads the store afresh: a flipped byte in a shard there is named, though both machines hold
  // good copies.
  CommandResult v = RunCommand(creds + " " + tern_ + " prepare --verify s3://ckpt/data/small --s3-endpoint " +
                               moto->endpoint + " --cache-dir " + (root_ / "machine_c").string());
  EXPECT_EQ(v.code, 0) << v.output;
  EXPECT_NE(v.output.find("verified s3://ckpt/data/small"), std::string::npos) << v.output;
  const fs::path shard = root_ / "shard.bin";
  ASSERT_EQ(RunCommand(moto->AwsCli() + " s3 cp --only-show-errors s3://ckpt/data/small/train_000.bin " +
                       shard.string())
                .code,
            0);
  std::string bytes = ReadAll(shard);
  bytes[bytes.size() - 2] ^= 1;
  std::ofstream(shard, std::ios::binary | std::ios::trunc) << bytes;
  ASSERT_EQ(RunCommand(moto->AwsCli() + " s3 cp --only-show-errors " + shard.string() +
                       " s3://ckpt/data/small/train_000.bin")
                .code,
            0);
  CommandResult bad =
      RunCommand(creds + " " + tern_ + " prepare --verify s3://ckpt/data/small --s3-endpoint " +
                 moto->endpoint + " --cache-dir " + (root_ / "machine_c").string());
  EXPECT_EQ(bad.code, 1) << bad.output;
  EXPECT_NE(bad.output.find("train_000.bin"), std::string::npos) << bad.output;
}

TEST_F(E2eTest, CkptCliListsVerifiesExportsAndCollects) {
  ASSERT_EQ(Train("cli", "--set train.steps=12 --set ckpt.every=4 --set ckpt.keep_last=0").code, 0);
  const std::string run = (root_ / "cli").string();
  CommandResult ok = RunCommand(tern_ + " ckpt verify " + run);
  EXPECT_EQ(ok.code, 0) << ok.output;
  EXPECT_NE(ok.output.find("3 checkpoint(s) checked, 0 damaged"), std::string::npos) << ok.output;
  // Damage: truncate step 12's weights, drop step 8's manifest.
  fs::resize_file(run + "/checkpoints/step_00000012/tensors.safetensors", 100);
  fs::remove(run + "/checkpoints/step_00000008/manifest.json");
  CommandResult bad = RunCommand(tern_ + " ckpt verify " + run);
  EXPECT_EQ(bad.code, 1) << bad.output;
  EXPECT_NE(bad.output.find("tensors.safetensors: 100 bytes"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("truncated"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("manifest.json missing"), std::string::npos) << bad.output;
  EXPECT_EQ(RunCommand(tern_ + " ckpt verify " + run + "/checkpoints/step_00000004").code, 0);
  CommandResult ls = RunCommand(tern_ + " ckpt ls " + run + " --json");
  ASSERT_EQ(ls.code, 0) << ls.output;
  auto j = nlohmann::json::parse(ls.output);
  ASSERT_EQ(j[0]["checkpoints"].size(), 3u);
  EXPECT_FALSE(j[0]["checkpoints"][1]["complete"].get<bool>());
  // export takes the newest checkpoint that verifies: step 4
  CommandResult ex = RunCommand(tern_ + " ckpt export " + run + " --out " + run + "/export.safetensors");
  ASSERT_EQ(ex.code, 0) << ex.output;
  EXPECT_NE(ex.output.find("(step 4)"), std::string::npos) << ex.output;
  EXPECT_NE(ex.output.find("skipped damaged"), std::string::npos) << ex.output;
  // gc never removes the newest checkpoint that verifies; --force clears the damaged and unfinished ones.
  CommandResult gc = RunCommand(tern_ + " ckpt gc " + run + " --keep-last 1 --force --json");
  ASSERT_EQ(gc.code, 0) << gc.output;
  auto g = nlohmann::json::parse(gc.output);
  EXPECT_EQ(g[0]["kept"], nlohmann::json::array({4}));
  EXPECT_EQ(RunCommand(tern_ + " ckpt verify " + run).code, 0);
}

}  // namespace
}  // namespace tern::ckpt
