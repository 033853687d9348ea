#include "data/loader.h"

#include <unistd.h>

#include <chrono>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "data/ramp_shard_test_util.h"
#include "testing/files.h"

namespace tern {
namespace {

using testing::RampShard;
using testing::TempDir;

std::vector<Batch> Take(DataLoader& dl, int n) {
  std::vector<Batch> out(n);
  for (auto& b : out) EXPECT_TRUE(dl.Next(&b).ok());
  return out;
}

bool Same(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].inputs != b[i].inputs || a[i].targets != b[i].targets) return false;
  }
  return true;
}

TEST(Loader, SequentialBatchesAndShiftedTargets) {
  TempDir dir;
  auto shard = RampShard(dir, "train_000.bin", 0, 1000);
  auto dl = DataLoader::Open({shard}, 4, 8, 1, /*shuffle=*/false);
  ASSERT_TRUE(dl.ok()) << dl.status().ToString();
  EXPECT_EQ((*dl)->windows_per_epoch(), 124u);  // (1000 - 1) / 8
  EXPECT_EQ((*dl)->tokens(), 1000u);
  Batch b;
  for (int k = 0; k < 3; ++k) {
    ASSERT_TRUE((*dl)->Next(&b).ok());  // reusing b recycles its buffers
    ASSERT_EQ(b.B, 4);
    ASSERT_EQ(b.T, 8);
    ASSERT_EQ(b.inputs.size(), 32u);
    for (int row = 0; row < 4; ++row) {
      for (int t = 0; t < 8; ++t) {
        int32_t expect = (k * 4 + row) * 8 + t;  // window w starts at token w*T
        EXPECT_EQ(b.inputs[row * 8 + t], expect);
        EXPECT_EQ(b.targets[row * 8 + t], expect + 1);
      }
    }
  }
  EXPECT_EQ((*dl)->position(), (LoaderPosition{0, 12}));
}

TEST(Loader, ShuffledEpochVisitsEveryWindowOnceAndNeverCrossesShards) {
  TempDir dir;
  // 25 tokens -> 6 windows of T+1 = 5; 37 tokens -> 9 windows.
  auto a = RampShard(dir, "train_000.bin", 0, 25);
  auto b = RampShard(dir, "train_001.bin", 1000, 37);
  auto dl = DataLoader::Open({a, b}, 5, 4, 7, /*shuffle=*/true);
  ASSERT_TRUE(dl.ok()) << dl.status().ToString();
  ASSERT_EQ((*dl)->windows_per_epoch(), 15u);
  std::multiset<int32_t> starts;
  for (const auto& batch : Take(**dl, 3)) {
    for (int row = 0; row < 5; ++row) {
      const int32_t* in = &batch.inputs[row * 4];
      for (int t = 1; t < 4; ++t) EXPECT_EQ(in[t], in[t - 1] + 1) << "window is not contiguous";
      EXPECT_EQ(batch.targets[row * 4 + 3], in[3] + 1);
      starts.insert(in[0]);
    }
  }
  std::multiset<int32_t> expect;
  for (int w = 0; w < 6; ++w) expect.insert(w * 4);
  for (int w = 0; w < 9; ++w) expect.insert(1000 + w * 4);
  EXPECT_EQ(starts, expect);
  EXPECT_EQ((*dl)->position(), (LoaderPosition{1, 0}));
}

TEST(Loader, DeterministicForASeedAndDifferentAcrossSeeds) {
  TempDir dir;
  auto shard = RampShard(dir, "train_000.bin", 0, 5000);
  auto open = [&](uint64_t seed) { return std::move(DataLoader::Open({shard}, 4, 16, seed, true)).value(); };
  auto a = open(42), b = open(42), c = open(43);
  auto ba = Take(*a, 10), bb = Take(*b, 10), bc = Take(*c, 10);
  EXPECT_TRUE(Same(ba, bb));
  EXPECT_FALSE(Same(ba, bc));
  // Golden: the order must not change between builds or platforms (checkpoints store positions into it).
  std::vector<int32_t> first_starts;
  for (int row = 0; row < 4; ++row) first_starts.push_back(ba[0].inputs[row * 16] / 16);
  EXPECT_EQ(first_starts, (std::vector<int32_t>{139, 57, 132, 160}));
}

TEST(Loader, RestoreReproducesTheFollowingBatchesAcrossEpochs) {
  TempDir dir;
  auto shard = RampShard(dir, "train_000.bin", 0, 61);  // (61-1)/4 = 15 windows
  auto dl = std::move(DataLoader::Open({shard}, 4, 4, 3, true, 2)).value();
  Take(*dl, 2);
  LoaderPosition p = dl->position();
  EXPECT_EQ(p, (LoaderPosition{0, 8}));
  auto after = Take(*dl, 9);  // 36 windows: crosses two epoch boundaries, batches straddle them
  EXPECT_EQ(dl->position(), (LoaderPosition{2, 14}));
  ASSERT_TRUE(dl->Restore(p).ok());
  EXPECT_EQ(dl->position(), p);
  EXPECT_TRUE(Same(Take(*dl, 9), after));

  // A fresh loader (a resumed process) restored to p continues identically too.
  auto fresh = std::move(DataLoader::Open({shard}, 4, 4, 3, true, 2)).value();
  ASSERT_TRUE(fresh->Restore(p).ok());
  EXPECT_TRUE(Same(Take(*fresh, 9), after));

  // Reset goes back to the very first batch.
  auto from_start = std::move(DataLoader::Open({shard}, 4, 4, 3, true)).value();
  auto first = Take(*from_start, 2);
  ASSERT_TRUE(dl->Reset().ok());
  EXPECT_TRUE(Same(Take(*dl, 2), first));

  Status bad = dl->Restore({0, 15});
  EXPECT_EQ(bad.code(), Status::Code::kInvalidArgument);
}

// Data parallel: W ranks with runs of R batches together read the single loader's stream, each group of W*R
// batches split in rank order, across epoch boundaries (13 windows, B=2: a group of 4 batches straddles
// epochs).
TEST(Loader, SlicesPartitionTheStreamInRankOrderAcrossEpochs) {
  TempDir dir;
  auto shard = RampShard(dir, "train_000.bin", 0, 13 * 8 + 1);
  for (int world : {2, 3}) {
    const int run = 2, groups = 5;
    auto whole = DataLoader::Open({shard}, 2, 8, 7, /*shuffle=*/true);
    ASSERT_TRUE(whole.ok());
    std::vector<Batch> expect = Take(**whole, world * run * groups);
    std::vector<std::unique_ptr<DataLoader>> ranks;
    for (int r = 0; r < world; ++r) {
      auto dl = DataLoader::Open({shard}, 2, 8, 7, true, 4, DataSlice{r, world, run});
      ASSERT_TRUE(dl.ok()) << dl.status().ToString();
      ranks.push_back(std::move(*dl));
    }
    for (int g = 0; g < groups; ++g) {
      for (int r = 0; r < world; ++r) {
        std::vector<Batch> got = Take(*ranks[r], run);
        std::vector<Batch> want(expect.begin() + (g * world + r) * run,
                                expect.begin() + (g * world + r + 1) * run);
        EXPECT_TRUE(Same(got, want)) << "world " << world << " group " << g << " rank " << r;
      }
      // At the group's end every rank stands where the single loader stands after the group.
      for (int r = 0; r < world; ++r) {
        auto single = DataLoader::Open({shard}, 2, 8, 7, true);
        ASSERT_TRUE(single.ok());
        Take(**single, (g + 1) * world * run);
        EXPECT_EQ(ranks[r]->position(), (*single)->position()) << "world " << world << " rank " << r;
      }
    }
  }
}

// Elastic resume: a position saved by 2 ranks at a group boundary continues on 1 (and the other way round).
TEST(Loader, SlicedPositionRestoresInAnotherWorldSize) {
  TempDir dir;
  auto shard = RampShard(dir, "train_000.bin", 0, 40 * 8 + 1);
  auto r0 = DataLoader::Open({shard}, 2, 8, 3, true, 4, DataSlice{0, 2, 1});
  auto r1 = DataLoader::Open({shard}, 2, 8, 3, true, 4, DataSlice{1, 2, 1});
  ASSERT_TRUE(r0.ok() && r1.ok());
  Take(**r0, 3);
  Take(**r1, 3);
  ASSERT_EQ((*r0)->position(), (*r1)->position());
  auto single = DataLoader::Open({shard}, 2, 8, 3, true);
  ASSERT_TRUE(single.ok());
  ASSERT_TRUE((*single)->Restore((*r0)->position()).ok());
  std::vector<Batch> next = Take(**single, 2);
  EXPECT_TRUE(Same(Take(**r0, 1), {next[0]}));
  EXPECT_TRUE(Same(Take(**r1, 1), {next[1]}));
  // Mid-group (rank 0 has read 1 of its 2 batches of a run-2 group), the position is the group's start.
  auto g0 = DataLoader::Open({shard}, 2, 8, 3, true, 4, DataSlice{0, 2, 2});
  ASSERT_TRUE(g0.ok());
  Take(**g0, 1);
  EXPECT_EQ((*g0)->position(), (LoaderPosition{0, 0}));
  EXPECT_FALSE(DataLoader::Open({shard}, 2, 8, 3, true, 4, DataSlice{2, 2, 1}).ok())
      << "rank outside the world";
}

TEST(Loader, MeasuresAndResetsWaitTime) {
  TempDir dir;
  auto shard = RampShard(dir, "train_000.bin", 0, 1 << 16);
  auto dl = std::move(DataLoader::Open({shard}, 8, 256, 1, true, 2)).value();
  Take(*dl, 5);
  double waited = dl->TakeWaitSeconds();
  EXPECT_GT(waited, 0.0);
  EXPECT_LT(waited, 5.0);
  EXPECT_EQ(dl->TakeWaitSeconds(), 0.0);
  // A slow consumer finds the queue full: it should barely wait, far less than it slept.
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    Take(*dl, 1);
  }
  EXPECT_LT(dl->TakeWaitSeconds(), 0.03);
}

TEST(Loader, ErrorsSayWhatIsWrong) {
  TempDir dir;
  auto tiny = RampShard(dir, "tiny.bin", 0, 5);
  auto r = DataLoader::Open({tiny}, 2, 8, 1, true);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("5 tokens"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("T+1 = 9"), std::string::npos) << r.status().message();

  auto a = RampShard(dir, "a.bin", 0, 100, 1000);
  auto b = RampShard(dir, "b.bin", 0, 100, 2000);
  auto mixed = DataLoader::Open({a, b}, 2, 8, 1, true);
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.status().message().find("vocab"), std::string::npos);

  auto missing = DataLoader::Open({dir / "missing.bin"}, 2, 8, 1, true);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing.bin"), std::string::npos);
}

TEST(Loader, FindShardsSortsAndFilters) {
  TempDir dir;
  for (const char* n : {"train_001.bin", "train_000.bin", "val_000.bin", "train_1000.bin", "train_999.bin"}) {
    RampShard(dir, n, 0, 10);
  }
  testing::WriteFile(dir / "train_notes.txt", "x");
  testing::WriteFile(dir / "train_notes.bin", "x");
  auto train = FindShards(dir.path(), "train");
  ASSERT_TRUE(train.ok());
  EXPECT_EQ(*train, (std::vector<std::string>{dir / "train_000.bin", dir / "train_001.bin",
                                              dir / "train_999.bin", dir / "train_1000.bin"}));
  auto none = FindShards(dir.path(), "test");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Status::Code::kNotFound);
}

// A shard truncated on disk while the loader has it mapped (someone re-running prepare in place, a disk
// problem): the batches already read come out, then Next() fails naming the shard and what to do, instead
// of the process dying of SIGBUS on the lost pages.
TEST(Loader, ShardTruncatedWhileMappedIsAClearErrorNotACrash) {
  TempDir dir;
  auto a = RampShard(dir, "train_000.bin", 0, 4000);
  auto b = RampShard(dir, "train_001.bin", 10000, 4000);
  auto dl = DataLoader::Open({a, b}, 4, 8, /*seed=*/3, /*shuffle=*/true, /*prefetch_depth=*/2);
  ASSERT_TRUE(dl.ok()) << dl.status().ToString();
  Batch batch;
  ASSERT_TRUE((*dl)->Next(&batch).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the producer waits on a full queue
  ASSERT_EQ(::truncate(b.c_str(), 64 + 100 * 2), 0);            // header + 100 of its 4000 tokens
  Status st;
  int batches = 0;
  for (; batches < 1000 && st.ok(); batches++) st = (*dl)->Next(&batch);
  ASSERT_FALSE(st.ok()) << "a truncated shard must not be read as if whole";
  EXPECT_EQ(st.code(), Status::Code::kCorruption);
  EXPECT_NE(st.message().find("train_001.bin shrank on disk"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("--resume auto"), std::string::npos) << st.message();
  EXPECT_LE(batches, 4) << "it fails within the prefetched batches";
}

}  // namespace
}  // namespace tern
