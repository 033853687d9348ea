// The Communicator over NCCL (the CUDA toolkit's): device buffers, one rank per GPU. Built only with the
// CUDA backend (TERN_HAVE_NCCL); this header does not include CUDA's or NCCL's.
//
// Streams: the collectives run on a stream of their own, each after the work already queued on the
// compute stream (an event), so computation queued after the start overlaps them. Wait() (or Done())
// tells the host the collective finished; work queued on the compute stream after a successful Wait()
// sees its result.
//
// Bootstrap: rank 0 makes the NCCL unique id and hands it to the others, by a broadcast over `bootstrap`
// (an MPI communicator; it also names missing ranks on a timeout) or, without MPI (Slurm without PMIx),
// through `id_file` on a filesystem every rank sees (bootstrap_file.h), tagged with the launch's job id.
// A world of one needs neither.
//
// Differences from mpi: the mean is NCCL's ncclAvg (it may differ from the sum divided by the world in the
// last bit); uneven reduce-scatter / all-gather run as a group of per-rank ncclReduce / ncclBroadcast (even
// ones as ncclReduceScatter / ncclAllGather); the integer all-reduce stages through pinned memory, one at
// a time; a timeout aborts the NCCL communicator (ncclCommAbort).
#pragma once

#include <memory>
#include <string>

#include "dist/communicator.h"

namespace tern::dist {

struct NcclOptions {
  std::chrono::milliseconds timeout = kDefaultTimeout;
  void* compute_stream =
      nullptr;  // cudaStream_t of the compute (CudaBackend::stream()); null = the default stream
  // This rank's GPU (cudaSetDevice); -1: the calling thread's current device, which the CUDA backend set
  // when it was made (so the collectives run on the compute's GPU whatever TERN_CUDA_DEVICE chose).
  int device = -1;
  // Either an MPI communicator (taken over: it stays for the timeouts' messages) ...
  std::unique_ptr<Communicator> bootstrap;
  // ... or a shared file and who this rank is (neither for a world of one).
  std::string id_file;
  std::string id_tag;  // LaunchInfo::job_id
  int rank = 0, world = 1, local_rank = 0, local_world = 1;
};

class NcclCommunicator : public Communicator {
 public:
  // Every rank calls it; waits at most options.timeout for the id and for the others to join.
  [[nodiscard]] static Result<std::unique_ptr<NcclCommunicator>> Create(NcclOptions options);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  std::string name() const override { return "nccl"; }
  bool device_memory() const override { return true; }

  CommHandle AllReduceAsync(const float* send, float* recv, size_t n, ReduceOp op) override;
  CommHandle ReduceScatterAsync(const float* send, float* recv, size_t n, ReduceOp op) override;
  CommHandle ReduceScatterInPlaceAsync(float* data, std::span<const size_t> counts, ReduceOp op) override;
  CommHandle AllGatherAsync(const float* send, float* recv, size_t n) override;
  CommHandle BroadcastAsync(void* data, size_t bytes, int root) override;
  CommHandle BarrierAsync() override;
  CommHandle AllReduceIntAsync(int64_t* values, size_t n, IntOp op) override;  // host values

  struct State;  // nccl_communicator.cpp

 private:
  NcclCommunicator(std::shared_ptr<State> state, int rank, int world, int local_rank, int local_world,
                   std::chrono::milliseconds timeout);
  std::shared_ptr<State> state_;
};

}  // namespace tern::dist
