#include "dist/mpi_communicator.h"

#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dist/mpi_work.h"
#include "dist/poll.h"

namespace tern::dist {
namespace {

constexpr int kArrivalTag = 7101;

Status MpiError(int rc, const std::string& what) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = std::snprintf(text, sizeof text, "error %d", rc);
  return Status::Internal(fmt::format("{} failed: {}", what, std::string(text, static_cast<size_t>(len))));
}

std::string Seconds(std::chrono::milliseconds t) {
  return fmt::format("{:g} s", t.count() / 1000.0);
}

// Process-wide: the requests of operations abandoned after a timeout (MPI cannot cancel a collective).
struct MpiProcess {
  std::mutex mu;
  std::vector<MPI_Request> abandoned;
};
MpiProcess& Process() {
  static MpiProcess* p = new MpiProcess;  // never destroyed: FinalizeAtExit uses it
  return *p;
}
void Abandon(std::vector<MPI_Request>* reqs) {
  std::lock_guard lock(Process().mu);
  for (MPI_Request r : *reqs)
    if (r != MPI_REQUEST_NULL) Process().abandoned.push_back(r);
  reqs->clear();
}

// Registered with atexit when tern initialised MPI. MPI_Finalize waits for every rank, so it runs only
// when no abandoned operation is still waiting for a missing rank (given one more second to finish).
void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  MpiProcess& p = Process();
  std::lock_guard lock(p.mu);
  PollClock clock(std::chrono::seconds(1));
  while (!p.abandoned.empty()) {
    int flag = 0;
    if (MPI_Testall(static_cast<int>(p.abandoned.size()), p.abandoned.data(), &flag, MPI_STATUSES_IGNORE) !=
        MPI_SUCCESS)
      break;
    if (flag) p.abandoned.clear();
    if (flag || clock.Expired()) break;
    clock.Backoff();
  }
  if (!p.abandoned.empty()) {
    std::fprintf(
        stderr,
        "tern: leaving without MPI_Finalize: %zu MPI operation(s) abandoned after a timeout are still "
        "waiting for a missing rank (MPI_Finalize would wait for it forever)\n",
        p.abandoned.size());
    return;
  }
  MPI_Finalize();
}

Status EnsureMpi() {
  static std::mutex mu;
  std::lock_guard lock(mu);
  int finalized = 0, initialized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return Status::Internal("MPI was already finalised in this process; it cannot start again");
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Init_thread");
    std::atexit(FinalizeAtExit);
  }
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_SERIALIZED)
    return Status::Internal(
        fmt::format("MPI was initialised at thread level {}, below MPI_THREAD_SERIALIZED ({}) that tern "
                    "needs: initialise it "
                    "with MPI_Init_thread(..., MPI_THREAD_SERIALIZED, ...) or let tern do it",
                    provided, MPI_THREAD_SERIALIZED));
  return Status::Ok();
}

// What a rank tells the others when it starts a collective.
struct Note {
  uint64_t seq = 0;  // 1, 2, ... per communicator; 0 = none yet
  uint64_t kind = 0;
  uint64_t count = 0;
};
static_assert(sizeof(Note) == 3 * sizeof(uint64_t));

std::string DescribeNote(const Note& n) {
  return DescribeCollective(static_cast<CollectiveKind>(n.kind), static_cast<size_t>(n.count));
}

// The arrival notes on their own communicator: sent with MPI_Isend as a collective starts, received
// (MPI_Iprobe + MPI_Recv) before the next one starts and when a wait times out. Messages from one rank
// arrive in order, so the last note received from a rank is the newest collective it started.
class ArrivalBoard {
 public:
  ArrivalBoard(MPI_Comm comm, int rank, int world)
      : comm_(comm), rank_(rank), last_(static_cast<size_t>(world)) {}

  void Announce(const Note& note) {
    Drain();
    Outgoing& out = outbox_.emplace_back();  // a deque: the buffers of earlier notes stay where they are
    out.note = note;
    for (int r = 0; r < static_cast<int>(last_.size()); r++) {
      if (r == rank_) continue;
      MPI_Request req;
      if (MPI_Isend(&out.note, 3, MPI_UINT64_T, r, kArrivalTag, comm_, &req) == MPI_SUCCESS)
        out.reqs.push_back(req);
    }
  }

  void Drain() {
    while (!outbox_.empty()) {
      int flag = 0;
      Outgoing& front = outbox_.front();
      if (MPI_Testall(static_cast<int>(front.reqs.size()), front.reqs.data(), &flag, MPI_STATUSES_IGNORE) !=
              MPI_SUCCESS ||
          !flag)
        break;
      outbox_.pop_front();
    }
    for (;;) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kArrivalTag, comm_, &flag, &st) != MPI_SUCCESS || !flag) break;
      Note n;
      if (MPI_Recv(&n, 3, MPI_UINT64_T, st.MPI_SOURCE, kArrivalTag, comm_, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        break;
      last_[static_cast<size_t>(st.MPI_SOURCE)] = n;
    }
  }

  const Note& last(int rank) const { return last_[static_cast<size_t>(rank)]; }

  // Waits up to a second for the notes still being sent; those that do not go are abandoned with their
  // buffers (kept alive for MPI). Then frees the communicator.
  void Close() {
    PollClock clock(std::chrono::seconds(1));
    for (;;) {
      Drain();
      if (outbox_.empty() || clock.Expired()) break;
      clock.Backoff();
    }
    if (!outbox_.empty()) {
      auto* kept =
          new std::deque<Outgoing>(std::move(outbox_));  // deliberately leaked: MPI may still read it
      for (Outgoing& out : *kept) Abandon(&out.reqs);
    }
    MPI_Comm_free(&comm_);
  }

 private:
  struct Outgoing {
    Note note;
    std::vector<MPI_Request> reqs;
  };
  MPI_Comm comm_;
  int rank_;
  std::vector<Note> last_;
  std::deque<Outgoing> outbox_;
};

}  // namespace

struct MpiCommunicator::State {
  std::mutex mu;  // guards every MPI call on these communicators, and the fields below
  MPI_Comm comm = MPI_COMM_NULL;
  std::unique_ptr<ArrivalBoard> arrivals;  // null: tracking off, or a world of one
  uint64_t seq = 0;
  Status broken;  // ok until a collective failed; then every call returns it
  int rank = 0, world = 1;
  size_t max_chunk = 1;

  uint64_t AnnounceLocked(CollectiveKind kind, size_t count) {
    const Note note{++seq, static_cast<uint64_t>(kind), count};
    if (arrivals) arrivals->Announce(note);
    return note.seq;
  }

  Status TimeoutLocked(const std::string& transport, uint64_t at, CollectiveKind kind, size_t count,
                       std::chrono::milliseconds timeout) {
    std::string msg = fmt::format("rank {}: {} collective #{} ({}) did not finish within {}", rank, transport,
                                  at, DescribeCollective(kind, count), Seconds(timeout));
    if (world == 1) {
      msg += " in a world of one";
    } else if (!arrivals) {
      msg += "; arrival tracking is off, so which rank is missing is unknown";
    } else {
      arrivals->Drain();
      std::vector<int> missing;
      std::vector<std::string> details, mismatched;
      for (int r = 0; r < world; r++) {
        if (r == rank) continue;
        const Note& n = arrivals->last(r);
        if (n.seq < at) {
          missing.push_back(r);
          if (details.size() < 8)
            details.push_back(n.seq == 0
                                  ? fmt::format("rank {} started none yet", r)
                                  : fmt::format("rank {} last started #{}, {}", r, n.seq, DescribeNote(n)));
        } else if (n.seq == at && (n.kind != static_cast<uint64_t>(kind) || n.count != count)) {
          mismatched.push_back(fmt::format("rank {} started #{} as {}", r, at, DescribeNote(n)));
        }
      }
      if (!missing.empty()) {
        msg += fmt::format(": {} never started it ({})", DescribeRanks(missing), fmt::join(details, "; "));
      } else if (!mismatched.empty()) {
        msg += fmt::format(": the ranks called different collectives ({})", fmt::join(mismatched, "; "));
      } else {
        msg +=
            ": every rank started it, yet it did not finish (a network failure, or a rank that stopped in "
            "it)";
      }
    }
    msg +=
        ". Every rank must call the same collectives in the same order; a rank that crashed, hangs or "
        "skipped one "
        "stops the others. This communicator is unusable now: exit non-zero and relaunch (resume from the "
        "last "
        "checkpoint)";
    return Status::Unavailable(msg);
  }
};

namespace {

using State = MpiCommunicator::State;

// One started collective: its requests, the arrays MPI reads while it runs, and what to do once it is done.
class MpiWork : public CommHandle::Impl, public mpi_detail::MpiRequests {
 public:
  MpiWork(std::shared_ptr<State> state, uint64_t seq, CollectiveKind kind, size_t count)
      : state_(std::move(state)), seq_(seq), kind_(kind), count_(count) {}

  bool Test() override {
    std::lock_guard lock(state_->mu);
    return TestLocked();
  }

  Status Wait(std::chrono::milliseconds timeout) override {
    PollClock clock(timeout);
    while (!Test()) {
      {
        // Another collective timed out meanwhile: this one waits for the same missing rank; fail now rather
        // than after a timeout of its own (a step's 26 gradient buckets would take 26 timeouts).
        std::lock_guard lock(state_->mu);
        if (!state_->broken.ok() && !done_) {
          status_ = Status::Unavailable(fmt::format("{} abandoned: {}", what(), state_->broken.message()));
          Abandon(&reqs);
          done_ = true;
          break;
        }
      }
      if (clock.Expired()) {
        std::lock_guard lock(state_->mu);
        if (TestLocked()) break;
        status_ = state_->TimeoutLocked("mpi", seq_, kind_, count_, timeout);
        Fail();
        break;
      }
      clock.Backoff();
    }
    return status_;
  }

  std::string what() const {
    return fmt::format("rank {}: mpi collective #{} ({})", state_->rank, seq_,
                       DescribeCollective(kind_, count_));
  }

 private:
  bool TestLocked() {
    if (done_) return true;
    int flag = 0;
    const int rc = MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &flag, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
      status_ = MpiError(rc, what());
      Fail();
    } else if (flag) {
      if (finish) finish();
      done_ = true;
    }
    return done_;
  }
  void Fail() {  // with state_->mu held
    if (state_->broken.ok()) state_->broken = status_;
    Abandon(&reqs);
    done_ = true;
  }

  std::shared_ptr<State> state_;
  uint64_t seq_;
  CollectiveKind kind_;
  size_t count_;
  bool done_ = false;
  Status status_;
};

}  // namespace

namespace mpi_detail {

CommHandle StartCollective(const std::shared_ptr<State>& state, std::chrono::milliseconds timeout,
                           CollectiveKind kind, size_t count, const PostFn& post) {
  std::lock_guard lock(state->mu);
  if (!state->broken.ok())
    return CommHandle::Failed(Status::Unavailable("this mpi communicator failed earlier and is unusable: " +
                                                  state->broken.message()));
  const uint64_t seq = state->AnnounceLocked(kind, count);
  auto work = std::make_unique<MpiWork>(state, seq, kind, count);
  if (const int rc = post(*work); rc != MPI_SUCCESS) {
    Status s = MpiError(rc, work->what());
    state->broken = s;
    Abandon(&work->reqs);
    return CommHandle::Failed(s);
  }
  return CommHandle(std::move(work), timeout);
}

void DivideBy(float* data, size_t n, int world) {
  const float w = static_cast<float>(world);
  for (size_t i = 0; i < n; i++) data[i] /= w;
}

Status CheckIntCount(size_t n, const char* what) {
  if (n <= static_cast<size_t>(INT_MAX)) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "mpi {} of {} elements: at most {} (MPI counts are ints); split the call", what, n, INT_MAX));
}

MPI_Comm CommOf(const State& state) {
  return state.comm;
}

}  // namespace mpi_detail

namespace {

using mpi_detail::CheckIntCount;
using mpi_detail::DivideBy;
using mpi_detail::MpiRequests;
using mpi_detail::StartCollective;

bool Overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const char *pa = static_cast<const char*>(a), *pb = static_cast<const char*>(b);
  return a_bytes > 0 && b_bytes > 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

}  // namespace

MpiCommunicator::MpiCommunicator(std::shared_ptr<State> state, int rank, int world, int local_rank,
                                 int local_world, std::chrono::milliseconds timeout)
    : Communicator(rank, world, local_rank, local_world, timeout), state_(std::move(state)) {}

Result<std::unique_ptr<MpiCommunicator>> MpiCommunicator::Create(const MpiOptions& options) {
  TERN_RETURN_IF_ERROR(EnsureMpi());
  auto state = std::make_shared<State>();
  MPI_Request req;
  if (int rc = MPI_Comm_idup(MPI_COMM_WORLD, &state->comm, &req); rc != MPI_SUCCESS)
    return MpiError(rc, "MPI_Comm_idup");
  PollClock clock(options.timeout);
  for (;;) {
    int flag = 0;
    if (int rc = MPI_Test(&req, &flag, MPI_STATUS_IGNORE); rc != MPI_SUCCESS)
      return MpiError(rc, "MPI_Comm_idup");
    if (flag) break;
    if (clock.Expired()) {
      std::vector<MPI_Request> pending{req};
      Abandon(&pending);
      int world = 0;
      MPI_Comm_size(MPI_COMM_WORLD, &world);
      return Status::Unavailable(fmt::format(
          "not every rank of the MPI world of {} created its communicator within {}: a rank crashed or hangs "
          "before it",
          world, Seconds(options.timeout)));
    }
    clock.Backoff();
  }
  MPI_Comm_set_errhandler(state->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(state->comm, &state->rank);
  MPI_Comm_size(state->comm, &state->world);
  // The ranks on this machine: those that can share memory with this one.
  MPI_Comm node;
  if (int rc = MPI_Comm_split_type(state->comm, MPI_COMM_TYPE_SHARED, state->rank, MPI_INFO_NULL, &node);
      rc != MPI_SUCCESS)
    return MpiError(rc, "MPI_Comm_split_type");
  int local_rank = 0, local_world = 1;
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_world);
  MPI_Comm_free(&node);
  if (options.track_arrivals && state->world > 1) {
    MPI_Comm side;
    if (int rc = MPI_Comm_dup(state->comm, &side); rc != MPI_SUCCESS) return MpiError(rc, "MPI_Comm_dup");
    MPI_Comm_set_errhandler(side, MPI_ERRORS_RETURN);
    state->arrivals = std::make_unique<ArrivalBoard>(side, state->rank, state->world);
  }
  state->max_chunk = std::clamp<size_t>(options.max_chunk_elements, 1, static_cast<size_t>(INT_MAX));
  const int rank = state->rank, world = state->world;
  return std::unique_ptr<MpiCommunicator>(
      new MpiCommunicator(std::move(state), rank, world, local_rank, local_world, options.timeout));
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  std::lock_guard lock(state_->mu);
  if (state_->arrivals) state_->arrivals->Close();
  state_->arrivals.reset();
  // A broken communicator has an abandoned collective on it: it stays for the process's exit.
  if (state_->broken.ok()) MPI_Comm_free(&state_->comm);
}

CommHandle MpiCommunicator::AllReduceAsync(const float* send, float* recv, size_t n, ReduceOp op) {
  if (send != recv && Overlap(send, n * sizeof(float), recv, n * sizeof(float)))
    return CommHandle::Failed(
        Status::InvalidArgument("mpi all-reduce: send and recv overlap without being equal"));
  const size_t chunk = state_->max_chunk;
  const int world = this->world();
  MPI_Comm comm = state_->comm;
  return StartCollective(state_, timeout(), CollectiveKind::kAllReduce, n, [&](MpiRequests& w) {
    for (size_t off = 0; off < n; off += chunk) {
      const int c = static_cast<int>(std::min(chunk, n - off));
      const void* in = send == recv ? MPI_IN_PLACE : static_cast<const void*>(send + off);
      MPI_Request req;
      if (int rc = MPI_Iallreduce(in, recv + off, c, MPI_FLOAT, MPI_SUM, comm, &req); rc != MPI_SUCCESS)
        return rc;
      w.reqs.push_back(req);
    }
    if (op == ReduceOp::kMean) w.finish = [recv, n, world] { DivideBy(recv, n, world); };
    return MPI_SUCCESS;
  });
}

CommHandle MpiCommunicator::ReduceScatterAsync(const float* send, float* recv, size_t n, ReduceOp op) {
  if (Status s = CheckIntCount(n, "reduce-scatter"); !s.ok()) return CommHandle::Failed(s);
  const int world = this->world();
  const Shard mine = ShardOf(n, world, rank());
  if (Overlap(send, n * sizeof(float), recv, mine.count * sizeof(float)))
    return CommHandle::Failed(Status::InvalidArgument("mpi reduce-scatter: recv overlaps send"));
  MPI_Comm comm = state_->comm;
  return StartCollective(state_, timeout(), CollectiveKind::kReduceScatter, n, [&](MpiRequests& w) {
    for (int r = 0; r < world; r++) w.counts.push_back(static_cast<int>(ShardOf(n, world, r).count));
    MPI_Request req;
    if (int rc = MPI_Ireduce_scatter(send, recv, w.counts.data(), MPI_FLOAT, MPI_SUM, comm, &req);
        rc != MPI_SUCCESS)
      return rc;
    w.reqs.push_back(req);
    if (op == ReduceOp::kMean) w.finish = [recv, count = mine.count, world] { DivideBy(recv, count, world); };
    return MPI_SUCCESS;
  });
}

CommHandle MpiCommunicator::AllGatherAsync(const float* send, float* recv, size_t n) {
  if (Status s = CheckIntCount(n, "all-gather"); !s.ok()) return CommHandle::Failed(s);
  const int world = this->world();
  const Shard mine = ShardOf(n, world, rank());
  const bool in_place = send == recv + mine.offset;
  if (!in_place && Overlap(send, mine.count * sizeof(float), recv, n * sizeof(float)))
    return CommHandle::Failed(Status::InvalidArgument(
        "mpi all-gather: send overlaps recv (in place means send == recv + shard offset)"));
  MPI_Comm comm = state_->comm;
  return StartCollective(state_, timeout(), CollectiveKind::kAllGather, n, [&](MpiRequests& w) {
    for (int r = 0; r < world; r++) {
      const Shard s = ShardOf(n, world, r);
      w.counts.push_back(static_cast<int>(s.count));
      w.displs.push_back(static_cast<int>(s.offset));
    }
    const void* in = in_place ? MPI_IN_PLACE : static_cast<const void*>(send);
    MPI_Request req;
    if (int rc = MPI_Iallgatherv(in, static_cast<int>(mine.count), MPI_FLOAT, recv, w.counts.data(),
                                 w.displs.data(), MPI_FLOAT, comm, &req);
        rc != MPI_SUCCESS)
      return rc;
    w.reqs.push_back(req);
    return MPI_SUCCESS;
  });
}

CommHandle MpiCommunicator::BroadcastAsync(void* data, size_t bytes, int root) {
  if (Status s = CheckRoot(root); !s.ok()) return CommHandle::Failed(s);
  const size_t chunk = std::min(state_->max_chunk * sizeof(float), static_cast<size_t>(INT_MAX));
  MPI_Comm comm = state_->comm;
  return StartCollective(state_, timeout(), CollectiveKind::kBroadcast, bytes, [&](MpiRequests& w) {
    for (size_t off = 0; off < bytes; off += chunk) {
      MPI_Request req;
      const int c = static_cast<int>(std::min(chunk, bytes - off));
      if (int rc = MPI_Ibcast(static_cast<char*>(data) + off, c, MPI_BYTE, root, comm, &req);
          rc != MPI_SUCCESS)
        return rc;
      w.reqs.push_back(req);
    }
    return MPI_SUCCESS;
  });
}

CommHandle MpiCommunicator::BarrierAsync() {
  MPI_Comm comm = state_->comm;
  return StartCollective(state_, timeout(), CollectiveKind::kBarrier, 0, [&](MpiRequests& w) {
    MPI_Request req;
    if (int rc = MPI_Ibarrier(comm, &req); rc != MPI_SUCCESS) return rc;
    w.reqs.push_back(req);
    return MPI_SUCCESS;
  });
}

CommHandle MpiCommunicator::AllReduceIntAsync(int64_t* values, size_t n, IntOp op) {
  if (Status s = CheckIntCount(n, "integer all-reduce"); !s.ok()) return CommHandle::Failed(s);
  MPI_Comm comm = state_->comm;
  return StartCollective(state_, timeout(), CollectiveKind::kAllReduceInt, n, [&](MpiRequests& w) {
    MPI_Request req;
    MPI_Op mop = op == IntOp::kSum ? MPI_SUM : MPI_MAX;
    if (int rc = MPI_Iallreduce(MPI_IN_PLACE, values, static_cast<int>(n), MPI_INT64_T, mop, comm, &req);
        rc != MPI_SUCCESS)
      return rc;
    w.reqs.push_back(req);
    return MPI_SUCCESS;
  });
}

uint64_t MpiCommunicator::Announce(CollectiveKind kind, size_t count) {
  std::lock_guard lock(state_->mu);
  return state_->AnnounceLocked(kind, count);
}

Status MpiCommunicator::DescribeTimeout(const std::string& transport, uint64_t seq, CollectiveKind kind,
                                        size_t count, std::chrono::milliseconds timeout) {
  std::lock_guard lock(state_->mu);
  return state_->TimeoutLocked(transport, seq, kind, count, timeout);
}

}  // namespace tern::dist

// Under AddressSanitizer (scripts/sanitize asan) LeakSanitizer is off in a process that started MPI: Open MPI
// leaves its components' allocations at exit, from plugins it has unloaded by then, so the reports name no
// library a suppression could match. ASan's other checks stay on, and processes without MPI keep leak checks.
extern "C" int __lsan_is_turned_off() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  return initialized;
}
