#include "run/elastic.h"

#include <charconv>

#include "run/slurm.h"

namespace tern::run {

Result<int> ProbeRanks(const JobSpec& spec) {
  if (!spec.ranks_probe.empty()) {
    TERN_ASSIGN_OR_RETURN(ProgramResult r, RunProgram({"/bin/sh", "-c", spec.ranks_probe}, "a POSIX shell"));
    std::string text = r.out;
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    int n = -1;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (r.code != 0 || ec != std::errc() || ptr != text.data() + text.size() || n < 0) {
      return Status::Unavailable(
          fmt::format("job.ranks_probe `{}` exited {} and printed '{}'{}: it must print "
                      "a whole number",
                      spec.ranks_probe, r.code, text, r.err.empty() ? "" : " (" + r.err + ")"));
    }
    return n;
  }
  if (spec.cuda) {
    TERN_ASSIGN_OR_RETURN(ProgramResult r, RunProgram({"nvidia-smi", "-L"},
                                                      "the NVIDIA driver's tools, or set job.ranks_probe"));
    if (r.code != 0) return Status::Unavailable(fmt::format("nvidia-smi -L exited {}: {}", r.code, r.err));
    int gpus = 0;
    for (size_t at = r.out.find("GPU "); at != std::string::npos; at = r.out.find("\nGPU ", at + 1)) gpus++;
    return gpus;
  }
  return spec.ranks;
}

RanksNow ChooseRanks(const JobSpec& spec, const Result<int>& available) {
  if (!Elastic(spec)) return {spec.ranks, ""};
  if (!available.ok()) {
    return {spec.ranks, fmt::format("cannot tell how many ranks can run ({}); trying {}",
                                    available.status().message(), spec.ranks)};
  }
  const int n = available.value();
  if (n >= spec.ranks) return {spec.ranks, ""};
  if (n >= spec.min_ranks) {
    return {n, fmt::format("elastic: {} of at most {} ranks can run now (job.ranks {}-{}); starting with {}",
                           n, spec.ranks, spec.min_ranks, spec.ranks, n)};
  }
  return {0, fmt::format("elastic: only {} rank{} can run now, job.ranks needs at least {}", n,
                         n == 1 ? "" : "s", spec.min_ranks)};
}

}  // namespace tern::run
