// The repository's one-node Slurm cluster as the tests find it (scripts/slurm-local, started by .ci/run).
#pragma once

#include <cstdlib>
#include <string>

#include "testing/processes.h"

namespace tern::testing {

// Why Slurm cannot run jobs here ("" when it can): srun missing, SLURM_CONF unset, or the cluster silent.
// Tests skip with it (TERN_SKIP_OR_FAIL_IN_CI: a failure in CI).
inline std::string NoSlurmCluster() {
  if (FindProgram("srun").empty())
    return "srun is not on PATH: scripts/install-deps installs Debian's slurm-wlm";
  const char* conf = std::getenv("SLURM_CONF");
  if (!conf || !*conf)
    return "SLURM_CONF is not set: start the repository's one-node cluster with "
           "eval \"$(scripts/slurm-local start)\" (.ci/run does)";
  CommandResult r = RunCommand("timeout 20 sinfo -h -o %t");
  if (r.code != 0 || r.output.empty())
    return "the Slurm cluster of SLURM_CONF=" + std::string(conf) + " does not answer (sinfo: " + r.output +
           "): scripts/slurm-local start, or scripts/slurm-local status";
  return "";
}

}  // namespace tern::testing
