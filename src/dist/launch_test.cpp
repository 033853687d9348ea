// Launch detection on fake environments, and MakeCommunicator's choices and errors (those that need no
// second process; the MPI ones are in mpi_test.cpp).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "dist/launch.h"
#include "dist/setup.h"

namespace tern::dist {
namespace {

// An environment of exactly these variables.
EnvLookup Env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

LaunchInfo Detect(std::map<std::string, std::string> vars) {
  Result<LaunchInfo> l = DetectLaunch(Env(std::move(vars)));
  EXPECT_TRUE(l.ok()) << l.status().message();
  return l.ok() ? *l : LaunchInfo{};
}

std::string DetectError(std::map<std::string, std::string> vars) {
  Result<LaunchInfo> l = DetectLaunch(Env(std::move(vars)));
  EXPECT_FALSE(l.ok());
  return l.ok() ? "" : l.status().message();
}

TEST(DetectLaunch, NoLauncherIsOneProcess) {
  const LaunchInfo l = Detect({{"HOME", "/root"}});
  EXPECT_EQ(l.launcher, "none");
  EXPECT_EQ(l.rank, 0);
  EXPECT_EQ(l.world, 1);
  EXPECT_EQ(l.local_rank, 0);
  EXPECT_EQ(l.local_world, 1);
}

TEST(DetectLaunch, OpenMpi) {
  const LaunchInfo l = Detect({{"OMPI_COMM_WORLD_RANK", "3"},
                               {"OMPI_COMM_WORLD_SIZE", "4"},
                               {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                               {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                               {"OMPI_MCA_ess_base_jobid", "12345"}});
  EXPECT_EQ(l.launcher, "openmpi");
  EXPECT_EQ(l.rank, 3);
  EXPECT_EQ(l.world, 4);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.local_world, 2);
  EXPECT_EQ(l.job_id, "12345");
  EXPECT_EQ(l.Describe(), "launched by Open MPI (mpirun) with 4 ranks");
}

TEST(DetectLaunch, OpenMpiInsideASlurmAllocationIsOpenMpi) {
  const LaunchInfo l = Detect({{"OMPI_COMM_WORLD_RANK", "1"},
                               {"OMPI_COMM_WORLD_SIZE", "2"},
                               {"SLURM_PROCID", "0"},
                               {"SLURM_NTASKS", "8"}});
  EXPECT_EQ(l.launcher, "openmpi");
  EXPECT_EQ(l.rank, 1);
  EXPECT_EQ(l.world, 2);
}

TEST(DetectLaunch, Pmi) {
  LaunchInfo l =
      Detect({{"PMI_RANK", "2"}, {"PMI_SIZE", "6"}, {"MPI_LOCALRANKID", "0"}, {"MPI_LOCALNRANKS", "3"}});
  EXPECT_EQ(l.launcher, "pmi");
  EXPECT_EQ(l.rank, 2);
  EXPECT_EQ(l.world, 6);
  EXPECT_EQ(l.local_rank, 0);
  EXPECT_EQ(l.local_world, 3);
  // srun --mpi=pmi2: PMI's rank and size, Slurm's local ids.
  l = Detect({{"PMI_RANK", "5"},
              {"PMI_SIZE", "6"},
              {"SLURM_PROCID", "5"},
              {"SLURM_NTASKS", "6"},
              {"SLURM_LOCALID", "2"},
              {"SLURM_NODEID", "1"},
              {"SLURM_TASKS_PER_NODE", "3(x2)"}});
  EXPECT_EQ(l.launcher, "pmi");
  EXPECT_EQ(l.local_rank, 2);
  EXPECT_EQ(l.local_world, 3);
}

TEST(DetectLaunch, Slurm) {
  const LaunchInfo l = Detect({{"SLURM_PROCID", "9"},
                               {"SLURM_NTASKS", "16"},
                               {"SLURM_LOCALID", "1"},
                               {"SLURM_NODEID", "1"},
                               {"SLURM_TASKS_PER_NODE", "8(x2)"},
                               {"SLURM_JOB_ID", "4711"},
                               {"SLURM_STEP_ID", "0"}});
  EXPECT_EQ(l.launcher, "slurm");
  EXPECT_EQ(l.rank, 9);
  EXPECT_EQ(l.world, 16);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.local_world, 8);
  EXPECT_EQ(l.job_id, "4711.0");
  EXPECT_EQ(l.Describe(), "launched by Slurm (srun) with 16 tasks");
  EXPECT_FALSE(l.mpi_wired);  // no PMIX_RANK: srun --mpi=none
}

TEST(DetectLaunch, SrunWithPmixWiresUpMpi) {
  const LaunchInfo l = Detect({{"SLURM_PROCID", "1"},
                               {"SLURM_NTASKS", "2"},
                               {"SLURM_LOCALID", "1"},
                               {"SLURM_STEP_TASKS_PER_NODE", "2"},
                               {"SLURM_MPI_TYPE", "pmix"},
                               {"PMIX_RANK", "1"},
                               {"PMIX_NAMESPACE", "slurm.pmix.14.0"},
                               {"SLURM_JOB_ID", "14"},
                               {"SLURM_STEP_ID", "0"}});
  EXPECT_EQ(l.launcher, "slurm");  // Slurm's variables give the world, which PMIx alone does not
  EXPECT_EQ(l.world, 2);
  EXPECT_EQ(l.local_world, 2);
  EXPECT_TRUE(l.mpi_wired);
  EXPECT_EQ(l.slurm_mpi, "pmix");
  EXPECT_EQ(l.job_id, "14.0");
}

TEST(DetectLaunch, SlurmStepVariablesWinOverTheAllocations) {
  // An srun of 2 tasks inside an allocation of 8: the step's counts describe this launch.
  const LaunchInfo l = Detect({{"SLURM_PROCID", "1"},
                               {"SLURM_NTASKS", "8"},
                               {"SLURM_STEP_NUM_TASKS", "2"},
                               {"SLURM_LOCALID", "1"},
                               {"SLURM_NODEID", "0"},
                               {"SLURM_TASKS_PER_NODE", "8"},
                               {"SLURM_STEP_TASKS_PER_NODE", "2"}});
  EXPECT_EQ(l.world, 2);
  EXPECT_EQ(l.local_world, 2);
}

TEST(DetectLaunch, SlurmWithoutATasksPerNodeListKnowsALowerBound) {
  const LaunchInfo l = Detect({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "3"}});
  EXPECT_EQ(l.local_rank, 3);
  EXPECT_EQ(l.local_world, 4);
}

TEST(DetectLaunch, PmixAloneLeavesTheWorldToMpi) {
  const LaunchInfo l = Detect({{"PMIX_RANK", "1"}, {"PMIX_NAMESPACE", "prterun-host-123@1"}});
  EXPECT_EQ(l.launcher, "pmix");
  EXPECT_EQ(l.rank, 1);
  EXPECT_EQ(l.world, 0);
  EXPECT_EQ(l.job_id, "prterun-host-123@1");
}

TEST(DetectLaunch, ErrorsNameTheVariable) {
  EXPECT_NE(DetectError({{"OMPI_COMM_WORLD_SIZE", "two"}, {"OMPI_COMM_WORLD_RANK", "0"}})
                .find("OMPI_COMM_WORLD_SIZE='two'"),
            std::string::npos);
  EXPECT_NE(DetectError({{"OMPI_COMM_WORLD_SIZE", "2"}}).find("OMPI_COMM_WORLD_RANK is not"),
            std::string::npos);
  EXPECT_NE(DetectError({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "2"}})
                .find("SLURM_PROCID=2 does not fit SLURM_NTASKS=2"),
            std::string::npos);
  EXPECT_NE(DetectError({{"PMI_RANK", "-1"}, {"PMI_SIZE", "2"}}).find("PMI_RANK='-1'"), std::string::npos);
  EXPECT_NE(DetectError({{"SLURM_PROCID", "0"},
                         {"SLURM_NTASKS", "2"},
                         {"SLURM_LOCALID", "0"},
                         {"SLURM_TASKS_PER_NODE", "2(x"}})
                .find("SLURM_TASKS_PER_NODE"),
            std::string::npos);
}

TEST(TasksOnNode, ExpandsSlurmsList) {
  const std::string list = "2(x3),1,4";
  const int want[] = {2, 2, 2, 1, 4};
  for (int node = 0; node < 5; node++) {
    Result<int> t = TasksOnNode(list, node);
    ASSERT_TRUE(t.ok()) << t.status().message();
    EXPECT_EQ(*t, want[node]) << "node " << node;
  }
  EXPECT_FALSE(TasksOnNode(list, 5).ok());
  for (const char* bad : {"", "x", "2(3)", "2(x)", "2(x3", "0", "2,,1"})
    EXPECT_FALSE(TasksOnNode(bad, 0).ok()) << bad;
}

TEST(CommBackendName, ParsesTheConfigValues) {
  for (const char* name : {"auto", "none", "mpi", "nccl"}) {
    Result<CommBackend> b = ParseCommBackend(name);
    ASSERT_TRUE(b.ok());
    EXPECT_STREQ(CommBackendName(*b), name);
  }
  Result<CommBackend> b = ParseCommBackend("gloo");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("auto, none, mpi or nccl"), std::string::npos);
}

TEST(MakeCommunicator, OneProcessIsSingle) {
  for (CommBackend b : {CommBackend::kAuto, CommBackend::kNone}) {
    CommSetup setup;
    setup.backend = b;
    Result<std::unique_ptr<Communicator>> c = MakeCommunicator(setup, LaunchInfo{});
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_EQ((*c)->name(), "single");
    EXPECT_EQ((*c)->world(), 1);
  }
}

LaunchInfo SlurmTwoTasks() {
  LaunchInfo l;
  l.launcher = "slurm";
  l.world = 2;
  return l;
}

TEST(MakeCommunicator, NoneWithSeveralRanksSaysEachWouldTrainAlone) {
  CommSetup setup;
  setup.backend = CommBackend::kNone;
  Result<std::unique_ptr<Communicator>> c = MakeCommunicator(setup, SlurmTwoTasks());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("launched by Slurm (srun) with 2 tasks"), std::string::npos)
      << c.status().message();
  EXPECT_NE(c.status().message().find("train alone"), std::string::npos) << c.status().message();
}

TEST(MakeCommunicator, NcclOnTheCpuPointsToMpi) {
  CommSetup setup;
  setup.backend = CommBackend::kNccl;
  Result<std::unique_ptr<Communicator>> c = MakeCommunicator(setup, SlurmTwoTasks());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("dist.backend: mpi"), std::string::npos) << c.status().message();
}

#ifdef TERN_HAVE_MPI
// Refused before MPI_Init, which would abort the process.
TEST(MakeCommunicator, SrunWithoutPmixSaysHowToLaunch) {
  LaunchInfo l = SlurmTwoTasks();
  l.mpi_wired = false;
  for (CommBackend b : {CommBackend::kAuto, CommBackend::kMpi}) {
    CommSetup setup;
    setup.backend = b;
    Result<std::unique_ptr<Communicator>> c = MakeCommunicator(setup, l);
    ASSERT_FALSE(c.ok());
    const std::string& m = c.status().message();
    EXPECT_NE(m.find("launched by Slurm (srun) with 2 tasks, but without PMIx (srun --mpi=none)"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("srun --mpi=pmix"), std::string::npos) << m;
  }
}
#else
// Only in builds without MPI (with MPI, mpi_test.cpp checks what auto makes of several ranks).
TEST(MakeCommunicator, WithoutMpiSaysHowToGetIt) {
  CommSetup setup;
  Result<std::unique_ptr<Communicator>> c = MakeCommunicator(setup, SlurmTwoTasks());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(
      c.status().message().find("launched by Slurm (srun) with 2 tasks, but tern was built without MPI"),
      std::string::npos)
      << c.status().message();
}
#endif

}  // namespace
}  // namespace tern::dist
