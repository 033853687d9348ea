#include "dist/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "dist/bootstrap_file.h"
#include "dist/poll.h"
#ifdef TERN_HAVE_MPI
#include "dist/mpi_communicator.h"
#endif

namespace tern::dist {
namespace {

Status CudaError(cudaError_t e, const std::string& what) {
  return Status::Internal(fmt::format("{}: {}", what, cudaGetErrorString(e)));
}
Status NcclError(ncclResult_t r, const std::string& what) {
  return Status::Internal(fmt::format("{}: {} ({})", what, ncclGetErrorString(r), ncclGetLastError(nullptr)));
}

// A non-blocking NCCL communicator may answer ncclInProgress: poll its async error until it settles.
ncclResult_t Settle(ncclComm_t comm, ncclResult_t r, PollClock& clock) {
  while (r == ncclInProgress && !clock.Expired()) {
    clock.Backoff();
    if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) return ncclInternalError;
  }
  return r;
}

}  // namespace

struct NcclCommunicator::State {
  std::mutex mu;
  ncclComm_t comm = nullptr;
  int device = 0;
  cudaStream_t compute = nullptr;  // not owned
  cudaStream_t stream = nullptr;   // the collectives'
  cudaEvent_t ready = nullptr;     // recorded on compute before each collective; the stream waits for it
  std::unique_ptr<Communicator> bootstrap;
#ifdef TERN_HAVE_MPI
  MpiCommunicator* tracker = nullptr;  // bootstrap, when it is MPI
#endif
  uint64_t seq = 0;
  Status broken;
  int rank = 0, world = 1;
  // The integer all-reduce's staging: pinned host and device memory, one at a time.
  int64_t* host_ints = nullptr;
  int64_t* device_ints = nullptr;
  size_t ints_capacity = 0;
  bool ints_busy = false;

  uint64_t Announce(CollectiveKind kind, size_t count) {
#ifdef TERN_HAVE_MPI
    if (tracker) return seq = tracker->Announce(kind, count);
#endif
    return ++seq;
  }

  Status Timeout(uint64_t at, CollectiveKind kind, size_t count, std::chrono::milliseconds timeout) {
#ifdef TERN_HAVE_MPI
    if (tracker) return tracker->DescribeTimeout("nccl", at, kind, count, timeout);
#endif
    return Status::Unavailable(fmt::format(
        "rank {}: nccl collective #{} ({}) did not finish within {:g} s; bootstrapped without MPI, tern "
        "cannot "
        "tell which rank is missing. Every rank must call the same collectives in the same order; a rank "
        "that "
        "crashed, hangs or skipped one stops the others. This communicator is aborted: exit non-zero and "
        "relaunch (resume from the last checkpoint)",
        rank, at, DescribeCollective(kind, count), timeout.count() / 1000.0));
  }

  void Break(const Status& s) {  // with mu held
    if (broken.ok()) broken = s;
    if (comm) ncclCommAbort(comm);
    comm = nullptr;
  }
};

namespace {

using State = NcclCommunicator::State;

class NcclWork : public CommHandle::Impl {
 public:
  NcclWork(std::shared_ptr<State> state, uint64_t seq, CollectiveKind kind, size_t count, cudaEvent_t done,
           std::function<void()> finish)
      : state_(std::move(state)),
        seq_(seq),
        kind_(kind),
        count_(count),
        done_event_(done),
        finish_(std::move(finish)) {}
  ~NcclWork() override { cudaEventDestroy(done_event_); }

  bool Test() override {
    std::lock_guard lock(state_->mu);
    return TestLocked();
  }

  Status Wait(std::chrono::milliseconds timeout) override {
    PollClock clock(timeout);
    while (!Test()) {
      if (clock.Expired()) {
        std::lock_guard lock(state_->mu);
        if (TestLocked()) break;
        status_ = state_->Timeout(seq_, kind_, count_, timeout);
        state_->Break(status_);
        done_ = true;
        break;
      }
      clock.Backoff();
    }
    return status_;
  }

 private:
  bool TestLocked() {
    if (done_) return true;
    const cudaError_t e = cudaEventQuery(done_event_);
    if (e == cudaSuccess) {
      if (finish_) finish_();
      done_ = true;
    } else if (e != cudaErrorNotReady) {
      status_ = CudaError(e, what());
    } else if (state_->comm) {
      ncclResult_t async = ncclSuccess;
      if (ncclCommGetAsyncError(state_->comm, &async) == ncclSuccess && async != ncclSuccess &&
          async != ncclInProgress)
        status_ = NcclError(async, what());
    } else {
      status_ =
          Status::Unavailable(what() + ": the nccl communicator was aborted: " + state_->broken.message());
    }
    if (!status_.ok()) {
      state_->Break(status_);
      done_ = true;
    }
    return done_;
  }
  std::string what() const {
    return fmt::format("rank {}: nccl collective #{} ({})", state_->rank, seq_,
                       DescribeCollective(kind_, count_));
  }

  std::shared_ptr<State> state_;
  uint64_t seq_;
  CollectiveKind kind_;
  size_t count_;
  cudaEvent_t done_event_;
  std::function<void()> finish_;
  bool done_ = false;
  Status status_;
};

// Numbers the collective, queues it on the collectives' stream after the compute stream's work, then
// `after` (more work on that stream, e.g. a copy of the result back to the host), records its completion.
// `after` is queued only once NCCL has settled the enqueue: a non-blocking communicator that answered
// ncclInProgress must not see more work on its stream before then (NCCL's non-blocking rules).
CommHandle Start(const std::shared_ptr<State>& state, std::chrono::milliseconds timeout, CollectiveKind kind,
                 size_t count, const std::function<ncclResult_t(ncclComm_t, cudaStream_t)>& enqueue,
                 std::function<void()> finish = nullptr,
                 const std::function<cudaError_t(cudaStream_t)>& after = nullptr) {
  std::lock_guard lock(state->mu);
  if (!state->broken.ok())
    return CommHandle::Failed(Status::Unavailable("this nccl communicator failed earlier and is unusable: " +
                                                  state->broken.message()));
  const uint64_t seq = state->Announce(kind, count);
  const std::string what =
      fmt::format("rank {}: nccl collective #{} ({})", state->rank, seq, DescribeCollective(kind, count));
  const auto fail = [&](Status s) {
    state->Break(s);
    return CommHandle::Failed(std::move(s));
  };
  if (cudaError_t e = cudaSetDevice(state->device); e != cudaSuccess) return fail(CudaError(e, what));
  if (cudaError_t e = cudaEventRecord(state->ready, state->compute); e != cudaSuccess)
    return fail(CudaError(e, what));
  if (cudaError_t e = cudaStreamWaitEvent(state->stream, state->ready, 0); e != cudaSuccess)
    return fail(CudaError(e, what));
  PollClock clock(timeout);
  const ncclResult_t r = Settle(state->comm, enqueue(state->comm, state->stream), clock);
  if (r != ncclSuccess) {
    if (r == ncclInProgress) return fail(state->Timeout(seq, kind, count, timeout));
    return fail(NcclError(r, what));
  }
  if (after)
    if (cudaError_t e = after(state->stream); e != cudaSuccess) return fail(CudaError(e, what));
  cudaEvent_t done = nullptr;
  if (cudaError_t e = cudaEventCreateWithFlags(&done, cudaEventDisableTiming); e != cudaSuccess)
    return fail(CudaError(e, what));
  if (cudaError_t e = cudaEventRecord(done, state->stream); e != cudaSuccess) {
    cudaEventDestroy(done);
    return fail(CudaError(e, what));
  }
  return CommHandle(std::make_unique<NcclWork>(state, seq, kind, count, done, std::move(finish)), timeout);
}

bool Even(size_t n, int world) {
  return n % static_cast<size_t>(world) == 0;
}

}  // namespace

NcclCommunicator::NcclCommunicator(std::shared_ptr<State> state, int rank, int world, int local_rank,
                                   int local_world, std::chrono::milliseconds timeout)
    : Communicator(rank, world, local_rank, local_world, timeout), state_(std::move(state)) {}

Result<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(NcclOptions o) {
  auto state = std::make_shared<State>();
  int rank = o.rank, world = o.world, local_rank = o.local_rank, local_world = o.local_world;
  if (o.bootstrap) {
    rank = o.bootstrap->rank();
    world = o.bootstrap->world();
    local_rank = o.bootstrap->local_rank();
    local_world = o.bootstrap->local_world();
  } else if (o.id_file.empty() && world > 1) {
    return Status::InvalidArgument(
        "nccl needs a way to hand rank 0's NCCL id to the other ranks: an MPI launch (mpirun, srun "
        "--mpi=pmix) or "
        "dist.nccl_id_file on a filesystem every rank sees");
  }
  if (o.device < 0) {  // the calling thread's device: the CUDA backend's, which sets it when it is made
    if (cudaError_t e = cudaGetDevice(&o.device); e != cudaSuccess)
      return CudaError(e, fmt::format("rank {}: cudaGetDevice", rank));
  }
  state->rank = rank;
  state->world = world;
  state->device = o.device;
  state->compute = static_cast<cudaStream_t>(o.compute_stream);
  const std::string who = fmt::format("rank {} (GPU {})", rank, o.device);
  if (cudaError_t e = cudaSetDevice(o.device); e != cudaSuccess)
    return CudaError(e, fmt::format("{}: cudaSetDevice", who));

  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (rank == 0)
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
      return NcclError(r, who + ": ncclGetUniqueId");
  if (o.bootstrap) {
    TERN_RETURN_IF_ERROR(
        o.bootstrap->Broadcast(&id, sizeof id, 0).WithContext(who + ": broadcasting the NCCL id"));
  } else if (world == 1) {
    // A world of one: rank 0 made the id and is the only one to read it.
  } else if (rank == 0) {
    TERN_RETURN_IF_ERROR(PublishBootstrapFile(o.id_file, o.id_tag, std::string_view(id.internal, sizeof id)));
  } else {
    TERN_ASSIGN_OR_RETURN(std::string secret, ReadBootstrapFile(o.id_file, o.id_tag, sizeof id, o.timeout));
    std::memcpy(&id, secret.data(), sizeof id);
  }

  if (cudaError_t e = cudaStreamCreateWithFlags(&state->stream, cudaStreamNonBlocking); e != cudaSuccess)
    return CudaError(e, who + ": cudaStreamCreate");
  if (cudaError_t e = cudaEventCreateWithFlags(&state->ready, cudaEventDisableTiming); e != cudaSuccess)
    return CudaError(e, who + ": cudaEventCreate");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that a rank that never joins is a timeout, not a hang
  PollClock clock(o.timeout);
  ncclResult_t r = ncclCommInitRankConfig(&state->comm, world, id, rank, &config);
  if (state->comm) r = Settle(state->comm, r, clock);
  if (r != ncclSuccess) {
    if (state->comm) ncclCommAbort(state->comm);
    state->comm = nullptr;
    if (r == ncclInProgress)
      return Status::Unavailable(
          fmt::format("{}: not every rank of {} joined the NCCL communicator within {:g} s", who, world,
                      o.timeout.count() / 1000.0));
    return NcclError(r, who + ": ncclCommInitRankConfig");
  }
  // Every rank has read the id once the communicator exists.
  if (!o.bootstrap && rank == 0 && !o.id_file.empty()) std::filesystem::remove(o.id_file);
  state->bootstrap = std::move(o.bootstrap);
#ifdef TERN_HAVE_MPI
  state->tracker = dynamic_cast<MpiCommunicator*>(state->bootstrap.get());
#endif
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(std::move(state), rank, world, local_rank, local_world, o.timeout));
}

NcclCommunicator::~NcclCommunicator() {
  std::lock_guard lock(state_->mu);
  cudaSetDevice(state_->device);
  if (state_->comm) {
    cudaStreamSynchronize(state_->stream);
    ncclCommDestroy(state_->comm);
  }
  if (state_->ready) cudaEventDestroy(state_->ready);
  if (state_->stream) cudaStreamDestroy(state_->stream);
  if (state_->host_ints) cudaFreeHost(state_->host_ints);
  if (state_->device_ints) cudaFree(state_->device_ints);
}

CommHandle NcclCommunicator::AllReduceAsync(const float* send, float* recv, size_t n, ReduceOp op) {
  const ncclRedOp_t nop = op == ReduceOp::kMean ? ncclAvg : ncclSum;
  return Start(state_, timeout(), CollectiveKind::kAllReduce, n, [&](ncclComm_t comm, cudaStream_t s) {
    return ncclAllReduce(send, recv, n, ncclFloat, nop, comm, s);
  });
}

CommHandle NcclCommunicator::ReduceScatterAsync(const float* send, float* recv, size_t n, ReduceOp op) {
  const ncclRedOp_t nop = op == ReduceOp::kMean ? ncclAvg : ncclSum;
  const int w = world();
  return Start(state_, timeout(), CollectiveKind::kReduceScatter, n, [&](ncclComm_t comm, cudaStream_t s) {
    if (Even(n, w)) return ncclReduceScatter(send, recv, n / static_cast<size_t>(w), ncclFloat, nop, comm, s);
    ncclResult_t r = ncclGroupStart();
    for (int root = 0; root < w && r == ncclSuccess; root++) {
      const Shard sh = ShardOf(n, w, root);
      r = ncclReduce(send + sh.offset, recv, sh.count, ncclFloat, nop, root, comm, s);
    }
    const ncclResult_t end = ncclGroupEnd();
    return r != ncclSuccess ? r : end;
  });
}

// Equal pieces: ncclReduceScatter in place (NCCL's in place is recv == send + rank * count, this very
// layout); uneven ones: a group of per-owner ncclReduce, each in place at its root.
CommHandle NcclCommunicator::ReduceScatterInPlaceAsync(float* data, std::span<const size_t> counts,
                                                       ReduceOp op) {
  const int w = world();
  if (counts.size() != static_cast<size_t>(w))
    return CommHandle::Failed(Status::InvalidArgument(fmt::format(
        "nccl in-place reduce-scatter: {} counts for a world of {}; pass one per rank", counts.size(), w)));
  const ncclRedOp_t nop = op == ReduceOp::kMean ? ncclAvg : ncclSum;
  size_t n = 0;
  bool even = true;
  for (size_t c : counts) {
    n += c;
    even = even && c == counts[0];
  }
  const std::vector<size_t> pieces(counts.begin(), counts.end());
  return Start(state_, timeout(), CollectiveKind::kReduceScatter, n, [&](ncclComm_t comm, cudaStream_t s) {
    if (n == 0) return ncclSuccess;
    if (even) {
      const size_t c = pieces[0];
      return ncclReduceScatter(data, data + static_cast<size_t>(rank()) * c, c, ncclFloat, nop, comm, s);
    }
    ncclResult_t r = ncclGroupStart();
    size_t offset = 0;
    for (int root = 0; root < w && r == ncclSuccess; root++) {
      const size_t c = pieces[static_cast<size_t>(root)];
      if (c > 0) r = ncclReduce(data + offset, data + offset, c, ncclFloat, nop, root, comm, s);
      offset += c;
    }
    const ncclResult_t end = ncclGroupEnd();
    return r != ncclSuccess ? r : end;
  });
}

CommHandle NcclCommunicator::AllGatherAsync(const float* send, float* recv, size_t n) {
  const int w = world();
  return Start(state_, timeout(), CollectiveKind::kAllGather, n, [&](ncclComm_t comm, cudaStream_t s) {
    if (Even(n, w)) return ncclAllGather(send, recv, n / static_cast<size_t>(w), ncclFloat, comm, s);
    ncclResult_t r = ncclGroupStart();
    for (int root = 0; root < w && r == ncclSuccess; root++) {
      const Shard sh = ShardOf(n, w, root);
      r = ncclBroadcast(send, recv + sh.offset, sh.count, ncclFloat, root, comm, s);
    }
    const ncclResult_t end = ncclGroupEnd();
    return r != ncclSuccess ? r : end;
  });
}

CommHandle NcclCommunicator::BroadcastAsync(void* data, size_t bytes, int root) {
  if (Status s = CheckRoot(root); !s.ok()) return CommHandle::Failed(s);
  return Start(state_, timeout(), CollectiveKind::kBroadcast, bytes, [&](ncclComm_t comm, cudaStream_t s) {
    return ncclBroadcast(data, data, bytes, ncclUint8, root, comm, s);
  });
}

CommHandle NcclCommunicator::BarrierAsync() {
  // NCCL has no barrier: an all-reduce of one integer is one (every rank must contribute before any ends).
  return AllReduceIntAsync(nullptr, 0, IntOp::kSum);
}

CommHandle NcclCommunicator::AllReduceIntAsync(int64_t* values, size_t n, IntOp op) {
  State& st = *state_;
  {
    std::lock_guard lock(st.mu);
    if (st.ints_busy)
      return CommHandle::Failed(Status::InvalidArgument(
          "nccl: one integer all-reduce (or barrier) at a time: wait for the previous one first"));
    const size_t need = std::max<size_t>(n, 1);
    if (need > st.ints_capacity) {
      if (st.host_ints) cudaFreeHost(st.host_ints);
      if (st.device_ints) cudaFree(st.device_ints);
      st.host_ints = nullptr;
      st.device_ints = nullptr;
      st.ints_capacity = 0;
      if (cudaError_t e = cudaMallocHost(&st.host_ints, need * sizeof(int64_t)); e != cudaSuccess)
        return CommHandle::Failed(CudaError(e, "nccl integer all-reduce: cudaMallocHost"));
      if (cudaError_t e = cudaMalloc(&st.device_ints, need * sizeof(int64_t)); e != cudaSuccess)
        return CommHandle::Failed(CudaError(e, "nccl integer all-reduce: cudaMalloc"));
      st.ints_capacity = need;
    }
    if (n > 0)
      std::memcpy(st.host_ints, values, n * sizeof(int64_t));
    else
      st.host_ints[0] = 0;
    st.ints_busy = true;
  }
  const size_t count = std::max<size_t>(n, 1);
  const ncclRedOp_t nop = op == IntOp::kSum ? ncclSum : ncclMax;
  auto state = state_;
  CommHandle h = Start(
      state_, timeout(), n == 0 ? CollectiveKind::kBarrier : CollectiveKind::kAllReduceInt, n,
      [&](ncclComm_t comm, cudaStream_t s) {
        if (cudaMemcpyAsync(st.device_ints, st.host_ints, count * sizeof(int64_t), cudaMemcpyHostToDevice,
                            s) != cudaSuccess)
          return ncclUnhandledCudaError;
        return ncclAllReduce(st.device_ints, st.device_ints, count, ncclInt64, nop, comm, s);
      },
      [state, values, n] {  // runs with state->mu held, once the copy back finished
        if (n > 0) std::memcpy(values, state->host_ints, n * sizeof(int64_t));
        state->ints_busy = false;
      },
      [&](cudaStream_t s) {  // the result back to the host, after the all-reduce has settled
        return cudaMemcpyAsync(st.host_ints, st.device_ints, count * sizeof(int64_t), cudaMemcpyDeviceToHost,
                               s);
      });
  if (h.Done()) {
    std::lock_guard lock(st.mu);
    if (!st.broken.ok()) st.ints_busy = false;  // it failed: the staging is free again
  }
  return h;
}

}  // namespace tern::dist
