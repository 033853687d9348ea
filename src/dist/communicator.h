// The data-parallel Communicator: every rank of a job runs the same program and calls the same collectives in
// the same order. One interface, three implementations (README.md): a single process (world 1), MPI (host
// buffers) and NCCL (device buffers on a CUDA stream). The trainer sees only this header and setup.h.
//
// Rules:
//  * Buffers are host memory for "single" and "mpi", device memory (from the CUDA backend) for "nccl":
//    device_memory() says which. Counts are in elements.
//  * Every collective has an asynchronous form (…Async) that starts it and returns a CommHandle; the
//    buffers must stay alive and untouched until its Wait() returns. The blocking forms are Async + Wait.
//  * Wait() blocks at most timeout() (counted from the call to Wait, not from the start, so a long
//    computation between start and Wait is not a failure). A collective that does not finish in time
//    fails with Unavailable naming the ranks that did not arrive (where the implementation can know:
//    mpi always, nccl when bootstrapped over MPI) and leaves the communicator broken: every later call
//    fails at once with the same message. The caller exits non-zero; a supervisor relaunches the job.
//  * Uneven shards (reduce-scatter, all-gather): n elements split over W ranks in rank order, the first
//    n % W ranks hold one element more (ShardOf). Rank r's shard is [offset, offset + count).
//  * Mean = the sum divided by the world size (in fp32, after the sum).
//  * One thread at a time per communicator; a handle may be waited on from another thread than the one
//    that started it. A handle must not outlive its communicator.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace tern::dist {

enum class ReduceOp : uint8_t { kSum, kMean };
enum class IntOp : uint8_t { kSum, kMax };
const char* ReduceOpName(ReduceOp op);
const char* IntOpName(IntOp op);

// For messages and for the arrival tracking of the MPI implementation (which tells other ranks what it
// started).
enum class CollectiveKind : uint8_t {
  kAllReduce = 1,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kBarrier,
  kAllReduceInt
};
// "all-reduce of 1001 floats", "broadcast of 4 bytes", "barrier".
std::string DescribeCollective(CollectiveKind kind, size_t count);

// Rank `rank`'s part of n elements split over `world` ranks: the first n % world ranks get n / world + 1
// elements, the others n / world; shards are contiguous and in rank order.
struct Shard {
  size_t offset = 0;
  size_t count = 0;
};
Shard ShardOf(size_t n, int world, int rank);
// How elements [offset, offset + n) of a buffer of `total` elements sharded over `world` ranks (ShardOf) fall
// into the ranks' shards: `world` counts in rank order that sum to n (the pieces are contiguous, so rank r's
// starts after ranks 0..r-1's). For ReduceScatterInPlaceAsync of one gradient bucket under ZeRO-1.
std::vector<size_t> ShardCounts(size_t total, int world, size_t offset, size_t n);

// A collective in flight. Move-only. An empty (default) handle is a finished, successful one.
class CommHandle {
 public:
  // What an implementation provides for one started collective.
  class Impl {
   public:
    virtual ~Impl() = default;
    // Non-blocking: advances the collective (MPI progresses only inside MPI calls) and returns true once
    // it has finished, successfully or not.
    virtual bool Test() = 0;
    // Blocks until it finishes or `timeout` passes; the result (applies post-processing such as the mean's
    // division once). Called at most once.
    virtual Status Wait(std::chrono::milliseconds timeout) = 0;
  };

  CommHandle() = default;
  CommHandle(std::unique_ptr<Impl> impl, std::chrono::milliseconds timeout)
      : impl_(std::move(impl)), timeout_(timeout) {}
  // A collective that could not start: Wait() returns `status`.
  static CommHandle Failed(Status status);
  CommHandle(CommHandle&&) noexcept;
  CommHandle& operator=(CommHandle&&) noexcept;
  CommHandle(const CommHandle&) = delete;
  CommHandle& operator=(const CommHandle&) = delete;
  // A handle destroyed without Wait() waits (so no buffer is freed under a running collective) and the
  // status is lost: call Wait().
  ~CommHandle();

  // The collective's result; later calls return the same Status without waiting.
  [[nodiscard]] Status Wait();
  // True once finished (then Wait() returns without blocking). Never blocks; call it between pieces of
  // computation to let an MPI collective progress.
  bool Done();

 private:
  std::unique_ptr<Impl> impl_;
  std::chrono::milliseconds timeout_{0};
  bool waited_ = false;
  Status status_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual std::string name() const = 0;  // "single", "mpi", "nccl"
  virtual bool device_memory() const { return false; }
  int rank() const { return rank_; }
  int world() const { return world_; }
  int local_rank() const { return local_rank_; }  // rank among the ranks on this machine
  int local_world() const { return local_world_; }

  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

  // ---- asynchronous collectives ------------------------------------------------------------------
  // recv[n] = op over ranks of send[n]; send == recv (in place) is allowed.
  [[nodiscard]] virtual CommHandle AllReduceAsync(const float* send, float* recv, size_t n, ReduceOp op) = 0;
  // recv[ShardOf(n).count] = op over ranks of send[shard.offset ...]; send holds all n; no overlap.
  [[nodiscard]] virtual CommHandle ReduceScatterAsync(const float* send, float* recv, size_t n,
                                                      ReduceOp op) = 0;
  // In place, in pieces of given sizes: `counts` has world() entries (the same on every rank; any may be 0)
  // and data holds their sum, rank r's piece starting after the pieces of ranks 0 .. r-1. Afterwards this
  // rank's piece holds op over ranks of that piece; the rest of data is undefined (scratch). ZeRO-1's
  // gradient buckets: counts = ShardCounts(...), so each rank receives the sums of its optimizer shard only.
  [[nodiscard]] virtual CommHandle ReduceScatterInPlaceAsync(float* data, std::span<const size_t> counts,
                                                             ReduceOp op) = 0;
  // recv[n] = every rank's shard in rank order; send holds this rank's ShardOf(n).count elements.
  // In place when send == recv + ShardOf(n).offset.
  [[nodiscard]] virtual CommHandle AllGatherAsync(const float* send, float* recv, size_t n) = 0;
  // data[bytes] on every rank = root's.
  [[nodiscard]] virtual CommHandle BroadcastAsync(void* data, size_t bytes, int root) = 0;
  [[nodiscard]] virtual CommHandle BarrierAsync() = 0;
  // values[n] = op over ranks (host memory for every implementation).
  [[nodiscard]] virtual CommHandle AllReduceIntAsync(int64_t* values, size_t n, IntOp op) = 0;

  // ---- blocking forms --------------------------------------------------------------------------
  [[nodiscard]] Status AllReduce(float* data, size_t n, ReduceOp op) {
    return AllReduceAsync(data, data, n, op).Wait();
  }
  [[nodiscard]] Status ReduceScatter(const float* send, float* recv, size_t n, ReduceOp op) {
    return ReduceScatterAsync(send, recv, n, op).Wait();
  }
  [[nodiscard]] Status AllGather(const float* send, float* recv, size_t n) {
    return AllGatherAsync(send, recv, n).Wait();
  }
  [[nodiscard]] Status Broadcast(void* data, size_t bytes, int root) {
    return BroadcastAsync(data, bytes, root).Wait();
  }
  [[nodiscard]] Status Broadcast(float* data, size_t n, int root) {
    return BroadcastAsync(data, n * sizeof(float), root).Wait();
  }
  [[nodiscard]] Status Barrier() { return BarrierAsync().Wait(); }
  [[nodiscard]] Status AllReduceInt(int64_t* values, size_t n, IntOp op) {
    return AllReduceIntAsync(values, n, op).Wait();
  }
  // One value, e.g. "did any rank get a preemption notice": AllReduceInt(notified ? 1 : 0, IntOp::kMax).
  [[nodiscard]] Result<int64_t> AllReduceInt(int64_t value, IntOp op);
  // The sum over ranks of one host double per rank (a loss, a squared norm), added in rank order so that
  // every rank gets the same bits. It gathers the values through AllReduceInt, which takes host memory on
  // every implementation (AllReduce's buffers are device memory under NCCL).
  [[nodiscard]] Result<double> SumInRankOrder(double value);

 protected:
  Communicator(int rank, int world, int local_rank, int local_world, std::chrono::milliseconds timeout)
      : rank_(rank), world_(world), local_rank_(local_rank), local_world_(local_world), timeout_(timeout) {}

  // InvalidArgument naming the root when it is outside [0, world).
  Status CheckRoot(int root) const;

 private:
  int rank_, world_, local_rank_, local_world_;
  std::chrono::milliseconds timeout_;
};

// The default collective timeout (dist.timeout_s in the trainer's config, when it exists).
inline constexpr std::chrono::milliseconds kDefaultTimeout{std::chrono::minutes(5)};

// "rank 1", "ranks 1, 3-5": for messages.
std::string DescribeRanks(const std::vector<int>& ranks);

}  // namespace tern::dist
