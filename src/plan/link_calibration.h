// The communication term from a measurement: `mpirun -np N tern bench --dist --json > dist.json` times the
// ranks' all-reduce (dist/allreduce_bench.h); `tern plan --calibrate dist.json` then uses its bus bandwidth
// and latency for the ring all-reduce of the rows it speaks for, instead of the catalog's link figure and
// allreduce_link_efficiency:
//
//   all-reduce(n) = 2(n-1)/n x gradient bytes / measured bus bandwidth + measured latency x (n-1)/(W-1)
//
// (W = the ranks measured; a ring all-reduce takes 2(n-1) steps, so its latency grows with n-1.) The bus
// bandwidth is the per-rank link rate a ring achieves, which is why it transfers across ring sizes.
//
// Which rows: those on the measured GPU (the file's "gpu", a catalog id; set it by hand when the bench could
// not name it) in the same topology: a one-node measurement speaks for the rows inside one instance, a
// several-node one for the rows across instances. An "instance" key (set by hand) narrows it to that
// instance type. A CPU measurement (mpi between processes) speaks for no catalog row.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "plan/catalog.h"
#include "plan/throughput.h"

namespace tern::plan {

struct LinkProfile {
  std::string file;
  std::string communicator;  // "mpi", "nccl"
  int world = 0, nodes = 1;
  std::string device;    // "cpu" | "cuda"
  std::string gpu;       // catalog id ("H100"); empty when unknown
  std::string gpu_name;  // as the device named itself
  std::string instance;  // optional, by hand: the instance type measured on
  double latency_us = 0;
  double bus_gb_per_s = 0;  // the bus bandwidth of the largest size
  double largest_bytes = 0;

  // "dist.json: nccl, 8 ranks on 1 node (H100)"
  std::string Describe() const;
  // Does this measurement speak for `nodes` instances of offer `o`?
  bool AppliesTo(const InstanceOffer& o, int nodes) const;
};

// True when the JSON text is a `tern bench --dist` result ("tool": "tern bench --dist").
bool IsDistBenchJson(const std::string& text);
// Parses one; errors name the key, and a world of 1 (nothing crossed a link) says how to measure one.
Result<LinkProfile> ParseDistBenchJson(const std::string& text, const std::string& file);

// The measured link for a ring of n_gpus ranks (n_gpus > 1), `inter_node` as the row's.
LinkModel MeasuredLink(const LinkProfile& p, int n_gpus, bool inter_node);

// The first profile that applies to the row (an instance-named one before a GPU-wide one); null if none.
const LinkProfile* FindLinkProfile(const std::vector<LinkProfile>& profiles, const InstanceOffer& o,
                                   int nodes);

}  // namespace tern::plan
