// `tern bench --dist`'s measurement in one process: the sizes, the bus-bandwidth factor, and a world-1 run
// through the single communicator (its figures and JSON). mpi_test.cpp runs it on real ranks.
#include <gtest/gtest.h>

#include "dist/allreduce_bench.h"
#include "dist/single_communicator.h"

namespace tern::dist {
namespace {

TEST(AllReduceBench, SizesDoubleFromMinToMaxAndIncludeMax) {
  EXPECT_EQ(AllReduceBenchSizes(1024, 8192), (std::vector<size_t>{1024, 2048, 4096, 8192}));
  // Max not a power of two of min: still measured, last.
  EXPECT_EQ(AllReduceBenchSizes(1024, 5000), (std::vector<size_t>{1024, 2048, 4096, 5000}));
  // Whole floats: 1000 bytes rounds min up to 1000 (250 floats), 3 bytes to one float.
  EXPECT_EQ(AllReduceBenchSizes(3, 4), (std::vector<size_t>{4}));
  EXPECT_EQ(AllReduceBenchSizes(1000, 1000), (std::vector<size_t>{1000}));
  EXPECT_TRUE(AllReduceBenchSizes(4096, 1024).empty());
  // The default range, 1 KiB .. 256 MiB: 19 sizes.
  EXPECT_EQ(AllReduceBenchSizes(1024, size_t{256} << 20).size(), 19u);
}

TEST(AllReduceBench, BusFactorIsTheRingsTwoWMinusOneOverW) {
  EXPECT_EQ(BusBandwidthFactor(1), 0.0);
  EXPECT_EQ(BusBandwidthFactor(2), 1.0);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(8), 1.75);
}

TEST(AllReduceBench, WorldOneTimesACopyAndSaysNothingCrossedALink) {
  SingleProcessCommunicator comm;
  AllReduceBenchOptions o;
  o.min_bytes = 1024;
  o.max_bytes = 16384;
  o.warmup = 1;
  o.iters = 3;
  Result<AllReduceBenchResult> r = RunAllReduceBench(comm, nullptr, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->world, 1);
  EXPECT_EQ(r->nodes, 1);
  ASSERT_EQ(r->sizes.size(), 5u);
  for (const AllReduceSample& s : r->sizes) {
    EXPECT_EQ(s.count * 4, s.bytes);
    EXPECT_GT(s.time_us, 0);
    EXPECT_DOUBLE_EQ(s.algbw_gb_per_s, s.bytes / (s.time_us * 1e3));
    EXPECT_EQ(s.busbw_gb_per_s, 0.0);
  }
  EXPECT_EQ(r->latency_us, r->sizes.front().time_us);
  EXPECT_EQ(r->link_gb_per_s, 0.0);
  EXPECT_NE(r->ToText().find("world 1: one process, nothing crossed a link"), std::string::npos)
      << r->ToText();
  const nlohmann::json j = r->ToJson();
  EXPECT_EQ(j["tool"], "tern bench --dist");
  EXPECT_EQ(j["communicator"], "single");
  EXPECT_EQ(j["world"], 1);
  EXPECT_EQ(j["sizes"].size(), 5u);
  EXPECT_TRUE(j["machine"].contains("cpu"));
  EXPECT_EQ(j["sizes"][4]["bytes"], 16384);
}

TEST(AllReduceBench, ABadRangeNamesTheFlag) {
  SingleProcessCommunicator comm;
  AllReduceBenchOptions o;
  o.min_bytes = 4096;
  o.max_bytes = 1024;
  EXPECT_NE(RunAllReduceBench(comm, nullptr, o).status().message().find("--dist-max-mb"), std::string::npos);
  o.max_bytes = 8192;
  o.iters = 0;
  EXPECT_NE(RunAllReduceBench(comm, nullptr, o).status().message().find("--steps"), std::string::npos);
}

}  // namespace
}  // namespace tern::dist
