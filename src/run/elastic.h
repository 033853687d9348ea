// Elastic jobs (job.ranks MIN-MAX, e.g. `--ranks 1-2`): before each attempt the supervisor asks how many
// ranks can run now and starts the attempt with that many, at most MAX; with fewer than MIN it waits (the
// backoff, doubling) and asks again. The trainer resumes at any world size (docs/distributed.md: the
// checkpoint is one format, the data re-sliced), so a job that lost a GPU goes on with fewer, and takes them
// back at the next relaunch. The ledger records each attempt's ranks.
#pragma once

#include <string>

#include "core/status.h"
#include "run/job_spec.h"

namespace tern::run {

// How many ranks can run now: job.ranks_probe (run by /bin/sh; it prints a whole number), else for a
// train.device cuda job the GPUs `nvidia-smi -L` lists, else job.ranks (the maximum). An error when the
// probe fails or prints something else.
[[nodiscard]] Result<int> ProbeRanks(const JobSpec& spec);

struct RanksNow {
  int ranks = 0;    // for the next attempt; 0 = fewer than the minimum can run: wait
  std::string why;  // a line for the console when it is not simply the maximum
};
// The ranks of the next attempt of `spec` given what the probe said (a failed probe: the maximum).
RanksNow ChooseRanks(const JobSpec& spec, const Result<int>& available);

}  // namespace tern::run
