#include "cli/bench_dist.h"

#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "backend/registry.h"
#include "dist/allreduce_bench.h"
#include "dist/launch.h"
#include "dist/setup.h"
#include "plan/gpu_specs.h"
#include "train/bench.h"

namespace tern::cli {
namespace {

// The device whose buffers the ranks reduce: none for the CPU (host memory, mpi), the CUDA backend on this
// rank's GPU for cuda (device memory, nccl). auto = cuda where there is one.
Result<std::unique_ptr<Backend>> DistDevice(const std::string& device, const dist::LaunchInfo& launch) {
  const bool cuda = device == "cuda" || (device == "auto" && CudaAvailable());
  if (!cuda) {
    if (device != "cpu" && device != "cpu-ref" && device != "auto")
      return Status::InvalidArgument("--device '" + device + "': use cpu, cpu-ref, cuda or auto");
    return std::unique_ptr<Backend>();
  }
  // One GPU per rank on a node, as the trainer places them: the CUDA backend opens TERN_CUDA_DEVICE.
  if (launch.local_world > 1 && !std::getenv("TERN_CUDA_DEVICE"))
    ::setenv("TERN_CUDA_DEVICE", std::to_string(launch.local_rank).c_str(), 1);
  return MakeBackend("cuda");
}

Result<dist::AllReduceBenchResult> Measure(const DistBenchFlags& f, const dist::LaunchInfo& launch) {
  TERN_ASSIGN_OR_RETURN(std::unique_ptr<Backend> device, DistDevice(f.device, launch));
  dist::CommSetup setup;
  setup.compute = device.get();
  TERN_ASSIGN_OR_RETURN(std::unique_ptr<dist::Communicator> comm, dist::MakeCommunicator(setup, launch));
  dist::AllReduceBenchOptions o;
  if (!(f.min_kb > 0) || !(f.max_mb > 0))
    return Status::InvalidArgument("--dist-min-kb and --dist-max-mb must be positive");
  o.min_bytes = static_cast<size_t>(f.min_kb * 1024);
  o.max_bytes = static_cast<size_t>(f.max_mb * 1024 * 1024);
  o.iters = f.iters;
  o.warmup = f.warmup;
  TERN_ASSIGN_OR_RETURN(dist::AllReduceBenchResult r, dist::RunAllReduceBench(*comm, device.get(), o));
  r.cpu = ReadCpuInfo();
  r.threads = omp_get_max_threads();
  r.backend = device ? device->name() : "cpu";
  r.gpu_name = device ? GpuNameFromBackendName(r.backend) : "";
  r.gpu = plan::CatalogGpuId(r.gpu_name);
  return r;
}

}  // namespace

int RunDistBench(const DistBenchFlags& f) {
  Result<dist::LaunchInfo> launch = dist::DetectLaunch();
  if (!launch.ok()) {
    std::fprintf(stderr, "tern bench --dist: %s\n", launch.status().message().c_str());
    return 2;
  }
  Result<dist::AllReduceBenchResult> r = Measure(f, *launch);
  if (!r.ok()) {
    std::fprintf(stderr, "tern bench --dist: rank %d: %s\n", launch->rank, r.status().message().c_str());
    return 1;
  }
  if (launch->rank != 0) return 0;
  if (!r->gpu_name.empty() && r->gpu.empty()) {
    std::fprintf(
        stderr,
        "tern bench --dist: the GPU '%s' matches no catalog GPU; set \"gpu\" in the JSON to its catalog "
        "name (data/catalog/gpus.csv) to calibrate `tern plan` for it\n",
        r->gpu_name.c_str());
  }
  if (f.json) {
    std::printf("%s\n", r->ToJson().dump(2).c_str());
  } else {
    std::fputs(r->ToText().c_str(), stdout);
  }
  return 0;
}

}  // namespace tern::cli
