// Real ranks under a real Slurm: dist_test (mpi_test.cpp) started by srun, so that launch detection
// (SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID, PMIx) and the MPI communicator are tested as
// `srun -n 2 tern train` will use them. The cluster is found through SLURM_CONF: scripts/slurm-local start
// runs a one-node one on this machine (.ci/run does). Without one the tests skip, and fail when CI is set.
//
// What works on Debian 12 (Slurm 22.05, Open MPI 4.1 over PMIx 4.2): srun --mpi=pmix. Under --mpi=none Open
// MPI's MPI_Init aborts ("OPAL ERROR: Unreachable"), so MakeCommunicator refuses first and names the fix.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "testing/processes.h"
#include "testing/skip.h"
#include "testing/slurm.h"

namespace tern::dist {
namespace {

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) n++;
  return n;
}

class SrunJob : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = testing::NoSlurmCluster();
    if (!why.empty()) TERN_SKIP_OR_FAIL_IN_CI(why);
  }

  // srun ARGS dist_test GTEST_ARGS, its output and how long it took. --time: a stuck job ends in 2 minutes.
  testing::CommandResult Srun(const std::string& args, const std::string& gtest_args = "") {
    const std::string command = "TERN_DIST_LAUNCHER=slurm srun --job-name=tern-dist-test --time=2 " + args +
                                " " TERN_DIST_TEST_BINARY " " + gtest_args;
    const auto start = std::chrono::steady_clock::now();
    testing::CommandResult r = testing::RunCommand(command);
    took_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
  }
  double took_ = 0;
};

TEST_F(SrunJob, TwoRanksPassEveryMpiTestUnderPmix) {
  testing::CommandResult r = Srun("--mpi=pmix -n 2");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(Count(r.output, "[  PASSED  ]"), 2) << r.output;
  EXPECT_EQ(Count(r.output, "[  FAILED  ]"), 0) << r.output;
}

// Three ranks on this machine's two cores (--overcommit), with the cluster's MpiDefault (pmix).
TEST_F(SrunJob, ThreeRanksOvercommittedUnderTheDefaultMpi) {
  testing::CommandResult r = Srun("--overcommit -n 3");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(Count(r.output, "[  PASSED  ]"), 3) << r.output;
  EXPECT_EQ(Count(r.output, "[  FAILED  ]"), 0) << r.output;
}

// As MpiJob (mpi_job_test.cpp) under mpirun: rank 1 hangs, rank 0 names it within the 1 s timeout and exits
// without MPI_Finalize. PMIx reports the exit and srun cancels the step, ending rank 1: seconds, not 60.
TEST_F(SrunJob, AHungRankIsNamedAndTheWholeStepEnds) {
  testing::CommandResult r =
      Srun("--mpi=pmix -n 2", "--gtest_also_run_disabled_tests --gtest_filter=MpiHang.*");
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_LT(took_, 30.0) << r.output;
  EXPECT_NE(
      r.output.find("rank 0: rank 0: mpi collective #2 (all-reduce of 1 float) did not finish within 1 s: "
                    "rank 1 never started it"),
      std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("leaving without MPI_Finalize"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("rank 1 woke up"), std::string::npos) << r.output;
}

// srun without PMIx: tern says so (and how to launch) instead of letting MPI_Init abort.
TEST_F(SrunJob, WithoutPmixMakeCommunicatorNamesTheFix) {
  testing::CommandResult r =
      Srun("--mpi=none -n 2", "--gtest_also_run_disabled_tests --gtest_filter=SrunWithoutPmix.*");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(Count(r.output, "[  PASSED  ]"), 2) << r.output;
  EXPECT_EQ(Count(r.output, "but without PMIx (srun --mpi=none)"), 2) << r.output;
}

}  // namespace
}  // namespace tern::dist
