#include "dist/launch.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace tern::dist {
namespace {

// The variable as an int: nullopt when unset, InvalidArgument when set but not a non-negative number.
Result<std::optional<int>> ReadInt(const EnvLookup& env, const char* name) {
  const char* v = env(name);
  if (!v) return std::optional<int>();
  const std::string_view s(v);
  int value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || value < 0)
    return Status::InvalidArgument(fmt::format("{}='{}' is not a non-negative number", name, s));
  return std::optional<int>(value);
}

std::string Str(const EnvLookup& env, const char* name) {
  const char* v = env(name);
  return v ? v : "";
}

Status CheckRanks(const LaunchInfo& l, const char* rank_var, const char* world_var) {
  if (l.world != 0 && (l.world < 1 || l.rank >= l.world))
    return Status::InvalidArgument(fmt::format("{}={} does not fit {}={} (ranks are 0 .. world - 1)",
                                               rank_var, l.rank, world_var, l.world));
  if (l.local_world < 1 || l.local_rank >= l.local_world)
    return Status::InvalidArgument(fmt::format("local rank {} does not fit the {} ranks on this machine ({})",
                                               l.local_rank, l.local_world, l.launcher));
  return Status::Ok();
}

// Slurm's local rank and the number of tasks on this node, when Slurm exported them.
Status ReadSlurmLocal(const EnvLookup& env, LaunchInfo* l) {
  TERN_ASSIGN_OR_RETURN(std::optional<int> local, ReadInt(env, "SLURM_LOCALID"));
  if (!local) return Status::Ok();
  l->local_rank = *local;
  l->local_world = *local + 1;
  std::string per_node = Str(env, "SLURM_STEP_TASKS_PER_NODE");
  const char* per_node_var = "SLURM_STEP_TASKS_PER_NODE";
  if (per_node.empty()) {
    per_node = Str(env, "SLURM_TASKS_PER_NODE");
    per_node_var = "SLURM_TASKS_PER_NODE";
  }
  TERN_ASSIGN_OR_RETURN(std::optional<int> node, ReadInt(env, "SLURM_NODEID"));
  if (per_node.empty()) return Status::Ok();
  Result<int> tasks = TasksOnNode(per_node, node.value_or(0));
  if (!tasks.ok()) return tasks.status().WithContext(per_node_var);
  l->local_world = *tasks;
  return Status::Ok();
}

}  // namespace

std::string LaunchInfo::Describe() const {
  if (launcher == "openmpi") return fmt::format("launched by Open MPI (mpirun) with {} ranks", world);
  if (launcher == "pmi")
    return fmt::format("launched by a PMI launcher (mpiexec, srun --mpi=pmi2) with {} ranks", world);
  if (launcher == "slurm") return fmt::format("launched by Slurm (srun) with {} tasks", world);
  if (launcher == "pmix") return "launched by a PMIx launcher";
  return "not launched by MPI or Slurm (one process)";
}

Result<int> TasksOnNode(const std::string& list, int node) {
  const Status bad =
      Status::InvalidArgument(fmt::format("'{}' is not a Slurm tasks-per-node list such as '2(x3),1'", list));
  // Each entry: tasks, or tasks(xrepeat). The whole list is checked before looking anything up.
  std::vector<std::pair<int, int>> entries;  // (tasks, repeat)
  int nodes = 0;
  for (size_t pos = 0; pos <= list.size();) {
    const size_t end = std::min(list.find(',', pos), list.size());
    const std::string_view entry(list.data() + pos, end - pos);
    int tasks = 0, repeat = 1;
    auto [p, ec] = std::from_chars(entry.data(), entry.data() + entry.size(), tasks);
    if (ec != std::errc() || tasks < 1) return bad;
    const std::string_view rest(p, static_cast<size_t>(entry.data() + entry.size() - p));
    if (!rest.empty()) {
      if (rest.size() < 4 || rest.substr(0, 2) != "(x" || rest.back() != ')') return bad;
      auto [q, ec2] = std::from_chars(rest.data() + 2, rest.data() + rest.size() - 1, repeat);
      if (ec2 != std::errc() || q != rest.data() + rest.size() - 1 || repeat < 1) return bad;
    }
    entries.emplace_back(tasks, repeat);
    nodes += repeat;
    pos = end + 1;
  }
  int first = 0;  // the first node the entry covers
  for (const auto& [tasks, repeat] : entries) {
    if (node < first + repeat) return tasks;
    first += repeat;
  }
  return Status::InvalidArgument(
      fmt::format("node {} is beyond the tasks-per-node list '{}' ({} nodes)", node, list, nodes));
}

Result<LaunchInfo> DetectLaunch(const EnvLookup& env_in) {
  const EnvLookup env = env_in ? env_in : [](const char* name) -> const char* { return std::getenv(name); };
  LaunchInfo l;

  TERN_ASSIGN_OR_RETURN(std::optional<int> ompi_size, ReadInt(env, "OMPI_COMM_WORLD_SIZE"));
  if (ompi_size) {
    l.launcher = "openmpi";
    l.world = *ompi_size;
    TERN_ASSIGN_OR_RETURN(std::optional<int> rank, ReadInt(env, "OMPI_COMM_WORLD_RANK"));
    TERN_ASSIGN_OR_RETURN(std::optional<int> local, ReadInt(env, "OMPI_COMM_WORLD_LOCAL_RANK"));
    TERN_ASSIGN_OR_RETURN(std::optional<int> local_size, ReadInt(env, "OMPI_COMM_WORLD_LOCAL_SIZE"));
    if (!rank) return Status::InvalidArgument("OMPI_COMM_WORLD_SIZE is set but OMPI_COMM_WORLD_RANK is not");
    l.rank = *rank;
    l.local_rank = local.value_or(0);
    l.local_world = local_size.value_or(l.local_rank + 1);
    l.job_id = Str(env, "PMIX_NAMESPACE");
    if (l.job_id.empty()) l.job_id = Str(env, "OMPI_MCA_ess_base_jobid");
    TERN_RETURN_IF_ERROR(CheckRanks(l, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"));
    return l;
  }

  TERN_ASSIGN_OR_RETURN(std::optional<int> pmi_size, ReadInt(env, "PMI_SIZE"));
  if (pmi_size) {
    l.launcher = "pmi";
    l.world = *pmi_size;
    TERN_ASSIGN_OR_RETURN(std::optional<int> rank, ReadInt(env, "PMI_RANK"));
    if (!rank) return Status::InvalidArgument("PMI_SIZE is set but PMI_RANK is not");
    l.rank = *rank;
    TERN_ASSIGN_OR_RETURN(std::optional<int> local, ReadInt(env, "MPI_LOCALRANKID"));
    TERN_ASSIGN_OR_RETURN(std::optional<int> local_size, ReadInt(env, "MPI_LOCALNRANKS"));
    if (local && local_size) {
      l.local_rank = *local;
      l.local_world = *local_size;
    } else {
      TERN_RETURN_IF_ERROR(ReadSlurmLocal(env, &l));
    }
    l.job_id = Str(env, "PMI_KVSNAME");
    TERN_RETURN_IF_ERROR(CheckRanks(l, "PMI_RANK", "PMI_SIZE"));
    return l;
  }

  TERN_ASSIGN_OR_RETURN(std::optional<int> procid, ReadInt(env, "SLURM_PROCID"));
  TERN_ASSIGN_OR_RETURN(std::optional<int> step_tasks, ReadInt(env, "SLURM_STEP_NUM_TASKS"));
  TERN_ASSIGN_OR_RETURN(std::optional<int> ntasks, ReadInt(env, "SLURM_NTASKS"));
  if (procid && (step_tasks || ntasks)) {
    l.launcher = "slurm";
    l.rank = *procid;
    l.world = step_tasks ? *step_tasks : *ntasks;
    TERN_RETURN_IF_ERROR(ReadSlurmLocal(env, &l));
    const std::string job = Str(env, "SLURM_JOB_ID"), step = Str(env, "SLURM_STEP_ID");
    l.job_id = step.empty() ? job : job + "." + step;
    // srun --mpi=pmix exports PMIX_RANK (and --mpi=pmi2 PMI_RANK, read above); under --mpi=none MPI finds no
    // peers.
    l.mpi_wired = env("PMIX_RANK") != nullptr;
    l.slurm_mpi = Str(env, "SLURM_MPI_TYPE");
    TERN_RETURN_IF_ERROR(CheckRanks(l, "SLURM_PROCID", step_tasks ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS"));
    return l;
  }

  TERN_ASSIGN_OR_RETURN(std::optional<int> pmix_rank, ReadInt(env, "PMIX_RANK"));
  if (pmix_rank) {
    l.launcher = "pmix";
    l.rank = *pmix_rank;
    l.world = 0;  // PMIx exports no size; MPI_Comm_size will say
    l.local_rank = 0;
    l.local_world = 1;
    l.job_id = Str(env, "PMIX_NAMESPACE");
    return l;
  }
  return l;
}

}  // namespace tern::dist
