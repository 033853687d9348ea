// Knowing that the machine is about to go away, early enough to save.
//
// Sources: SIGTERM (cloud shutdown, Kubernetes, `tern run` forwarding its own: docs/jobs.md) and SIGUSR1
// (Slurm's --signal=USR1@SECS), and a poller for the cloud metadata endpoints:
//   aws  PUT  BASE/latest/api/token (IMDSv2) then GET BASE/latest/meta-data/spot/instance-action:
//        404 = nothing planned, 200 {"action":"terminate","time":"2025-01-01T12:00:00Z"} = notice
//        (about 2 minutes ahead). BASE defaults to http://169.254.169.254.
//   gcp  GET  BASE/computeMetadata/v1/instance/preempted with "Metadata-Flavor: Google": "TRUE" = notice
//        (about 30 s ahead). BASE defaults to http://metadata.google.internal.
// Tests point BASE at a local stub. The signal handler only stores into lock-free atomics (async-signal-
// safe); the trainer checks notified() between steps and decides what to do. Nothing here exits.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "core/status.h"

namespace tern::ckpt {

// Process exit code for "preempted after saving a checkpoint: run again with --resume auto"
// (sysexits.h EX_TEMPFAIL). Supervisors (`tern run`, run/supervisor.h) relaunch on it at once; 0 is success,
// anything else a failure.
inline constexpr int kExitPreempted = 75;

struct PreemptionNotice {
  std::string source;   // "SIGTERM", "SIGUSR1", "aws spot instance-action: terminate", "gcp preempted"
  double window_s = 0;  // seconds from the notice until the instance goes away (as announced or assumed)
  std::chrono::steady_clock::time_point at;  // when we learned of it
};

struct PreemptionOptions {
  bool signals = true;       // handle SIGTERM and SIGUSR1
  std::string url;           // metadata base URL; empty = no poller
  std::string kind = "aws";  // aws | gcp
  double poll_s = 5;
  double signal_window_s = 30;  // assumed window for signals and GCP (which do not announce one)
};

// The metadata endpoints' answers (the parsing half of PollOnce, pure):
// AWS spot/instance-action's 200 body, {"action": "terminate", "time": "2025-01-01T12:00:00Z"}, as a notice
// (source "aws spot instance-action: ACTION", window from `time`, else 120 s; `at` = now). Any body is a
// notice: the 200 itself says one is scheduled.
PreemptionNotice ParseAwsInstanceAction(std::string_view body);
// GCP instance/preempted's 200 body: true when it says TRUE.
bool ParseGcpPreempted(std::string_view body);

class PreemptionWatcher {
 public:
  static Result<std::unique_ptr<PreemptionWatcher>> Start(const PreemptionOptions& options);
  ~PreemptionWatcher();  // stops the poller; restores the previous signal handlers
  PreemptionWatcher(const PreemptionWatcher&) = delete;
  PreemptionWatcher& operator=(const PreemptionWatcher&) = delete;

  bool notified() const;
  PreemptionNotice notice() const;                          // valid once notified()
  void Notify(const std::string& source, double window_s);  // for the poller, and tests

  // One poll of the metadata endpoint: true (and *notice filled) when a preemption is announced.
  static Result<bool> PollOnce(const PreemptionOptions& options, std::string* token,
                               PreemptionNotice* notice);

 private:
  PreemptionWatcher() = default;
  void PollLoop();

  PreemptionOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool polled_notice_ = false;
  PreemptionNotice notice_;
  std::thread poller_;
  bool installed_ = false;
};

}  // namespace tern::ckpt
