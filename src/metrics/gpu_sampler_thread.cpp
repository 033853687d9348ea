#include "metrics/gpu_sampler_thread.h"

namespace tern {

BackgroundGpuSampler::BackgroundGpuSampler(std::unique_ptr<GpuSampler> inner,
                                           std::chrono::milliseconds period)
    : inner_(std::move(inner)), period_(period) {
  latest_ = inner_->Sample();
  latest_at_ = std::chrono::steady_clock::now();
  polls_ = 1;
  if (inner_->available()) thread_ = std::thread([this] { Loop(); });
}

BackgroundGpuSampler::~BackgroundGpuSampler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void BackgroundGpuSampler::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (cv_.wait_for(lock, period_, [this] { return stop_; })) break;
    lock.unlock();  // the (slow) query runs without the lock: Sample() never waits for the driver
    GpuSample s = inner_->Sample();
    const auto at = std::chrono::steady_clock::now();
    lock.lock();
    if (s.ok) {
      latest_ = s;
      latest_at_ = at;
    }
    polls_++;
  }
}

GpuSample BackgroundGpuSampler::Sample() const {
  std::lock_guard<std::mutex> lock(mu_);
  GpuSample s = latest_;
  if (s.ok && s.has_energy) {
    const double age = std::chrono::duration<double>(std::chrono::steady_clock::now() - latest_at_).count();
    s.energy_j += s.power_w * age;
  }
  return s;
}

long long BackgroundGpuSampler::polls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return polls_;
}

}  // namespace tern
