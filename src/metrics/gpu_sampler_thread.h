// NVML queries are driver ioctls (0.1 to a few ms each, four per reading): too slow to run inside a
// training step. BackgroundGpuSampler polls another GpuSampler on its own thread and answers Sample() at
// once with the newest reading, so a step boundary costs a mutex and a copy.
//
// The energy counter of a cached reading is extrapolated to the moment of the call by that reading's power
// (energy_j + power_w * age): without it, per-step energy differences would be quantised to the polling
// period. Across steps the errors telescope, so the sum of the steps' joules stays close to the counter's.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "metrics/nvml_sampler.h"

namespace tern {

class BackgroundGpuSampler : public GpuSampler {
 public:
  // Takes one reading now (so Sample() is valid at once), then polls every `period` on a thread, which is
  // started only when `inner` is available.
  explicit BackgroundGpuSampler(std::unique_ptr<GpuSampler> inner,
                                std::chrono::milliseconds period = std::chrono::milliseconds(20));
  ~BackgroundGpuSampler() override;  // stops and joins the thread
  BackgroundGpuSampler(const BackgroundGpuSampler&) = delete;
  BackgroundGpuSampler& operator=(const BackgroundGpuSampler&) = delete;

  bool available() const override { return inner_->available(); }
  const std::string& status() const override { return inner_->status(); }
  GpuSample Sample() const override;
  // Readings taken so far (tests).
  long long polls() const;

 private:
  void Loop();

  std::unique_ptr<GpuSampler> inner_;
  const std::chrono::milliseconds period_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  GpuSample latest_;
  std::chrono::steady_clock::time_point latest_at_;
  long long polls_ = 0;
  std::thread thread_;
};

}  // namespace tern
