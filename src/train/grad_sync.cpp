#include "train/grad_sync.h"

#include <chrono>
#include <cmath>

namespace tern {

GradSync::GradSync(dist::Communicator* comm, float* grads, size_t n, size_t bucket_bytes, bool sharded)
    : comm_(comm), grads_(grads), n_(n), bucket_bytes_(bucket_bytes), sharded_(sharded) {}

dist::CommHandle GradSync::Start(size_t offset, size_t count) {
  float* p = grads_ + offset;
  if (!sharded_) return comm_->AllReduceAsync(p, p, count, dist::ReduceOp::kSum);
  const std::vector<size_t> counts = dist::ShardCounts(n_, comm_->world(), offset, count);
  return comm_->ReduceScatterInPlaceAsync(p, counts, dist::ReduceOp::kSum);
}

void GradSync::OnReady(std::span<const GradRange> ranges) {
  if (bucket_bytes_ == 0) return;  // unbucketed: Finish() does it all
  for (const GradRange& r : ranges) {
    if (!pending_.empty() && pending_.back().offset + pending_.back().count == r.offset) {
      pending_.back().count += r.count;
    } else {
      pending_.push_back(r);
    }
    pending_bytes_ += r.count * sizeof(float);
  }
  if (pending_bytes_ >= bucket_bytes_) StartPending();
  // MPI advances a non-blocking collective only inside MPI calls: poll the ones in flight between layers.
  for (auto& h : inflight_) h.Done();
}

void GradSync::StartPending() {
  if (pending_.empty()) return;
  for (const GradRange& r : pending_) {
    inflight_.push_back(Start(r.offset, r.count));
    covered_ += r.count;
  }
  pending_.clear();
  pending_bytes_ = 0;
}

Result<double> GradSync::Finish() {
  const auto t0 = std::chrono::steady_clock::now();
  if (bucket_bytes_ == 0) {
    inflight_.push_back(Start(0, n_));
    covered_ = n_;
  } else {
    StartPending();
  }
  Status first;
  for (auto& h : inflight_) {
    Status st = h.Wait();
    if (first.ok() && !st.ok()) first = st;
  }
  inflight_.clear();
  const size_t covered = covered_;
  covered_ = 0;
  TERN_RETURN_IF_ERROR(first.WithContext(sharded_ ? "reduce-scattering the gradients across ranks (ZeRO-1)"
                                                  : "averaging the gradients across ranks"));
  if (covered != n_) {
    return Status::Internal(fmt::format("the backward announced {} of the {} gradients", covered, n_));
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Result<double> GradSync::GlobalNorm(Backend* backend) {
  const int W = comm_->world(), r = comm_->rank();
  const dist::Shard mine = dist::ShardOf(n_, W, r);
  const double squares = mine.count > 0 ? backend->SumSquares(grads_ + mine.offset, mine.count) : 0.0;
  Result<double> total = comm_->SumInRankOrder(squares);
  if (!total.ok()) return total.status().WithContext("adding the ranks' gradient norms (ZeRO-1)");
  return std::sqrt(total.value());
}

}  // namespace tern
