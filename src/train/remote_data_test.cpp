// Prepared data on S3 (a real S3 API on loopback: moto): published with prepare.json last, mirrored into a
// verified local cache that a second run reuses without a byte read, an interrupted fetch resumed, a damaged
// or missing object refused by name with nothing kept, a prefix holding another dataset refused without
// force, and a run on s3:// data equal, step for step, to the same run on the local directory.
#include <gtest/gtest.h>

#include <filesystem>

#include "ckpt/storage.h"
#include "core/file_util.h"
#include "data/prepare.h"
#include "testing/files.h"
#include "testing/moto_suite.h"
#include "testing/prepared_data.h"
#include "train/remote_data.h"
#include "train/trainer.h"

namespace tern {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

constexpr char kBucket[] = "datasets";

class RemoteDataTest : public testing::MotoSuite<kBucket> {
 protected:
  void SetUp() override {
    MotoSuite::SetUp();
    if (Stopped()) return;
    data_ = testing::SharedSmallPreparedData();
    ASSERT_FALSE(data_.empty());
    s3_.endpoint = moto_->endpoint;
  }

  DataMirrorOptions Mirror(const std::string& cache) const {
    DataMirrorOptions o;
    o.cache_dir = tmp_ / cache;
    o.s3 = s3_;
    o.progress = nullptr;
    return o;
  }

  // A unique prefix per test: the suite shares one bucket.
  std::string Uri(const std::string& name) const {
    return std::string("s3://") + kBucket + "/" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name() + "/" + name;
  }

  std::unique_ptr<ckpt::Storage> Store(const std::string& uri) const {
    auto s = ckpt::OpenStorage(uri, s3_);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  std::string data_;
  ckpt::S3Options s3_;
  TempDir tmp_;
};

std::string Read(const std::string& path) {
  auto r = ReadFileToString(path);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : std::string();
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST_F(RemoteDataTest, PublishedDataIsMirroredVerifiedAndCached) {
  const std::string uri = Uri("small");
  auto pub = PublishPreparedData(data_, uri, /*force=*/false, s3_, nullptr);
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  EXPECT_EQ(pub->files, static_cast<int>(Names(data_).size()));

  auto m = MirrorPreparedData(uri, Mirror("cache"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->fetched, m->files);
  EXPECT_EQ(Names(m->local_dir), Names(data_));
  for (const std::string& name : Names(data_))
    EXPECT_EQ(Read(m->local_dir + "/" + name), Read(data_ + "/" + name)) << name;
  EXPECT_FALSE(fs::exists(m->local_dir + ".partial"));

  // A second run on this machine reads nothing but the listing and prepare.json.
  auto again = MirrorPreparedData(uri, Mirror("cache"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->fetched, 0);
  EXPECT_EQ(again->fetched_bytes, 0u);
  EXPECT_EQ(again->local_dir, m->local_dir);

  // The same dataset published again uploads nothing.
  auto same = PublishPreparedData(data_, uri, false, s3_, nullptr);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->files, 0);
}

// A chat dataset's loss masks travel with their shards, and are checked as they are.
TEST_F(RemoteDataTest, ChatDataKeepsItsLossMasks) {
  std::string lines;
  for (int i = 0; i < 100; i++)
    lines += R"({"messages": [{"role": "user", "content": "Verse )" + std::to_string(i) +
             R"(?"}, {"role": "assistant", "content": "Amen."}]})" + "\n";
  testing::WriteFile(tmp_ / "chats.jsonl", lines);
  const std::string chat = tmp_ / "chat";
  ASSERT_TRUE(testing::PrepareChatWithTokenizerOf(data_, tmp_ / "chats.jsonl", chat, 0.1));
  ASSERT_TRUE(fs::exists(chat + "/train_000.mask.bin"));
  const std::string uri = Uri("chat");
  ASSERT_TRUE(PublishPreparedData(chat, uri, false, s3_, nullptr).ok());
  auto m = MirrorPreparedData(uri, Mirror("cache"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(Names(m->local_dir), Names(chat));
  EXPECT_EQ(Read(m->local_dir + "/train_000.mask.bin"), Read(chat + "/train_000.mask.bin"));

  std::string mask = Read(chat + "/train_000.mask.bin");  // a flipped mask value is caught too
  mask[mask.size() - 1] ^= 0x01;
  ASSERT_TRUE(Store(uri)->Put("train_000.mask.bin", mask).ok());
  auto bad = MirrorPreparedData(uri, Mirror("fresh-cache"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("train_000.mask.bin"), std::string::npos) << bad.status().message();
  // A mask missing from the store is not a dataset without masks: refused by name.
  ASSERT_TRUE(Store(uri)->Delete("train_000.mask.bin").ok());
  auto lacking = MirrorPreparedData(uri, Mirror("fresh-cache"));
  ASSERT_FALSE(lacking.ok());
  EXPECT_NE(lacking.status().message().find("lacks train_000.mask.bin"), std::string::npos)
      << lacking.status().message();
}

TEST_F(RemoteDataTest, AnInterruptedFetchResumesWhereItStopped) {
  const std::string uri = Uri("small");
  ASSERT_TRUE(PublishPreparedData(data_, uri, false, s3_, nullptr).ok());
  auto m = MirrorPreparedData(uri, Mirror("cache"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  // As if the fetch had stopped after all but one shard: the finished files are kept, the rest fetched.
  fs::rename(m->local_dir, m->local_dir + ".partial");
  fs::remove(m->local_dir + ".partial/prepare.json");
  fs::remove(m->local_dir + ".partial/train_000.bin");
  auto resumed = MirrorPreparedData(uri, Mirror("cache"));
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_EQ(resumed->fetched, 2) << "train_000.bin and prepare.json";
  EXPECT_EQ(Read(resumed->local_dir + "/train_000.bin"), Read(data_ + "/train_000.bin"));
}

TEST_F(RemoteDataTest, ADamagedObjectIsRefusedByNameAndNothingOfItKept) {
  const std::string uri = Uri("small");
  ASSERT_TRUE(PublishPreparedData(data_, uri, false, s3_, nullptr).ok());
  auto good = MirrorPreparedData(uri, Mirror("good-cache"));
  ASSERT_TRUE(good.ok());

  // One token flipped in a shard: the same size, so only the content hash in its header can tell.
  std::string shard = Read(data_ + "/train_000.bin");
  shard[shard.size() - 2] ^= 0x01;
  ASSERT_TRUE(Store(uri)->Put("train_000.bin", shard).ok());
  auto bad = MirrorPreparedData(uri, Mirror("fresh-cache"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Status::Code::kCorruption);
  EXPECT_NE(bad.status().message().find("train_000.bin"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("--force"), std::string::npos) << "names the fix";
  const fs::path fresh = tmp_ / "fresh-cache";
  for (const auto& e : fs::recursive_directory_iterator(fresh))
    EXPECT_FALSE(e.path().filename() == "train_000.bin") << "kept " << e.path();
  // A copy verified before is this machine's and stays as it was.
  EXPECT_EQ(Read(good->local_dir + "/train_000.bin"), Read(data_ + "/train_000.bin"));

  // A shard that prepare.json names but the store lacks (an upload cut short).
  ASSERT_TRUE(Store(uri)->Delete("train_000.bin").ok());
  auto missing = MirrorPreparedData(uri, Mirror("fresh-cache"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("lacks train_000.bin"), std::string::npos)
      << missing.status().message();
  // A machine that verified its copy before keeps it, whatever the store holds now (one GET, no listing).
  auto kept = MirrorPreparedData(uri, Mirror("good-cache"));
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(kept->local_dir, good->local_dir);
  EXPECT_EQ(kept->fetched, 0);
  EXPECT_EQ(kept->files, good->files);
  EXPECT_EQ(kept->bytes, good->bytes);
}

TEST_F(RemoteDataTest, APrefixWithoutADatasetOrWithAnotherOneIsRefused) {
  // A prepare.json in the store that is not one: an error naming it, not an exception.
  for (const char* bad :
       {R"({"format": 5})", R"([1])", R"({"format": "tern-prepare", "shards": {"train": [3]}})"}) {
    ASSERT_TRUE(Store(Uri("bad"))->Put("prepare.json", bad).ok());
    auto m = MirrorPreparedData(Uri("bad"), Mirror("cache"));
    ASSERT_FALSE(m.ok()) << bad;
    EXPECT_NE(m.status().message().find("prepare.json"), std::string::npos) << m.status().message();
  }

  auto none = MirrorPreparedData(Uri("nothing"), Mirror("cache"));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Status::Code::kNotFound);
  EXPECT_NE(none.status().message().find("tern prepare --input TEXT --out " + Uri("nothing")),
            std::string::npos)
      << none.status().message();

  // Another dataset (another prepare.json, fewer shards) over a published one: refused without force; with
  // it, published whole, and the old dataset's extra shards deleted after the new prepare.json.
  const std::string uri = Uri("ds");
  testing::WriteFile(tmp_ / "numbers.txt", testing::NumbersCorpus(60'000));
  const std::string many = tmp_ / "many";
  PrepareOptions p;  // the same text in shards of 1024 tokens
  p.inputs = {tmp_ / "numbers.txt"};
  p.out_dir = many;
  p.tokenizer = data_ + "/tokenizer.model";
  p.val_fraction = 0.1;
  p.shard_tokens = 1024;
  p.progress = nullptr;
  auto prepared = Prepare(p);
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  ASSERT_TRUE(fs::exists(many + "/train_001.bin"));
  ASSERT_TRUE(PublishPreparedData(many, uri, false, s3_, nullptr).ok());
  auto first = MirrorPreparedData(uri, Mirror("cache"));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  int extra = 0;
  for (const std::string& n : Names(many)) extra += n.ends_with(".bin") && !fs::exists(data_ + "/" + n);
  ASSERT_GT(extra, 0);
  const fs::path other = data_;

  auto refused = PublishPreparedData(other.string(), uri, false, s3_, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--force"), std::string::npos) << refused.status().message();
  auto replaced = PublishPreparedData(other.string(), uri, true, s3_, nullptr);
  ASSERT_TRUE(replaced.ok()) << replaced.status().ToString();
  EXPECT_EQ(replaced->removed, extra);
  EXPECT_FALSE(Store(uri)->Exists("train_001.bin").value());
  auto second = MirrorPreparedData(uri, Mirror("cache"));
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_NE(second->local_dir, first->local_dir) << "another dataset, another copy";
  EXPECT_FALSE(fs::exists(second->local_dir + "/train_001.bin"));
  EXPECT_TRUE(fs::exists(first->local_dir + "/train_001.bin")) << "the old copy is left as it was";
}

TEST_F(RemoteDataTest, ARunOnS3DataEqualsTheRunOnItsLocalDirectory) {
  const std::string uri = Uri("small");
  ASSERT_TRUE(PublishPreparedData(data_, uri, false, s3_, nullptr).ok());
  auto config = [&](const std::string& dir, const std::string& run) {
    TrainConfig c;
    c.model = {1, 2, 32, 0, 32};
    c.data_dir = dir;
    c.data_cache_dir = tmp_ / "cache";
    c.ckpt.s3_endpoint = s3_.endpoint;
    c.batch_size = 4;
    c.seq_len = 32;
    c.steps = 6;
    c.eval_every = 3;
    c.eval_batches = 2;
    c.num_samples = 0;
    c.peak_gflops = 100;
    c.run_dir = tmp_ / run;
    return c;
  };
  auto train = [](const TrainConfig& c, std::vector<float>* w) -> Result<TrainSummary> {
    TERN_ASSIGN_OR_RETURN(auto t, Trainer::Create(c, /*quiet=*/true));
    TERN_ASSIGN_OR_RETURN(TrainSummary s, t->Run());
    *w = t->model().GetParameters();
    return s;
  };
  std::vector<float> wl, wr;
  auto local = train(config(data_, "local"), &wl);
  auto remote = train(config(uri, "remote"), &wr);
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  ASSERT_TRUE(remote.ok()) << remote.status().ToString();
  EXPECT_EQ(remote->train_loss, local->train_loss);
  EXPECT_EQ(remote->val_loss, local->val_loss);
  EXPECT_EQ(wr, wl) << "the same tokens in the same order";
  // The run records its data as given (the URI), and what the fetch cost in its start row.
  EXPECT_NE(Read(tmp_ / "remote/config.yaml").find(uri), std::string::npos);
  const std::string metrics = Read(tmp_ / "remote/metrics.jsonl");
  const std::string start = metrics.substr(0, metrics.find('\n'));
  EXPECT_NE(start.find("\"data_fetch_bytes\""), std::string::npos) << start;
  EXPECT_NE(start.find("\"data_fetch_s\""), std::string::npos) << start;
  EXPECT_EQ(Read(tmp_ / "local/metrics.jsonl").find("data_fetch"), std::string::npos);
}

}  // namespace
}  // namespace tern
