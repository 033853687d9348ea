// One process: how uneven sizes are split, the handles, the single-process communicator.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "dist/communicator.h"
#include "dist/single_communicator.h"

namespace tern::dist {
namespace {

TEST(Shard, FirstRanksTakeTheRemainder) {
  // 10 over 4: 3, 3, 2, 2.
  const std::vector<Shard> want = {{0, 3}, {3, 3}, {6, 2}, {8, 2}};
  for (int r = 0; r < 4; r++) {
    EXPECT_EQ(ShardOf(10, 4, r).offset, want[r].offset) << "rank " << r;
    EXPECT_EQ(ShardOf(10, 4, r).count, want[r].count) << "rank " << r;
  }
  // Fewer elements than ranks: the last ranks hold nothing, at the end.
  EXPECT_EQ(ShardOf(2, 3, 0).count, 1u);
  EXPECT_EQ(ShardOf(2, 3, 1).offset, 1u);
  EXPECT_EQ(ShardOf(2, 3, 2).count, 0u);
  EXPECT_EQ(ShardOf(2, 3, 2).offset, 2u);
  EXPECT_EQ(ShardOf(0, 2, 1).count, 0u);
}

// A piece of a sharded buffer split by owner: 10 over 4 is [0,3) [3,6) [6,8) [8,10).
TEST(Shard, ShardCountsSplitAPieceByOwner) {
  EXPECT_EQ(ShardCounts(10, 4, 0, 10), (std::vector<size_t>{3, 3, 2, 2}));
  EXPECT_EQ(ShardCounts(10, 4, 2, 5), (std::vector<size_t>{1, 3, 1, 0}));  // [2,7)
  EXPECT_EQ(ShardCounts(10, 4, 8, 2), (std::vector<size_t>{0, 0, 0, 2}));
  EXPECT_EQ(ShardCounts(10, 4, 4, 0), (std::vector<size_t>{0, 0, 0, 0}));
  EXPECT_EQ(ShardCounts(7, 1, 3, 4), (std::vector<size_t>{4}));
  for (size_t total : {1u, 7u, 1001u})
    for (int w : {1, 2, 3, 5})
      for (size_t off = 0; off < total; off += 3) {
        const size_t n = std::min<size_t>(5, total - off);
        const auto c = ShardCounts(total, w, off, n);
        EXPECT_EQ(std::accumulate(c.begin(), c.end(), size_t{0}), n) << total << " " << w << " " << off;
      }
}

TEST(Shard, ShardsTileTheRangeInRankOrder) {
  for (size_t n : {0u, 1u, 7u, 1000u, 1001u, 4099u})
    for (int w : {1, 2, 3, 5, 8}) {
      size_t next = 0;
      for (int r = 0; r < w; r++) {
        const Shard s = ShardOf(n, w, r);
        EXPECT_EQ(s.offset, next) << n << " over " << w << ", rank " << r;
        EXPECT_LE(s.count, n / w + 1);
        EXPECT_GE(s.count, n / w);
        next += s.count;
      }
      EXPECT_EQ(next, n) << n << " over " << w;
    }
}

TEST(DescribeRanks, CompressesRuns) {
  EXPECT_EQ(DescribeRanks({1}), "rank 1");
  EXPECT_EQ(DescribeRanks({1, 3, 4, 5, 7}), "ranks 1, 3-5, 7");
  EXPECT_EQ(DescribeRanks({}), "no rank");
}

TEST(DescribeCollective, SaysWhatAndHowMuch) {
  EXPECT_EQ(DescribeCollective(CollectiveKind::kAllReduce, 1001), "all-reduce of 1001 floats");
  EXPECT_EQ(DescribeCollective(CollectiveKind::kBroadcast, 4), "broadcast of 4 bytes");
  EXPECT_EQ(DescribeCollective(CollectiveKind::kBarrier, 0), "barrier");
}

// A handle whose collective finishes after `polls` calls of Test.
class CountingImpl : public CommHandle::Impl {
 public:
  CountingImpl(int polls, Status result, int* waits)
      : polls_(polls), result_(std::move(result)), waits_(waits) {}
  bool Test() override { return --polls_ <= 0; }
  Status Wait(std::chrono::milliseconds) override {
    (*waits_)++;
    return result_;
  }

 private:
  int polls_;
  Status result_;
  int* waits_;
};

TEST(CommHandle, EmptyIsDoneAndOk) {
  CommHandle h;
  EXPECT_TRUE(h.Done());
  EXPECT_TRUE(h.Wait().ok());
}

TEST(CommHandle, DonePollsAndWaitReturnsTheSameStatusTwice) {
  int waits = 0;
  CommHandle h(std::make_unique<CountingImpl>(3, Status::Unavailable("rank 1 is gone"), &waits),
               std::chrono::milliseconds(10));
  EXPECT_FALSE(h.Done());
  EXPECT_FALSE(h.Done());
  EXPECT_TRUE(h.Done());
  EXPECT_EQ(h.Wait().message(), "rank 1 is gone");
  EXPECT_EQ(h.Wait().message(), "rank 1 is gone");
  EXPECT_EQ(waits, 1);
}

TEST(CommHandle, DestroyingAnUnwaitedHandleWaits) {
  int waits = 0;
  {
    CommHandle h(std::make_unique<CountingImpl>(1, Status::Ok(), &waits), std::chrono::milliseconds(10));
    CommHandle moved = std::move(h);
  }
  EXPECT_EQ(waits, 1);  // once, by the handle it was moved into
}

TEST(CommHandle, FailedCarriesItsStatus) {
  CommHandle h = CommHandle::Failed(Status::InvalidArgument("bad root"));
  EXPECT_TRUE(h.Done());
  EXPECT_EQ(h.Wait().code(), Status::Code::kInvalidArgument);
}

TEST(SingleProcess, IsAWorldOfOne) {
  SingleProcessCommunicator c;
  EXPECT_EQ(c.name(), "single");
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.world(), 1);
  EXPECT_EQ(c.local_rank(), 0);
  EXPECT_EQ(c.local_world(), 1);
  EXPECT_FALSE(c.device_memory());
}

TEST(SingleProcess, CollectivesAreTheIdentity) {
  SingleProcessCommunicator c;
  std::vector<float> a(1001);
  std::iota(a.begin(), a.end(), 0.5f);
  const std::vector<float> want = a;
  ASSERT_TRUE(c.AllReduce(a.data(), a.size(), ReduceOp::kSum).ok());
  EXPECT_EQ(a, want);
  ASSERT_TRUE(c.AllReduce(a.data(), a.size(), ReduceOp::kMean).ok());
  EXPECT_EQ(a, want);

  std::vector<float> out(a.size(), -1);
  ASSERT_TRUE(c.AllReduceAsync(a.data(), out.data(), a.size(), ReduceOp::kMean).Wait().ok());
  EXPECT_EQ(out, want);
  std::fill(out.begin(), out.end(), -1.0f);
  ASSERT_TRUE(c.ReduceScatter(a.data(), out.data(), a.size(), ReduceOp::kSum).ok());  // one shard: all of it
  EXPECT_EQ(out, want);
  std::fill(out.begin(), out.end(), -1.0f);
  ASSERT_TRUE(c.AllGather(a.data(), out.data(), a.size()).ok());
  EXPECT_EQ(out, want);

  ASSERT_TRUE(c.Broadcast(a.data(), a.size(), 0).ok());
  EXPECT_EQ(a, want);
  ASSERT_TRUE(c.Barrier().ok());
  Result<int64_t> any = c.AllReduceInt(1, IntOp::kMax);
  ASSERT_TRUE(any.ok());
  EXPECT_EQ(*any, 1);
  int64_t v[2] = {3, -4};
  ASSERT_TRUE(c.AllReduceInt(v, 2, IntOp::kSum).ok());
  EXPECT_EQ(v[0], 3);
  EXPECT_EQ(v[1], -4);
  Result<double> sum = c.SumInRankOrder(0.1);
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(*sum, 0.1);
}

TEST(SingleProcess, BroadcastFromARankOutsideTheWorldFails) {
  SingleProcessCommunicator c;
  char byte = 0;
  Status s = c.Broadcast(&byte, 1, 1);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("root 1"), std::string::npos) << s.message();
}

TEST(SingleProcess, OutOfPlaceCopiesGoThroughTheGivenCopy) {
  size_t copied = 0;
  SingleProcessCommunicator c(
      [&](void* dst, const void* src, size_t bytes) {
        std::memcpy(dst, src, bytes);
        copied += bytes;
      },
      /*device_memory=*/true);
  EXPECT_TRUE(c.device_memory());
  std::vector<float> a = {1, 2, 3}, b(3);
  ASSERT_TRUE(c.AllReduceAsync(a.data(), b.data(), 3, ReduceOp::kSum).Wait().ok());
  ASSERT_TRUE(c.AllReduce(a.data(), 3, ReduceOp::kSum).ok());  // in place: nothing to copy
  EXPECT_EQ(b, a);
  EXPECT_EQ(copied, 3 * sizeof(float));
}

}  // namespace
}  // namespace tern::dist
