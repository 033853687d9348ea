// `tern bench --dist` as a user runs it: one process (world 1, and it says so), and under
// `mpirun -np 2` (registered only where mpirun and the MPI communicator exist: TERN_MPIRUN), where only rank
// 0 prints and the JSON has the shape `tern plan --calibrate` reads.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "testing/processes.h"
#include "testing/tern_binary.h"

namespace tern {
namespace {

namespace fs = std::filesystem;

struct TernRun {
  int code = -1;
  std::string out, err;
};

// Runs `prefix tern args`, stdout and stderr apart.
TernRun Tern(const std::string& prefix, const std::string& args) {
  const fs::path tern = testing::FindTernBinary();
  TernRun r;
  if (tern.empty()) {
    ADD_FAILURE() << "the tern binary is not built (build the tern target)";
    return r;
  }
  const fs::path err = fs::temp_directory_path() / ("bench_dist_test." + std::to_string(::getpid()) + ".err");
  testing::CommandResult c =
      testing::RunCommand("(" + prefix + tern.string() + " " + args + " 2>" + err.string() + ")");
  r.code = c.code;
  r.out = c.output;
  std::ifstream in(err);
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  fs::remove(err);
  return r;
}

void ExpectShape(const nlohmann::json& j, int world, size_t sizes) {
  EXPECT_EQ(j["tool"], "tern bench --dist");
  EXPECT_EQ(j["collective"], "all_reduce");
  EXPECT_EQ(j["dtype"], "fp32");
  EXPECT_EQ(j["world"], world);
  EXPECT_EQ(j["nodes"], 1);
  EXPECT_EQ(j["device"], "cpu");
  for (const char* k : {"cpu", "isa", "threads", "logical_cpus"}) EXPECT_TRUE(j["machine"].contains(k)) << k;
  ASSERT_EQ(j["sizes"].size(), sizes);
  for (size_t i = 0; i < sizes; ++i) {
    const nlohmann::json& s = j["sizes"][i];
    EXPECT_EQ(s["bytes"].get<size_t>(), size_t{1024} << i);
    EXPECT_EQ(s["count"].get<size_t>() * 4, s["bytes"].get<size_t>());
    EXPECT_GT(s["time_us"].get<double>(), 0);
    EXPECT_GT(s["algbw_gb_per_s"].get<double>(), 0);
    EXPECT_DOUBLE_EQ(s["busbw_gb_per_s"].get<double>(),
                     s["algbw_gb_per_s"].get<double>() * 2.0 * (world - 1) / world);
  }
  EXPECT_EQ(j["latency_us"], j["sizes"][0]["time_us"]);
  EXPECT_EQ(j["link_gb_per_s"], j["sizes"][sizes - 1]["busbw_gb_per_s"]);
}

TEST(BenchDist, OneProcessIsWorldOneAndSaysSo) {
  TernRun r = Tern("", "bench --dist --dist-max-mb 0.0625 --steps 2 --warmup 1 --json");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["communicator"], "single");
  EXPECT_EQ(j["link_gb_per_s"], 0.0);
  // 1 KiB .. 64 KiB.
  EXPECT_EQ(j["sizes"].size(), 7u);
  TernRun text = Tern("", "bench --dist --dist-max-mb 0.0625 --steps 2 --warmup 1");
  ASSERT_EQ(text.code, 0) << text.out << text.err;
  EXPECT_NE(text.out.find("world 1: one process, nothing crossed a link"), std::string::npos) << text.out;
  EXPECT_NE(Tern("", "bench --dist --config configs/demo.yaml").err.find("drop --config"), std::string::npos);
}

#ifdef TERN_MPIRUN
const std::string kMpirun = std::string(TERN_MPIRUN) + " --allow-run-as-root --oversubscribe -np 2 ";

TEST(BenchDist, TwoRanksPrintOneJsonObject) {
  // 1 KiB .. 1 MiB: 11 sizes.
  TernRun r = Tern(kMpirun, "bench --dist --dist-max-mb 1 --steps 3 --warmup 1 --json");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(r.out)) << "not one JSON object (did rank 1 print too?):\n"
                                                    << r.out;
  EXPECT_EQ(j["communicator"], "mpi");
  EXPECT_EQ(j["local_world"], 2);
  ExpectShape(j, 2, 11);
  EXPECT_EQ(j["bus_factor"], 1.0);
}

TEST(BenchDist, TwoRanksPrintOneTable) {
  TernRun r = Tern(kMpirun, "bench --dist --dist-max-mb 0.0625 --steps 2 --warmup 1");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const size_t link = r.out.find("\nlink ");
  ASSERT_NE(link, std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\nlink ", link + 1), std::string::npos) << "two summaries: every rank printed\n"
                                                                << r.out;
  EXPECT_NE(r.out.find("(2 ranks, mpi)"), std::string::npos) << r.out;
}
#endif

}  // namespace
}  // namespace tern
