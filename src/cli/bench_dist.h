// `tern bench --dist`: the all-reduce of the ranks this process was launched with (dist/allreduce_bench.h).
#pragma once

#include <string>

namespace tern::cli {

struct DistBenchFlags {
  std::string device = "auto";  // cpu | cpu-ref (host buffers, mpi) | cuda (device buffers, nccl) | auto
  double min_kb = 1;
  double max_mb = 256;
  int iters = 20, warmup = 3;
  bool json = false;
};

// Every rank runs it; rank 0 prints (the table, or one JSON object with --json). Returns the exit status.
int RunDistBench(const DistBenchFlags& flags);

}  // namespace tern::cli
