#include "dist/setup.h"

#include <fmt/format.h>

#include "dist/single_communicator.h"
#ifdef TERN_HAVE_MPI
#include "dist/mpi_communicator.h"
#endif
#ifdef TERN_HAVE_NCCL
#include "dist/nccl_communicator.h"
#endif

namespace tern::dist {

const char* CommBackendName(CommBackend b) {
  switch (b) {
    case CommBackend::kAuto:
      return "auto";
    case CommBackend::kNone:
      return "none";
    case CommBackend::kMpi:
      return "mpi";
    case CommBackend::kNccl:
      return "nccl";
  }
  return "?";
}

Result<CommBackend> ParseCommBackend(std::string_view name) {
  for (CommBackend b : {CommBackend::kAuto, CommBackend::kNone, CommBackend::kMpi, CommBackend::kNccl})
    if (name == CommBackendName(b)) return b;
  return Status::InvalidArgument(fmt::format("dist.backend '{}': expected auto, none, mpi or nccl", name));
}

bool BuiltWithMpi() {
#ifdef TERN_HAVE_MPI
  return true;
#else
  return false;
#endif
}

bool BuiltWithNccl() {
#ifdef TERN_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

namespace {

constexpr const char* kNoMpi =
    "tern was built without MPI: install Open MPI (scripts/install-deps installs libopenmpi-dev and "
    "openmpi-bin) "
    "and rebuild";
constexpr const char* kNoNccl =
    "tern was built without NCCL: build with the CUDA toolkit (its nccl.h and libnccl.so) so that the CUDA "
    "backend and NCCL are compiled";

// The buffers are device memory (a GPU backend): mpi cannot take them, nccl can.
bool DeviceBuffers(const CommSetup& s) {
  return s.compute && !s.compute->capabilities().host_addressable_memory;
}

std::unique_ptr<Communicator> Single(const CommSetup& s) {
  Backend* b = s.compute;
  if (DeviceBuffers(s))
    return std::make_unique<SingleProcessCommunicator>(
        [b](void* dst, const void* src, size_t bytes) { b->Copy(dst, src, bytes); }, /*device_memory=*/true);
  return std::make_unique<SingleProcessCommunicator>();
}

Result<std::unique_ptr<Communicator>> Mpi(const CommSetup& s, const LaunchInfo& l) {
#ifdef TERN_HAVE_MPI
  // Checked before MPI_Init, which would abort the process (Open MPI under srun without PMIx).
  if (!l.mpi_wired)
    return Status::InvalidArgument(fmt::format(
        "{}, but without PMIx (srun --mpi={}): MPI cannot find the other ranks there (Open MPI's "
        "MPI_Init aborts). Run srun --mpi=pmix (or set MpiDefault=pmix in slurm.conf, as scripts/slurm-local "
        "does), or launch with mpirun; on GPUs dist.backend: nccl with dist.nccl_id_file needs no MPI",
        l.Describe(), l.slurm_mpi.empty() ? "none" : l.slurm_mpi));
  MpiOptions o;
  o.timeout = s.timeout;
  o.track_arrivals = s.track_arrivals;
  TERN_ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> mpi, MpiCommunicator::Create(o));
  if (l.world != 0 && mpi->world() != l.world)
    return Status::InvalidArgument(
        fmt::format("{}, but MPI sees a world of {}: Open MPI did not get the launch from the launcher (srun "
                    "without PMIx). "
                    "Run srun --mpi=pmix, or launch with mpirun; on GPUs dist.backend: nccl with "
                    "dist.nccl_id_file needs no "
                    "MPI",
                    l.Describe(), mpi->world()));
  return std::unique_ptr<Communicator>(std::move(mpi));
#else
  return Status::InvalidArgument(fmt::format("{}, but {}; or launch one process", l.Describe(), kNoMpi));
#endif
}

Result<std::unique_ptr<Communicator>> Nccl(const CommSetup& s, const LaunchInfo& l) {
#ifdef TERN_HAVE_NCCL
  NcclOptions o;
  o.timeout = s.timeout;
  // The compute's stream and GPU: the collectives must queue after the kernels that wrote their buffers, on
  // the same device (cuda_device -1: the device the CUDA backend made current, NcclOptions::device).
  o.compute_stream = s.cuda_stream ? s.cuda_stream : s.compute ? s.compute->native_stream() : nullptr;
  o.device = s.cuda_device;
  if (l.world == 1 && s.nccl_id_file.empty()) {
    // One process (gpu-check's one-GPU world, dist.backend: nccl without a launcher): nothing to exchange,
    // so no MPI either.
  } else if (!s.nccl_id_file.empty()) {
    if (l.world == 0)
      return Status::InvalidArgument(
          fmt::format("{} that exports no world size; dist.nccl_id_file needs one (Slurm or Open MPI "
                      "variables): launch with "
                      "srun or mpirun, or leave dist.nccl_id_file empty to share the NCCL id over MPI",
                      l.Describe()));
    o.id_file = s.nccl_id_file;
    o.id_tag = l.job_id;
    o.rank = l.rank;
    o.world = l.world;
    o.local_rank = l.local_rank;
    o.local_world = l.local_world;
  } else {
    if (!BuiltWithMpi())
      return Status::InvalidArgument(
          fmt::format("{}: nccl needs its id shared by MPI or through a file, and {}; or set "
                      "dist.nccl_id_file to a path on "
                      "a filesystem every rank sees",
                      l.Describe(), kNoMpi));
    TERN_ASSIGN_OR_RETURN(o.bootstrap, Mpi(s, l));
  }
  TERN_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> nccl, NcclCommunicator::Create(std::move(o)));
  return std::unique_ptr<Communicator>(std::move(nccl));
#else
  return Status::InvalidArgument(fmt::format("{} on a GPU, but {}", l.Describe(), kNoNccl));
#endif
}

}  // namespace

Result<std::unique_ptr<Communicator>> MakeCommunicator(const CommSetup& s, const LaunchInfo& l) {
  const bool gpu = DeviceBuffers(s);
  const bool several = l.world != 1;  // 0: a PMIx launch of unknown size
  switch (s.backend) {
    case CommBackend::kNone:
      if (several)
        return Status::InvalidArgument(fmt::format(
            "dist.backend is none, but tern was {}: every rank would train alone on the whole batch. Use "
            "dist.backend: auto (or mpi / nccl), or start one process",
            l.Describe()));
      return Single(s);
    case CommBackend::kAuto:
      if (!several) return Single(s);
      return gpu ? Nccl(s, l) : Mpi(s, l);
    case CommBackend::kMpi:
      if (gpu)
        return Status::InvalidArgument(
            "dist.backend is mpi, which moves host buffers, but the compute backend is a GPU: use "
            "dist.backend: "
            "nccl (or auto), or train on the CPU");
      return Mpi(s, l);
    case CommBackend::kNccl:
      if (!gpu)
        return Status::InvalidArgument(
            "dist.backend is nccl, which needs the CUDA backend (train.device: cuda): use dist.backend: mpi "
            "(or "
            "auto) on the CPU");
      return Nccl(s, l);
  }
  return Status::Internal("unknown dist.backend");
}

}  // namespace tern::dist
