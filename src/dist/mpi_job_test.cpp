// A whole MPI job, from outside: mpirun -np 2 dist_test with one rank that hangs. The other names it within
// the timeout and exits non-zero without MPI_Finalize (which would wait for the hung rank forever), and
// mpirun then ends the hung rank: the job is over in seconds, not when the hung rank wakes (60 s).
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "testing/processes.h"

namespace tern::dist {
namespace {

TEST(MpiJob, AHungRankIsNamedAndTheWholeJobEnds) {
  const std::string command = std::string(TERN_DIST_MPIRUN) +
                              " --allow-run-as-root --oversubscribe -np 2 " TERN_DIST_TEST_BINARY
                              " --gtest_also_run_disabled_tests --gtest_filter=MpiHang.* 2>&1";
  const auto start = std::chrono::steady_clock::now();
  testing::CommandResult r = testing::RunCommand(command);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_LT(took, 30.0) << r.output;
  EXPECT_NE(
      r.output.find("rank 0: rank 0: mpi collective #2 (all-reduce of 1 float) did not finish within 1 s: "
                    "rank 1 never started it"),
      std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("leaving without MPI_Finalize"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("rank 1 woke up"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tern::dist
