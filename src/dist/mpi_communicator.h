// The Communicator over MPI (Debian's Open MPI): host buffers, every collective non-blocking (MPI_Iallreduce,
// MPI_Ireduce_scatter, MPI_Iallgatherv, MPI_Ibcast, MPI_Ibarrier) and waited on by polling MPI_Test against
// a deadline. Built only when CMake finds MPI (TERN_HAVE_MPI); this header does not include mpi.h.
//
// Progress: Open MPI advances a non-blocking collective only inside MPI calls. Between starting one and
// waiting for it, call CommHandle::Done() (or any collective's Done()) now and then, e.g. after each layer's
// backward, or most of the transfer happens inside Wait().
//
// Naming the missing rank: with track_arrivals (the default) each collective, as it starts, sends the other
// ranks a 24-byte note on a duplicate communicator (its number, kind and size: world - 1 messages per
// collective). When a Wait times out the ranks whose note for that collective never came are named, with
// the last collective each of them did start.
//
// After a timeout the collective is abandoned, not cancelled (MPI cannot cancel a collective): its buffers
// stay registered with MPI, so free nothing and exit. At exit MPI is finalised only when every abandoned
// collective has finished by then (a late rank came after all); otherwise the process leaves without
// MPI_Finalize, which would wait forever for the missing rank, and mpirun / srun end the other ranks.
#pragma once

#include <memory>

#include "dist/communicator.h"

namespace tern::dist {

struct MpiOptions {
  std::chrono::milliseconds timeout = kDefaultTimeout;
  bool track_arrivals = true;
  // All-reduce and broadcast are split into pieces of at most this many elements (MPI counts are ints);
  // reduce-scatter and all-gather take at most INT_MAX elements. Tests make it small.
  size_t max_chunk_elements = size_t{1} << 28;
};

class MpiCommunicator : public Communicator {
 public:
  // Initialises MPI (MPI_THREAD_SERIALIZED) unless something else has, and duplicates MPI_COMM_WORLD.
  // Every rank calls it; it waits at most options.timeout for the others.
  [[nodiscard]] static Result<std::unique_ptr<MpiCommunicator>> Create(const MpiOptions& options = {});
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  std::string name() const override { return "mpi"; }

  CommHandle AllReduceAsync(const float* send, float* recv, size_t n, ReduceOp op) override;
  CommHandle ReduceScatterAsync(const float* send, float* recv, size_t n, ReduceOp op) override;
  CommHandle ReduceScatterInPlaceAsync(float* data, std::span<const size_t> counts, ReduceOp op) override;
  CommHandle AllGatherAsync(const float* send, float* recv, size_t n) override;
  CommHandle BroadcastAsync(void* data, size_t bytes, int root) override;
  CommHandle BarrierAsync() override;
  CommHandle AllReduceIntAsync(int64_t* values, size_t n, IntOp op) override;

  // For a transport that runs its collectives elsewhere (NCCL) but names missing ranks through MPI:
  // Announce numbers a collective and tells the other ranks it started (what they see in their
  // DescribeTimeout); DescribeTimeout is the Unavailable status for collective `seq` not finished within
  // `timeout`, naming the ranks that never announced it.
  uint64_t Announce(CollectiveKind kind, size_t count);
  Status DescribeTimeout(const std::string& transport, uint64_t seq, CollectiveKind kind, size_t count,
                         std::chrono::milliseconds timeout);

  struct State;  // MPI handles, the arrival notes, the broken status (mpi_communicator.cpp)

 private:
  MpiCommunicator(std::shared_ptr<State> state, int rank, int world, int local_rank, int local_world,
                  std::chrono::milliseconds timeout);
  std::shared_ptr<State> state_;
};

}  // namespace tern::dist
