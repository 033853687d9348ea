// The supervisor's signals: SIGTERM, SIGUSR1 (Slurm's warning) and SIGINT (Ctrl-C) are caught while it
// runs; the handler only stores the signal (async-signal-safe) and the supervisor's loop acts on it.
#pragma once

#include <csignal>

namespace tern::run {

// Installs the handlers for its lifetime (when enabled) and restores the previous ones after.
class SupervisorSignals {
 public:
  explicit SupervisorSignals(bool enabled);
  ~SupervisorSignals();
  SupervisorSignals(const SupervisorSignals&) = delete;
  SupervisorSignals& operator=(const SupervisorSignals&) = delete;

 private:
  bool enabled_;
  struct sigaction old_[3]{};
};

void RaiseSupervisorSignal(int sig);  // what the handler does; tests call it
int PendingSupervisorSignal();        // the last signal not yet taken, 0 = none
int TakeSupervisorSignal();           // the same, and clears it
void ClearSupervisorSignal();

}  // namespace tern::run
