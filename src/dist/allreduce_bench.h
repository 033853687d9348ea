// `tern bench --dist`: the all-reduce of the ranks this process was launched with (mpirun, srun; one
// process is world 1), timed over a range of message sizes as nccl-tests' all_reduce_perf reports it:
//
//   time     mean seconds per AllReduce (sum, fp32, out of place) over `iters` back-to-back calls after
//            `warmup` untimed ones, the slowest rank's (an integer all-reduce of the ranks' times, max)
//   algbw    bytes / time
//   busbw    algbw x 2(W-1)/W: the bytes each rank's link carries in a ring all-reduce, so that the
//            figure compares across world sizes and with the link's own bandwidth
//
// Summary: latency = the time of the smallest size, link bandwidth = the bus bandwidth of the largest. These
// are the two figures `tern plan --calibrate` uses for its ring all-reduce term (plan/link_calibration.h).
// Every rank runs the same sizes in the same order and gets the same figures; only rank 0 prints them.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "core/cpu_info.h"
#include "core/status.h"
#include "dist/communicator.h"

namespace tern::dist {

struct AllReduceBenchOptions {
  size_t min_bytes = 1024;               // rounded up to whole floats
  size_t max_bytes = size_t{256} << 20;  // sizes double from min to max; max is always measured
  int warmup = 5;
  int iters = 20;
};

struct AllReduceSample {
  size_t bytes = 0;  // count x 4
  size_t count = 0;  // floats
  double time_us = 0;
  double algbw_gb_per_s = 0;  // 1e9 bytes per second
  double busbw_gb_per_s = 0;
};

struct AllReduceBenchResult {
  AllReduceBenchOptions options;
  std::string communicator;  // "single", "mpi", "nccl"
  int world = 1, nodes = 1, local_world = 1;
  bool device_memory = false;
  std::vector<AllReduceSample> sizes;
  double latency_us = 0;     // time of the smallest size
  double link_gb_per_s = 0;  // bus bandwidth of the largest size; 0 at world 1 (nothing crossed a link)
  // Set by the caller (it knows the device): for the JSON's "machine" block and the catalog GPU.
  CpuInfo cpu;
  int threads = 0;
  std::string backend;   // "cpu" or the CUDA backend's name
  std::string gpu_name;  // the device's own name; empty on the CPU
  std::string gpu;       // the catalog's id for it (plan/gpu_specs.h); empty = unknown or CPU

  // The format `tern plan --calibrate` reads ("tool": "tern bench --dist").
  nlohmann::json ToJson() const;
  // The table rank 0 prints, with the summary line last.
  std::string ToText() const;
};

// 2(W-1)/W: bus bandwidth over algorithm bandwidth for a ring all-reduce over W ranks (0 for W = 1).
double BusBandwidthFactor(int world);
// The sizes measured: min_bytes (rounded up to a float), doubling, up to and including max_bytes.
std::vector<size_t> AllReduceBenchSizes(size_t min_bytes, size_t max_bytes);

// Every rank calls it with the same options. Buffers come from `device` when the communicator moves device
// memory (nccl), else from the host. Each size's result is checked: every rank sends rank + 1, so every
// element must come back as W(W+1)/2. Errors name the fix (a bad size range; a wrong sum is Internal).
[[nodiscard]] Result<AllReduceBenchResult> RunAllReduceBench(Communicator& comm, Backend* device,
                                                             const AllReduceBenchOptions& options);

}  // namespace tern::dist
