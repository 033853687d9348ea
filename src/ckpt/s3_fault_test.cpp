// S3 faults that must lose nothing: a fault-injecting proxy (testing/fault_proxy.h) in front of moto_server
// answers 500/503/400, resets connections, stalls past the timeout, or lets a request through and loses the
// answer. tern's S3 storage retries what can be retried, fails clearly otherwise, and a failed save never
// leaves a manifest behind: the previous checkpoint stays the newest valid one and loads.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <memory>

#include "ckpt/format.h"
#include "ckpt/s3_storage.h"
#include "testing/fault_proxy.h"
#include "testing/moto_suite.h"
#include "testing/processes.h"
#include "testing/skip.h"

namespace tern::ckpt {
namespace {

using testing::FaultProxy;
using testing::ProxiedRequest;
using testing::ProxyFault;

constexpr char kS3FaultTestBucket[] = "faults";

class S3FaultTest : public testing::MotoSuite<kS3FaultTestBucket> {
 protected:
  void SetUp() override {
    MotoSuite::SetUp();
    if (Stopped()) return;
    const int port = std::atoi(moto_->endpoint.substr(moto_->endpoint.rfind(':') + 1).c_str());
    proxy_ = std::make_unique<FaultProxy>(port, nullptr, /*stall_s=*/1.5);
  }
  S3Options Options(const std::string& endpoint) {
    S3Options o;
    o.endpoint = endpoint;
    o.multipart_threshold = o.part_size = 5u << 20;  // S3's minimum part size
    o.max_attempts = 4;
    o.backoff_s = 0.02;
    o.timeout_s = 1.0;  // the stall (1.5 s) is a timeout
    return o;
  }
  // Through the proxy, and straight to moto (to look at what really is there).
  std::unique_ptr<S3Storage> Proxied(const std::string& prefix) {
    auto s = S3Storage::Open("s3://faults/" + prefix, Options(proxy_->endpoint()));
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  std::unique_ptr<S3Storage> Direct(const std::string& prefix) {
    auto s = S3Storage::Open("s3://faults/" + prefix, Options(moto_->endpoint));
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  std::unique_ptr<FaultProxy> proxy_;
};

// A checkpoint with a tensor file of `floats` floats (5 MiB and more go up in parts) and trainer.json.
Snapshot MakeSnapshot(int64_t step, size_t floats) {
  Snapshot snap;
  snap.step = step;
  snap.manifest.kind = "periodic";
  snap.images.emplace_back("tensors.safetensors", std::make_unique<SafetensorsImage>(
                                                      std::vector<TensorSpec>{{"w", {int64_t(floats)}}},
                                                      std::map<std::string, std::string>{}));
  for (size_t i = 0; i < floats; i++) snap.images[0].second->data()[i] = float(i % 977) * 0.25f + float(step);
  snap.small_files["trainer.json"] = "{\"step\": " + std::to_string(step) + "}";
  return snap;
}

constexpr size_t kTwoParts = (5u << 20) / 4 + 1000;  // floats: a little over 5 MiB, two parts

bool Exists(Storage& s, const std::string& key) {
  auto e = s.Exists(key);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() && *e;
}

int64_t NewestValid(Storage& s) {
  auto refs = ListCheckpoints(s);
  EXPECT_TRUE(refs.ok()) << refs.status().ToString();
  int64_t newest = -1;
  for (const auto& r : refs.ok() ? *refs : std::vector<CheckpointRef>{})
    if (r.has_manifest && VerifyCheckpoint(s, r.dir).ok) newest = std::max(newest, r.step);
  return newest;
}

// Every second request meets one of the faults, in turn: each is retried and the checkpoint (a multipart
// tensor file, trainer.json, the manifest) arrives whole.
TEST_F(S3FaultTest, TransientFaultsAreRetriedAndTheCheckpointArrivesWhole) {
  const ProxyFault faults[] = {ProxyFault::kStatus500, ProxyFault::kStatus503, ProxyFault::kReset,
                               ProxyFault::kStall, ProxyFault::kForwardThenReset};
  proxy_->SetRule([&](const ProxiedRequest& r) {
    return r.index % 2 == 0 ? faults[(r.index / 2) % 5] : ProxyFault::kForward;
  });
  auto s = Proxied("transient");
  Snapshot snap = MakeSnapshot(7, kTwoParts);
  auto saved = PersistSnapshot(snap, *s);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  std::map<std::string, int> seen;
  for (const auto& r : proxy_->Log()) seen[testing::ProxyFaultName(r.fault)]++;
  for (ProxyFault f : faults) EXPECT_GE(seen[testing::ProxyFaultName(f)], 1) << testing::ProxyFaultName(f);
  auto direct = Direct("transient");
  VerifyReport v = VerifyCheckpoint(*direct, "step_00000007");
  EXPECT_TRUE(v.ok) << (v.problems.empty() ? "" : v.problems[0]);
  auto loaded = LoadCheckpoint(*direct, "step_00000007");
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_TRUE(loaded->files["tensors.safetensors"] == snap.images[0].second->bytes());
}

// The store accepts part 1 of the multipart upload, then fails every later part: the save fails after its
// retries with a message naming the object, leaves no manifest, aborts the upload, and step 1 (saved
// before) is still the newest valid checkpoint and loads. Once the store is back, the next save works.
TEST_F(S3FaultTest, PartAcceptedThenFailuresLeaveThePreviousCheckpoint) {
  auto s = Proxied("parts");
  Snapshot first = MakeSnapshot(1, 1000);
  ASSERT_TRUE(PersistSnapshot(first, *s).ok());
  proxy_->SetRule([](const ProxiedRequest& r) {
    return r.target.find("partNumber=") != std::string::npos &&
                   r.target.find("partNumber=1&") == std::string::npos
               ? ProxyFault::kStatus500
               : ProxyFault::kForward;
  });
  proxy_->ClearLog();
  Snapshot second = MakeSnapshot(2, kTwoParts);
  auto failed = PersistSnapshot(second, *s);
  ASSERT_FALSE(failed.ok());
  const std::string msg = failed.status().message();
  EXPECT_NE(msg.find("gave up after 4 attempts"), std::string::npos) << msg;
  EXPECT_NE(msg.find("step_00000002/tensors.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("saving checkpoint step 2"), std::string::npos) << msg;
  bool aborted = false;
  for (const auto& r : proxy_->Log())
    aborted |= r.method == "DELETE" && r.target.find("uploadId=") != std::string::npos;
  EXPECT_TRUE(aborted) << "the multipart upload is aborted";

  auto direct = Direct("parts");
  EXPECT_FALSE(Exists(*direct, "step_00000002/manifest.json"));
  EXPECT_FALSE(Exists(*direct, "step_00000002/tensors.safetensors"));
  EXPECT_EQ(NewestValid(*direct), 1);
  auto loaded = LoadCheckpoint(*direct, "step_00000001");
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_TRUE(loaded->files["tensors.safetensors"] == first.images[0].second->bytes());

  proxy_->SetRule(nullptr);  // the store is back
  auto again = PersistSnapshot(second, *s);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(NewestValid(*direct), 2);
}

// CompleteMultipartUpload goes through but its answer is lost: the retry meets NoSuchUpload, and the upload
// counts as done because the object is there with its size (before: the save failed and deleted the good
// object). A client error (400) is not retried and says what the store answered.
TEST_F(S3FaultTest, LostCompleteAnswerIsSuccessAndClientErrorsAreNotRetried) {
  auto completes = std::make_shared<int>(0);
  proxy_->SetRule([completes](const ProxiedRequest& r) {
    if (r.method != "POST" || r.target.find("uploadId=") == std::string::npos) return ProxyFault::kForward;
    // The first complete goes through and its answer is lost; the retry hears what S3 says about an
    // upload that no longer exists (moto would accept a second complete).
    return (*completes)++ == 0 ? ProxyFault::kForwardThenReset : ProxyFault::kNoSuchUpload;
  });
  auto s = Proxied("complete");
  Snapshot snap = MakeSnapshot(3, kTwoParts);
  auto saved = PersistSnapshot(snap, *s);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  int lost = 0;
  for (const auto& r : proxy_->Log()) lost += r.fault == ProxyFault::kForwardThenReset;
  EXPECT_EQ(lost, 1) << "the complete request's answer was lost once";
  auto direct = Direct("complete");
  EXPECT_EQ(NewestValid(*direct), 3);

  proxy_->SetRule([](const ProxiedRequest& r) {
    return r.method == "PUT" ? ProxyFault::kStatus400 : ProxyFault::kForward;
  });
  proxy_->ClearLog();
  Snapshot next = MakeSnapshot(4, 1000);
  auto refused = PersistSnapshot(next, *s);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("HTTP 400 InvalidRequest"), std::string::npos)
      << refused.status().message();
  int puts = 0;
  for (const auto& r : proxy_->Log()) puts += r.method == "PUT";
  EXPECT_EQ(puts, 1) << "a 400 is the client's fault: retrying cannot help";
  EXPECT_EQ(NewestValid(*direct), 3);
}

}  // namespace
}  // namespace tern::ckpt
