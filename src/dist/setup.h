// Choosing and starting the communicator for this launch (dist.backend: auto|none|mpi|nccl).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "backend/backend.h"
#include "core/status.h"
#include "dist/communicator.h"
#include "dist/launch.h"

namespace tern::dist {

enum class CommBackend : uint8_t { kAuto, kNone, kMpi, kNccl };
const char* CommBackendName(CommBackend b);
// "auto", "none", "mpi", "nccl"; InvalidArgument listing them otherwise.
[[nodiscard]] Result<CommBackend> ParseCommBackend(std::string_view name);

// What this build has: MPI (CMake found it) and NCCL (built with the CUDA backend and the toolkit's NCCL).
bool BuiltWithMpi();
bool BuiltWithNccl();

struct CommSetup {
  CommBackend backend = CommBackend::kAuto;
  std::chrono::milliseconds timeout = kDefaultTimeout;
  // Where the buffers live: null, or a backend with host_addressable_memory (the CPU) = host memory (mpi);
  // otherwise device memory (the CUDA backend: nccl).
  Backend* compute = nullptr;
  // nccl: the compute's CUDA stream (null: compute->native_stream()), this rank's GPU (-1: the device the
  // CUDA backend made current, which the trainer sets to the local rank unless TERN_CUDA_DEVICE says
  // otherwise), and the file that hands rank 0's NCCL id to the others when not launched by MPI (empty:
  // broadcast it over MPI; a world of one needs neither).
  void* cuda_stream = nullptr;
  int cuda_device = -1;
  std::string nccl_id_file;
  bool track_arrivals = true;  // mpi: name the missing rank on a timeout (MpiOptions)
};

// auto: one process -> single; several on a GPU backend -> nccl; several on the CPU -> mpi.
// none: single, and an error when the launch has several ranks (each would train alone).
// Errors name the fix: a build without MPI or NCCL, mpi on GPU buffers, an MPI world that does not match
// the launcher's (srun without PMIx), nccl without a way to share its id.
[[nodiscard]] Result<std::unique_ptr<Communicator>> MakeCommunicator(const CommSetup& setup,
                                                                     const LaunchInfo& launch);

}  // namespace tern::dist
