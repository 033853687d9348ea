#include "run/signals.h"

#include <atomic>

namespace tern::run {
namespace {

std::atomic<int> g_signal{0};
constexpr int kSignals[3] = {SIGTERM, SIGUSR1, SIGINT};

extern "C" void OnSupervisorSignal(int sig) {
  g_signal.store(sig);
}

}  // namespace

SupervisorSignals::SupervisorSignals(bool enabled) : enabled_(enabled) {
  if (!enabled_) return;
  struct sigaction sa {};
  sa.sa_handler = OnSupervisorSignal;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < 3; i++) sigaction(kSignals[i], &sa, &old_[i]);
}

SupervisorSignals::~SupervisorSignals() {
  if (!enabled_) return;
  for (int i = 0; i < 3; i++) sigaction(kSignals[i], &old_[i], nullptr);
}

void RaiseSupervisorSignal(int sig) {
  g_signal.store(sig);
}
int PendingSupervisorSignal() {
  return g_signal.load();
}
int TakeSupervisorSignal() {
  return g_signal.exchange(0);
}
void ClearSupervisorSignal() {
  g_signal.store(0);
}

}  // namespace tern::run
