// The loader over a mixture of datasets (data.mix): shares, spread, each source's own epochs, restore and
// data-parallel slices on the mixed stream, and the single-source case equal to the plain loader.
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "data/loader.h"
#include "data/ramp_shard_test_util.h"
#include "testing/files.h"

namespace tern {
namespace {

using testing::RampShard;
using testing::TempDir;

constexpr uint32_t kVocab = 1 << 20;  // token ids up to a few hundred thousand

constexpr int32_t kSourceStride = 100000;  // source s's tokens start at s * kSourceStride

// The first tokens of the windows of n batches (B rows each).
std::vector<int32_t> Starts(DataLoader& dl, int n) {
  std::vector<int32_t> out;
  Batch b;
  for (int i = 0; i < n; ++i) {
    EXPECT_TRUE(dl.Next(&b).ok());
    for (int row = 0; row < b.B; ++row) out.push_back(b.inputs[static_cast<size_t>(row) * b.T]);
  }
  return out;
}

class LoaderMix : public ::testing::Test {
 protected:
  void SetUp() override {
    // Source 0: 2 shards, 60 + 40 windows of T = 8; source 1: 37 windows; source 2: 13 windows.
    a_ = {RampShard(dir_, "a0.bin", 0, 60 * 8 + 1, kVocab),
          RampShard(dir_, "a1.bin", 50000, 40 * 8 + 1, kVocab)};
    b_ = {RampShard(dir_, "b0.bin", kSourceStride, 37 * 8 + 1, kVocab)};
    c_ = {RampShard(dir_, "c0.bin", 2 * kSourceStride, 13 * 8 + 1, kVocab)};
  }
  std::unique_ptr<DataLoader> Open(std::vector<double> w, DataSlice slice = {}, bool shuffle = true) {
    std::vector<MixSource> m = {{a_, w[0]}, {b_, w[1]}};
    if (w.size() > 2) m.push_back({c_, w[2]});
    auto dl = DataLoader::OpenMix(m, 5, 8, /*seed=*/11, shuffle, 3, slice);
    EXPECT_TRUE(dl.ok()) << dl.status().ToString();
    return dl.ok() ? std::move(*dl) : nullptr;
  }
  TempDir dir_;
  std::vector<std::string> a_, b_, c_;
};

TEST_F(LoaderMix, EachSourceGetsItsShareSpreadThroughThePeriod) {
  auto dl = Open({0.7, 0.2, 0.1});
  ASSERT_TRUE(dl);
  EXPECT_EQ(dl->num_sources(), 3u);
  EXPECT_DOUBLE_EQ(dl->source_share(0), 0.7);
  EXPECT_DOUBLE_EQ(dl->source_share(2), 0.1);
  EXPECT_EQ(dl->source_windows(1), 37u);
  EXPECT_EQ(dl->windows_per_epoch(), kMixPeriod);
  EXPECT_EQ(dl->tokens(), 60u * 8 + 1 + 40 * 8 + 1 + 37 * 8 + 1 + 13 * 8 + 1);
  const std::vector<int32_t> s = Starts(*dl, 2 * kMixPeriod / 5);  // two periods
  std::map<int, int> count;
  for (size_t i = 0; i < s.size(); ++i) {
    count[s[i] / kSourceStride]++;
    if (i + 1 >= 20 && (i + 1) % 20 == 0) {  // every 20 windows: 14 / 4 / 2 give or take one
      EXPECT_NEAR(count[0], 0.7 * (i + 1), 1.0) << "after " << i + 1;
      EXPECT_NEAR(count[2], 0.1 * (i + 1), 1.0) << "after " << i + 1;
    }
  }
  EXPECT_EQ(count[0], 1400);
  EXPECT_EQ(count[1], 400);
  EXPECT_EQ(count[2], 200);
}

// Each source rolls over its own epochs: its first `windows` draws are all of its windows once, in an order
// that is not the sequential one, and its next epoch is another order.
TEST_F(LoaderMix, EachSourceVisitsItsWindowsOncePerOwnEpoch) {
  auto dl = Open({0.5, 0.3, 0.2});
  ASSERT_TRUE(dl);
  const std::vector<int32_t> s = Starts(*dl, 200);  // 1000 windows: source 2 gets 200 = 15+ of its epochs
  std::map<int, std::vector<int32_t>> by;
  for (int32_t v : s) by[v / kSourceStride].push_back(v);
  for (auto [src, n] : {std::pair{1, 37}, std::pair{2, 13}}) {
    ASSERT_GE(by[src].size(), 2u * n);
    std::vector<int32_t> e0(by[src].begin(), by[src].begin() + n),
        e1(by[src].begin() + n, by[src].begin() + 2 * n);
    EXPECT_EQ(std::set<int32_t>(e0.begin(), e0.end()).size(), static_cast<size_t>(n)) << "source " << src;
    EXPECT_EQ(std::set<int32_t>(e0.begin(), e0.end()), std::set<int32_t>(e1.begin(), e1.end()));
    EXPECT_NE(e0, e1) << "source " << src << ": the same order two epochs running";
    EXPECT_FALSE(std::is_sorted(e0.begin(), e0.end())) << "source " << src << " is not shuffled";
  }
  // Unshuffled (validation), every source runs in order.
  auto seq = Open({0.5, 0.3, 0.2}, {}, /*shuffle=*/false);
  std::vector<int32_t> b;
  for (int32_t v : Starts(*seq, 40))
    if (v / kSourceStride == 1) b.push_back(v);
  for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(b[i], kSourceStride + static_cast<int32_t>(i % 37) * 8);
}

// One source is the plain loader, bit for bit (its seeding unchanged: old checkpoints resume the same data);
// source 0 of a mixture keeps that order, the others have their own.
TEST_F(LoaderMix, OneSourceIsThePlainLoaderAndSourceZeroKeepsItsOrder) {
  auto plain = DataLoader::Open(a_, 5, 8, 11, true, 3);
  auto one = DataLoader::OpenMix({{a_, 0.25}}, 5, 8, 11, true, 3);
  ASSERT_TRUE(plain.ok() && one.ok());
  EXPECT_EQ((*one)->windows_per_epoch(), 100u);
  EXPECT_DOUBLE_EQ((*one)->source_share(0), 1.0);
  const std::vector<int32_t> p = Starts(**plain, 50);
  EXPECT_EQ(Starts(**one, 50), p);
  auto dl = Open({0.5, 0.5});
  std::vector<int32_t> zero;
  for (int32_t v : Starts(*dl, 80))
    if (v / kSourceStride == 0) zero.push_back(v);
  ASSERT_GE(zero.size(), 150u);
  EXPECT_TRUE(std::equal(zero.begin(), zero.begin() + 150, p.begin()));
}

TEST_F(LoaderMix, RestoreAndSlicesWorkOnTheMixedStream) {
  auto dl = Open({0.6, 0.3, 0.1});
  ASSERT_TRUE(dl);
  Starts(*dl, 190);  // 950 windows: the next batches straddle the period boundary
  const LoaderPosition p = dl->position();
  EXPECT_EQ(p, (LoaderPosition{0, 950}));
  const std::vector<int32_t> after = Starts(*dl, 30);
  auto fresh = Open({0.6, 0.3, 0.1});
  ASSERT_TRUE(fresh->Restore(p).ok());
  EXPECT_EQ(Starts(*fresh, 30), after);
  EXPECT_FALSE(fresh->Restore({0, kMixPeriod}).ok());

  // Two ranks with runs of 2 read the whole stream's batches in rank order.
  auto whole = Open({0.6, 0.3, 0.1});
  const std::vector<int32_t> all = Starts(*whole, 2 * 2 * 60);
  auto r0 = Open({0.6, 0.3, 0.1}, DataSlice{0, 2, 2});
  auto r1 = Open({0.6, 0.3, 0.1}, DataSlice{1, 2, 2});
  for (int g = 0; g < 60; ++g) {
    const auto want0 = std::vector<int32_t>(all.begin() + g * 20, all.begin() + g * 20 + 10);
    const auto want1 = std::vector<int32_t>(all.begin() + g * 20 + 10, all.begin() + g * 20 + 20);
    ASSERT_EQ(Starts(*r0, 2), want0) << "group " << g;
    ASSERT_EQ(Starts(*r1, 2), want1) << "group " << g;
  }
}

TEST_F(LoaderMix, RefusesSharesItCannotKeep) {
  auto tiny = DataLoader::OpenMix({{a_, 1.0}, {b_, 0.0004}}, 5, 8, 1, true);
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(tiny.status().message().find("below the mixture's step of 1/1000"), std::string::npos)
      << tiny.status().message();
  auto negative = DataLoader::OpenMix({{a_, 1.0}, {b_, -1}}, 5, 8, 1, true);
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("positive"), std::string::npos);
  auto short_source = DataLoader::OpenMix({{a_, 1.0}, {c_, 1.0}}, 5, 200, 1, true);
  ASSERT_FALSE(short_source.ok());
  EXPECT_NE(short_source.status().message().find("c0.bin"), std::string::npos)
      << short_source.status().message();
}

}  // namespace
}  // namespace tern
