// Data-parallel gradient averaging for one optimizer step: the gradients of every rank are summed (each
// rank's loss is already scaled by 1 / the global number of micro-batches, so the sum is the mean over the
// whole global batch, as one process would compute it). Buckets start during the backward of the last
// micro-batch: Gpt::Backward announces ranges as they become final (model/gpt.h GradsReady), and a bucket's
// all-reduces start as soon as it holds bucket_bytes, while the backward of the earlier layers goes on.
// Finish() starts the rest and waits; the wait is the communication that stayed exposed.
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
  GradSync(dist::Communicator* comm, float* grads, size_t n, size_t bucket_bytes);

  // The GradsReady callback for the last micro-batch's Backward.
  GradsReady Hook() {
    return [this](std::span<const GradRange> ranges) { OnReady(ranges); };
  }
  void OnReady(std::span<const GradRange> ranges);
  // Starts what is pending, waits for every collective of this step; then the buffer holds the sum over
  // ranks. Returns the seconds spent waiting here. A timeout or a broken communicator: Unavailable, naming
  // the rank.
  [[nodiscard]] Result<double> Finish();

 private:
  void StartPending();

  dist::Communicator* comm_;
  float* grads_;
  size_t n_, bucket_bytes_;
  std::vector<GradRange> pending_;  // final gradients not yet started, adjacent ranges merged
  size_t pending_bytes_ = 0, covered_ = 0;
  std::vector<dist::CommHandle> inflight_;
};

}  // namespace tern
