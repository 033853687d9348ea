// World 1: every collective is the identity. In-place calls do nothing; out-of-place ones copy (with
// `copy`, e.g. the CUDA backend's device copy, when the buffers are device memory).
#pragma once

#include <functional>

#include "dist/communicator.h"

namespace tern::dist {

class SingleProcessCommunicator : public Communicator {
 public:
  using CopyFn = std::function<void(void* dst, const void* src, size_t bytes)>;
  // copy = nullptr: host buffers, std::memcpy.
  explicit SingleProcessCommunicator(CopyFn copy = nullptr, bool device_memory = false);

  std::string name() const override { return "single"; }
  bool device_memory() const override { return device_memory_; }

  CommHandle AllReduceAsync(const float* send, float* recv, size_t n, ReduceOp op) override;
  CommHandle ReduceScatterAsync(const float* send, float* recv, size_t n, ReduceOp op) override;
  CommHandle ReduceScatterInPlaceAsync(float*, std::span<const size_t>, ReduceOp) override {
    return {};  // one rank: its piece is all of data, and already the sum (and the mean)
  }
  CommHandle AllGatherAsync(const float* send, float* recv, size_t n) override;
  CommHandle BroadcastAsync(void* data, size_t bytes, int root) override;
  CommHandle BarrierAsync() override { return {}; }
  CommHandle AllReduceIntAsync(int64_t* values, size_t n, IntOp op) override { return {}; }

 private:
  void CopyIfApart(void* dst, const void* src, size_t bytes);
  CopyFn copy_;
  bool device_memory_;
};

}  // namespace tern::dist
