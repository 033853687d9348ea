// BlockManager: reservations, sharing, publishing and eviction keep every block in exactly one state.
#include "infer/kv_cache.h"

#include <gtest/gtest.h>

#include <numeric>

namespace tern {
namespace {

std::vector<int32_t> Tokens(int n, int start = 0) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

TEST(BlockManager, ReservationsBoundAllocation) {
  BlockManager m(4, 2);
  EXPECT_TRUE(m.Reserve(3));
  EXPECT_FALSE(m.Reserve(2));  // only one left unpromised
  EXPECT_EQ(m.available(), 1);
  int32_t a = m.AllocateReserved(), b = m.AllocateReserved();
  EXPECT_NE(a, b);
  EXPECT_EQ(m.used(), 2);
  EXPECT_EQ(m.reserved(), 1);
  m.Unreserve(1);
  m.Release(a);
  m.Release(b);
  EXPECT_EQ(m.used(), 0);
  EXPECT_EQ(m.available(), 4);
  EXPECT_TRUE(m.Consistent());
}

TEST(BlockManager, PublishedPrefixesAreSharedThenEvictedLast) {
  BlockManager m(3, 4);
  auto t = Tokens(12);
  ASSERT_TRUE(m.Reserve(2));
  int32_t b0 = m.AllocateReserved(), b1 = m.AllocateReserved();
  uint64_t h0 = m.Publish(b0, 0, t.data());
  m.Publish(b1, h0, t.data() + 4);
  std::vector<uint64_t> hashes;
  // A second sequence with the same first 8 tokens shares both blocks; one with a different second block
  // shares only the first.
  auto shared = m.AcquirePrefix(t.data(), 12, 3, &hashes);
  EXPECT_EQ(shared, (std::vector<int32_t>{b0, b1}));
  auto other = t;
  other[5] = 99;
  EXPECT_EQ(m.AcquirePrefix(other.data(), 12, 3, &hashes), std::vector<int32_t>{b0});
  EXPECT_EQ(m.prefix_hits(), 3u);
  // The limit on blocks is honoured (the engine never shares the block holding the last prompt token).
  EXPECT_EQ(m.AcquirePrefix(t.data(), 12, 1, &hashes).size(), 1u);
  for (int32_t b : {b0, b1, b0, b1, b0, b0}) m.Release(b);
  EXPECT_EQ(m.used(), 0);
  EXPECT_EQ(m.cached_free(), 2);  // kept for later prompts
  EXPECT_EQ(m.free(), 1);
  EXPECT_TRUE(m.Consistent());
  // A fresh block comes from the free list first, then evicts the least recently released cached block.
  ASSERT_TRUE(m.Reserve(3));
  std::vector<int32_t> fresh = {m.AllocateReserved(), m.AllocateReserved()};
  EXPECT_EQ(m.cached_free(), 1);
  // b0 is still cached, but the one outstanding reservation may need it: it cannot be shared now.
  EXPECT_TRUE(m.AcquirePrefix(t.data(), 12, 3, &hashes).empty());
  EXPECT_TRUE(m.Consistent());
}

TEST(BlockManager, CachedBlocksPromisedToOthersAreNotTaken) {
  BlockManager m(2, 2);
  auto t = Tokens(4);
  ASSERT_TRUE(m.Reserve(1));
  int32_t b = m.AllocateReserved();
  m.Publish(b, 0, t.data());
  m.Release(b);               // cached-free
  ASSERT_TRUE(m.Reserve(2));  // both remaining blocks promised
  std::vector<uint64_t> hashes;
  EXPECT_TRUE(m.AcquirePrefix(t.data(), 4, 2, &hashes).empty());
  EXPECT_TRUE(m.Consistent());
  m.AllocateReserved();
  m.AllocateReserved();  // evicts the cached block: no longer findable
  EXPECT_EQ(m.cached_free(), 0);
  EXPECT_TRUE(m.Consistent());
}

TEST(BlockManager, IdenticalBlocksPublishedTwiceStayPrivate) {
  BlockManager m(2, 2);
  auto t = Tokens(2);
  ASSERT_TRUE(m.Reserve(2));
  int32_t a = m.AllocateReserved(), b = m.AllocateReserved();
  EXPECT_EQ(m.Publish(a, 0, t.data()), m.Publish(b, 0, t.data()));
  m.Release(a);
  m.Release(b);
  EXPECT_EQ(m.cached_free(), 1);  // a is cached; b, a duplicate, went back to the free list
  EXPECT_EQ(m.free(), 1);
  EXPECT_TRUE(m.Consistent());
}

}  // namespace
}  // namespace tern
