// Waiting by polling, for the implementations: a deadline and a back-off that spins for the first
// microseconds (a small collective finishes in tens of them) and then sleeps, so that ranks sharing cores
// with each other (mpirun --oversubscribe) do not starve the rank they wait for.
#pragma once

#include <chrono>
#include <thread>

namespace tern::dist {

class PollClock {
 public:
  explicit PollClock(std::chrono::milliseconds timeout)
      : start_(std::chrono::steady_clock::now()), deadline_(start_ + timeout) {}

  bool Expired() const { return std::chrono::steady_clock::now() >= deadline_; }
  double elapsed_s() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  // Call after each unsuccessful poll.
  void Backoff() {
    polls_++;
    if (polls_ < 64) return;  // spin
    if (polls_ < 1024) {
      std::this_thread::yield();
    } else if (polls_ < 4096) {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

 private:
  std::chrono::steady_clock::time_point start_, deadline_;
  long polls_ = 0;
};

}  // namespace tern::dist
