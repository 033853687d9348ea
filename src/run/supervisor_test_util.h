// Test-only: the fixture of the supervisor tests. A run directory in a temp dir, a job spec with short
// timings, and fake trainers: shell scripts whose helpers append metrics rows as `tern train` does.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "run/supervisor.h"
#include "testing/files.h"

namespace tern::run {

class SupervisorTest : public ::testing::Test {
 protected:
  static constexpr double kPrice = 36;  // $/h: a cent a second

  void SetUp() override {
    dir_ = tmp_.path();
    spec_.config_path = (dir_ / "train.yaml").string();
    spec_.run_dir = (dir_ / "run").string();
    spec_.price_per_hour = kPrice;
    spec_.billing = "custom";
    spec_.heartbeat_s = 0;
    spec_.kill_grace_s = 5;
    spec_.backoff_s = 0.01;
    spec_.backoff_max_s = 0.05;
    ledger_path_ = (dir_ / "home/ledger.sqlite").string();
  }

  // A fake trainer: `body` runs after these helpers (DIR = the run directory, M = its metrics.jsonl):
  //   row N          a step row for step N (128 tokens a step, 10 ms)
  //   resume N       a resume row: resumed from the checkpoint of step N
  //   preempted N    the row of an emergency save (2 ms) at step N
  //   args           the arguments it was given, one a line
  std::vector<std::string> Script(const std::string& body) {
    const std::string path = (dir_ / "trainer.sh").string();
    std::ofstream(path) << "#!/bin/sh\nDIR='" << spec_.run_dir << "'\nM=\"$DIR/metrics.jsonl\"\n"
                        << "row() { echo \"{\\\"step\\\":$1,\\\"loss\\\":1.5,\\\"tokens\\\":$(($1 * 128)),"
                           "\\\"step_ms\\\":10,\\\"elapsed_s\\\":0.5}\" >> \"$M\"; }\n"
                        << "resume() { echo \"{\\\"event\\\":\\\"resume\\\",\\\"step\\\":$1}\" >> \"$M\"; }\n"
                        << "preempted() { echo \"{\\\"event\\\":\\\"preempted\\\",\\\"step\\\":$1,"
                           "\\\"save_s\\\":0.002}\" >> \"$M\"; }\n"
                        << "ARGS=\"$*\"\nargs() { echo \"$ARGS\"; }\n"
                        << body << "\n";
    ::chmod(path.c_str(), 0755);
    trainer_ = {path};
    return trainer_;
  }

  // Runs a supervisor on spec_ with `trainer` (default: the last Script), on `clock` (default: real).
  Result<JobOutcome> Supervise(const std::vector<std::string>& trainer = {}, Clock* clock = nullptr) {
    SupervisorOptions o;
    o.spec = spec_;
    o.trainer = trainer.empty() ? trainer_ : trainer;
    o.ledger_path = ledger_path_;
    o.poll_s = clock ? 0.1 : 0.02;
    o.handle_signals = false;
    const std::string console_path = (dir_ / "console.txt").string();
    std::FILE* console = std::fopen(console_path.c_str(), "w");
    o.console = console;
    RealClock real;
    LocalLauncher launcher;
    Supervisor s(o, clock ? clock : &real, &launcher);
    Result<JobOutcome> out = s.Run();
    std::fclose(console);
    console_ = testing::ReadFile(console_path);
    return out;
  }

  // Waits (real time, at most 30 s) until metrics.jsonl has `n` lines.
  void WaitForRows(size_t n) {
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30)) {
      std::ifstream in(spec_.run_dir + "/metrics.jsonl");
      size_t lines = 0;
      for (std::string l; std::getline(in, l);) lines++;
      if (lines >= n) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ADD_FAILURE() << "metrics.jsonl never got " << n << " rows";
  }

  testing::TempDir tmp_;
  std::filesystem::path dir_;
  JobSpec spec_;
  std::string ledger_path_;
  std::vector<std::string> trainer_;
  std::string console_;
};

}  // namespace tern::run
