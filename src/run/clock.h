// Time for the supervisor: UTC seconds and sleeping, behind an interface so that tests run backoff,
// deadlines and heartbeats on a fake clock (leveldb's Env idea, STYLE.md 7).
#pragma once

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace tern::run {

class Clock {
 public:
  virtual ~Clock() = default;
  // UTC seconds since the epoch: for timestamps, deadlines and what other processes read. It jumps when
  // the system clock is set (NTP stepping it, an administrator, a VM resumed from suspend).
  virtual double Now() = 0;
  // Seconds on a clock that never jumps (steady_clock): for durations — heartbeats, grace periods,
  // backoff waits, the time an attempt is billed for.
  virtual double Monotonic() = 0;
  virtual void Sleep(double seconds) = 0;
};

class RealClock : public Clock {
 public:
  double Now() override {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  }
  double Monotonic() override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  void Sleep(double seconds) override {
    if (seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  }
};

// Test double: Now() moves only when Sleep is called, by exactly the time asked for. Each Sleep also waits
// `real_s` of real time (at most), so that a real child process makes progress while fake time flies.
class FakeClock : public Clock {
 public:
  explicit FakeClock(double start = 1.7e9, double real_s = 0.002)
      : now_(start), mono_(start), real_s_(real_s) {}
  double Now() override { return now_; }
  double Monotonic() override { return mono_; }
  // The system clock is set: Now() moves by `seconds` (either way), Monotonic() does not.
  void Jump(double seconds) { now_ += seconds; }
  void Sleep(double seconds) override {
    if (seconds <= 0) return;
    sleeps.push_back(seconds);
    now_ += seconds;
    mono_ += seconds;
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(seconds, real_s_)));
  }
  std::vector<double> sleeps;  // every Sleep, in order

 private:
  double now_, mono_, real_s_;  // mono_ starts equal to now_: without a Jump they agree exactly
};

// "2025-01-02T03:04:05.678Z" for UTC seconds; and back (also without the fraction). Empty/0 when invalid.
std::string FormatUtc(double unix_s);
double ParseUtc(const std::string& text);

}  // namespace tern::run
