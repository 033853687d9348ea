// A progress line for long work: "label [#####.....] 52% 1.2 MB/s ETA 0:41 | extra".
// Redraws in place on a terminal; on a pipe or file it prints a plain line every few seconds.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace tern {

class ProgressBar {
 public:
  // total = 0 means unknown (no bar, no ETA). out = nullptr draws nothing. unit is printed after rates, e.g.
  // "B" formats as MB/s.
  ProgressBar(std::string label, uint64_t total, std::string unit, FILE* out = stderr);
  ~ProgressBar();

  // Sets the absolute progress; `extra` is appended to the line (e.g. "loss 3.21").
  void Update(uint64_t done, const std::string& extra = "");
  // Prints a whole line above the bar (clearing the bar first on a terminal, redrawing it after).
  void Print(const std::string& line);
  // Draws the final state and ends the line.
  void Finish(const std::string& extra = "");

  static std::string FormatDuration(double seconds);                       // "1:02:03" or "4:05"
  static std::string FormatAmount(double value, const std::string& unit);  // "1.2 MB", "3.4k tok"

 private:
  void Draw(bool final);
  std::string label_, unit_, extra_;
  uint64_t total_, done_ = 0;
  FILE* out_;
  bool tty_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace tern
