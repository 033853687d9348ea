// Data-parallel gradient averaging for one optimizer step: the gradients of every rank are summed (each
// rank's loss is already scaled by 1 / the global number of micro-batches, so the sum is the mean over the
// whole global batch, as one process would compute it). Buckets start during the backward of the last
// micro-batch: Gpt::Backward announces ranges as they become final (model/gpt.h GradsReady), and a bucket's
// all-reduces start as soon as it holds bucket_bytes, while the backward of the earlier layers goes on.
// Finish() starts the rest and waits; the wait is the communication that stayed exposed.
//
// ZeRO-1 (sharded): each bucket is reduce-scattered instead (Communicator::ReduceScatterInPlaceAsync, the
// bucket split by the owners of its elements, ShardCounts), so each rank receives the sums of its optimizer
// shard only, half the traffic of an all-reduce; the rest of the buffer is left undefined. The gradient norm
// then comes from the shards: GlobalNorm().
#pragma once

#include <span>
#include <vector>

#include "core/status.h"
#include "dist/communicator.h"
#include "model/gpt.h"

namespace tern {

class GradSync {
 public:
  // grads: the model's gradient buffer (n floats, memory of the communicator's kind). bucket_bytes 0: nothing
  // starts during the backward; Finish() all-reduces the whole buffer at once (the unbucketed path).
  // sharded: ZeRO-1, this rank's shard is dist::ShardOf(n, world, rank) (the model's optimizer shard).
  GradSync(dist::Communicator* comm, float* grads, size_t n, size_t bucket_bytes, bool sharded = false);
  bool sharded() const { return sharded_; }

  // The GradsReady callback for the last micro-batch's Backward.
  GradsReady Hook() {
    return [this](std::span<const GradRange> ranges) { OnReady(ranges); };
  }
  void OnReady(std::span<const GradRange> ranges);
  // Starts what is pending, waits for every collective of this step; then the buffer holds the sum over
  // ranks. Returns the seconds spent waiting here. A timeout or a broken communicator: Unavailable, naming
  // the rank.
  [[nodiscard]] Result<double> Finish();
  // After Finish() with sharded: the L2 norm of the whole summed gradient, from every rank's shard: each
  // rank's sum of squares (in double) goes to every rank exactly (an integer all-reduce of the bit patterns),
  // and they are added in rank order, so every rank gets the same value, equal to the unsharded norm up to
  // the order of the double additions.
  [[nodiscard]] Result<double> GlobalNorm(Backend* backend);

 private:
  void StartPending();
  dist::CommHandle Start(size_t offset, size_t count);  // the all-reduce or reduce-scatter of one range

  dist::Communicator* comm_;
  float* grads_;
  size_t n_, bucket_bytes_;
  bool sharded_;
  std::vector<GradRange> pending_;  // final gradients not yet started, adjacent ranges merged
  size_t pending_bytes_ = 0, covered_ = 0;
  std::vector<dist::CommHandle> inflight_;
};

}  // namespace tern
