// Which launcher started this process, and as which rank: read from the environment, so that
// `mpirun -np 2 tern train ...` and `srun -n 2 tern train ...` need no flag of tern's.
#pragma once

#include <functional>
#include <string>

#include "core/status.h"

namespace tern::dist {

struct LaunchInfo {
  // "none" (one process), "openmpi" (mpirun), "pmi" (MPICH's Hydra, srun --mpi=pmi2), "slurm" (srun),
  // "pmix" (a PMIx launcher that exports no world size: world is 0 and MPI will know it).
  std::string launcher = "none";
  int rank = 0;
  int world = 1;
  int local_rank = 0;   // among the ranks on this machine
  int local_world = 1;  // Slurm without a tasks-per-node list: local_rank + 1 (a lower bound)
  // An id the ranks of one launch share and the next launch does not (Slurm job.step, the PMIx namespace,
  // Open MPI's job id); empty when the launcher gives none. Tags the NCCL id file.
  std::string job_id;
  // Whether the launcher gave MPI a way to find the other ranks: Open MPI's or PMI's variables, or PMIx
  // (PMIX_RANK). False under srun without PMIx (--mpi=none), where Open MPI's MPI_Init aborts.
  bool mpi_wired = true;
  // srun's MPI plugin (SLURM_MPI_TYPE: pmix; srun --mpi=none leaves it unset), for messages.
  std::string slurm_mpi;

  // "launched by Slurm (srun) with 2 tasks", for messages.
  std::string Describe() const;
};

// The value of an environment variable, nullptr when unset (tests pass a fake).
using EnvLookup = std::function<const char*(const char* name)>;

// Reads, in this order (the first launcher found wins, so mpirun inside a Slurm allocation is Open MPI):
//   Open MPI  OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//   PMI       PMI_RANK, PMI_SIZE (+ MPI_LOCALRANKID, MPI_LOCALNRANKS, else Slurm's local ids)
//   Slurm     SLURM_PROCID, SLURM_STEP_NUM_TASKS (else SLURM_NTASKS), SLURM_LOCALID,
//             SLURM_STEP_TASKS_PER_NODE (else SLURM_TASKS_PER_NODE, "2(x3),1") with SLURM_NODEID;
//             PMIX_RANK says whether srun wired up PMIx (mpi_wired), SLURM_MPI_TYPE which plugin it ran
//   PMIx      PMIX_RANK
// InvalidArgument naming the variable when one is not a number or the ranks do not fit the world.
[[nodiscard]] Result<LaunchInfo> DetectLaunch(const EnvLookup& env = nullptr);

// Slurm's compressed tasks-per-node list ("2(x3),1") expanded for node `node`: 2 for nodes 0-2, 1 for 3.
// InvalidArgument for a malformed list or a node beyond it.
[[nodiscard]] Result<int> TasksOnNode(const std::string& tasks_per_node, int node);

}  // namespace tern::dist
