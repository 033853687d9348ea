#include "dist/communicator.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include <fmt/format.h>

namespace tern::dist {

const char* ReduceOpName(ReduceOp op) {
  return op == ReduceOp::kSum ? "sum" : "mean";
}
const char* IntOpName(IntOp op) {
  return op == IntOp::kSum ? "sum" : "max";
}

std::string DescribeCollective(CollectiveKind kind, size_t count) {
  const auto n = [count](const char* one, const char* many) {
    return fmt::format("{} {}", count, count == 1 ? one : many);
  };
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return "all-reduce of " + n("float", "floats");
    case CollectiveKind::kReduceScatter:
      return "reduce-scatter of " + n("float", "floats");
    case CollectiveKind::kAllGather:
      return "all-gather of " + n("float", "floats");
    case CollectiveKind::kBroadcast:
      return "broadcast of " + n("byte", "bytes");
    case CollectiveKind::kBarrier:
      return "barrier";
    case CollectiveKind::kAllReduceInt:
      return "integer all-reduce of " + n("value", "values");
  }
  return fmt::format("collective kind {} of {} elements", static_cast<int>(kind), count);
}

Shard ShardOf(size_t n, int world, int rank) {
  const size_t w = static_cast<size_t>(world), r = static_cast<size_t>(rank);
  const size_t base = n / w, extra = n % w;
  return {r * base + std::min(r, extra), base + (r < extra ? 1 : 0)};
}

std::vector<size_t> ShardCounts(size_t total, int world, size_t offset, size_t n) {
  std::vector<size_t> counts(static_cast<size_t>(world), 0);
  const size_t lo = offset, hi = offset + n;
  for (int r = 0; r < world; r++) {
    const Shard s = ShardOf(total, world, r);
    const size_t b = std::max(lo, s.offset), e = std::min(hi, s.offset + s.count);
    if (b < e) counts[static_cast<size_t>(r)] = e - b;
  }
  return counts;
}

namespace {
// The Impl of CommHandle::Failed: finished, with an error.
class FailedImpl : public CommHandle::Impl {
 public:
  explicit FailedImpl(Status status) : status_(std::move(status)) {}
  bool Test() override { return true; }
  Status Wait(std::chrono::milliseconds) override { return status_; }

 private:
  Status status_;
};
}  // namespace

CommHandle CommHandle::Failed(Status status) {
  return CommHandle(std::make_unique<FailedImpl>(std::move(status)), std::chrono::milliseconds(0));
}

CommHandle::CommHandle(CommHandle&& other) noexcept
    : impl_(std::move(other.impl_)),
      timeout_(other.timeout_),
      waited_(other.waited_),
      status_(std::move(other.status_)) {
  other.waited_ = true;
}

CommHandle& CommHandle::operator=(CommHandle&& other) noexcept {
  if (this != &other) {
    if (impl_ && !waited_) (void)Wait();
    impl_ = std::move(other.impl_);
    timeout_ = other.timeout_;
    waited_ = other.waited_;
    status_ = std::move(other.status_);
    other.waited_ = true;
  }
  return *this;
}

CommHandle::~CommHandle() {
  if (impl_ && !waited_) (void)Wait();
}

Status CommHandle::Wait() {
  if (!waited_ && impl_) status_ = impl_->Wait(timeout_);
  waited_ = true;
  return status_;
}

bool CommHandle::Done() {
  return waited_ || !impl_ || impl_->Test();
}

Result<int64_t> Communicator::AllReduceInt(int64_t value, IntOp op) {
  TERN_RETURN_IF_ERROR(AllReduceIntAsync(&value, 1, op).Wait());
  return value;
}

Result<double> Communicator::SumInRankOrder(double value) {
  // Each rank puts its value's bits in its own slot, zeros elsewhere: the integer sum is a gather.
  std::vector<int64_t> bits(static_cast<size_t>(world_), 0);
  std::memcpy(&bits[static_cast<size_t>(rank_)], &value, sizeof value);
  TERN_RETURN_IF_ERROR(AllReduceIntAsync(bits.data(), bits.size(), IntOp::kSum).Wait());
  double total = 0;
  for (int64_t b : bits) {
    double x;
    std::memcpy(&x, &b, sizeof x);
    total += x;
  }
  return total;
}

Status Communicator::CheckRoot(int root) const {
  if (root >= 0 && root < world_) return Status::Ok();
  return Status::InvalidArgument(
      fmt::format("broadcast root {} is not a rank of this world of {}", root, world_));
}

std::string DescribeRanks(const std::vector<int>& ranks) {
  if (ranks.empty()) return "no rank";
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) j++;
    if (i > 0) out += ", ";
    out += j > i ? fmt::format("{}-{}", ranks[i], ranks[j]) : fmt::format("{}", ranks[i]);
    i = j + 1;
  }
  return out;
}

}  // namespace tern::dist
