// Spot-market traces: one integer per tick of a fixed gap, as published with *Can't Be Late* (NSDI 2024;
// data/spot-traces/README.md). What a value means is ambiguous for the availability family (the
// repository's README and the authors' simulator disagree), so the reading is an explicit Polarity that
// every result names; the preemption family (1 while a launched instance runs) is read one way only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tern::plan {

enum class Polarity {
  kAvailableIfNonzero,    // the repository's README: a value counts the instances one could get
  kUnavailableIfNonzero,  // the authors' simulator: `spot_available = not trace[tick]`
};
std::string_view PolarityName(Polarity p);  // "available-if-nonzero" / "unavailable-if-nonzero"
// "available-if-nonzero" | "unavailable-if-nonzero".
Result<Polarity> ParsePolarity(std::string_view text);

struct SpotTrace {
  std::string file;    // as given
  std::string zone;    // "us-west-2b": the file name up to its first '_'
  std::string family;  // "availability" | "preemption" | "" (from the path)
  double gap_s = 0;    // seconds per tick (metadata.gap_seconds)
  Polarity polarity = Polarity::kAvailableIfNonzero;
  std::vector<uint8_t> up;  // 1: a spot instance can be had (and kept) during this tick

  size_t ticks() const { return up.size(); }
  double gap_h() const { return gap_s / 3600.0; }
  double hours() const { return ticks() * gap_h(); }
  double AvailableFraction() const;
  // Cyclic: a job that runs past the end of the trace wraps to its beginning.
  bool Up(size_t tick) const { return up[tick % up.size()] != 0; }
  // "us-west-2" for zone "us-west-2b" (the zone with its trailing letter dropped).
  std::string Region() const;
};

// Parses one trace file's text: {"metadata": {"gap_seconds": G}, "data": [v, ...]}. Errors name the file
// and what is wrong (no data, a non-integer value, a gap that is not positive).
Result<SpotTrace> ParseSpotTrace(std::string_view text, const std::string& file, Polarity polarity);

// Files and directories (every *.json under a directory, sorted); `polarity` applies to the
// availability family, the preemption family is always read available-if-nonzero.
Result<std::vector<SpotTrace>> LoadSpotTraces(const std::vector<std::string>& paths, Polarity polarity);

// What a trace says about preemptions, for `tern simulate --estimate-hazard` and the planner's spot rows.
struct HazardEstimate {
  double up_hours = 0;       // ticks available x gap
  int preemptions = 0;       // up -> down transitions (not counting the cyclic wrap)
  double mtbf_h = 0;         // up_hours / preemptions (the trace's span when it never drops)
  double hazard_per_hr = 0;  // 1 / mtbf_h
  double mean_outage_h = 0;  // mean length of a down run
  double longest_outage_h = 0;
};
HazardEstimate EstimateHazard(const SpotTrace& t);

}  // namespace tern::plan
