#include "core/progress.h"

#include <unistd.h>

#include <fmt/format.h>

namespace tern {

ProgressBar::ProgressBar(std::string label, uint64_t total, std::string unit, FILE* out)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total), out_(out) {
  tty_ = out_ && ::isatty(::fileno(out_));
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

ProgressBar::~ProgressBar() {
  if (!finished_ && done_ > 0) Finish();
}

std::string ProgressBar::FormatDuration(double s) {
  if (!(s >= 0) || s > 1e8) return "?";
  long t = static_cast<long>(s + 0.5);
  if (t >= 3600) return fmt::format("{}:{:02}:{:02}", t / 3600, (t / 60) % 60, t % 60);
  return fmt::format("{}:{:02}", t / 60, t % 60);
}

std::string ProgressBar::FormatAmount(double v, const std::string& unit) {
  if (unit == "B") {
    const char* units[] = {"B", "KB", "MB", "GB", "TB"};
    int i = 0;
    while (v >= 1000 && i < 4) {
      v /= 1000;
      i++;
    }
    return fmt::format("{:.1f} {}", v, units[i]);
  }
  if (v >= 1e6) return fmt::format("{:.2f}M {}", v / 1e6, unit);
  if (v >= 1e4) return fmt::format("{:.1f}k {}", v / 1e3, unit);
  if (v < 10) return fmt::format("{:.2f} {}", v, unit);
  return fmt::format("{:.0f} {}", v, unit);
}

void ProgressBar::Update(uint64_t done, const std::string& extra) {
  done_ = done;
  extra_ = extra;
  auto now = std::chrono::steady_clock::now();
  double since = std::chrono::duration<double>(now - last_draw_).count();
  if (since < (tty_ ? 0.1 : 5.0)) return;
  last_draw_ = now;
  Draw(false);
}

void ProgressBar::Print(const std::string& line) {
  if (!out_) return;
  if (tty_) {
    std::fprintf(out_, "\r\033[K%s\n", line.c_str());
    if (!finished_ && done_ > 0) Draw(false);
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

void ProgressBar::Finish(const std::string& extra) {
  if (finished_) return;
  if (!extra.empty()) extra_ = extra;
  if (total_) done_ = std::max(done_, total_);
  finished_ = true;
  Draw(true);
}

void ProgressBar::Draw(bool final) {
  if (!out_) return;
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double rate = elapsed > 0 ? done_ / elapsed : 0;
  std::string line = label_;
  if (total_) {
    double frac = std::min(1.0, static_cast<double>(done_) / total_);
    int filled = static_cast<int>(frac * 24);
    line +=
        fmt::format(" [{}{}] {:3.0f}%", std::string(filled, '#'), std::string(24 - filled, '.'), frac * 100);
  } else {
    line += " " + FormatAmount(done_, unit_);
  }
  line += fmt::format(" {}/s", FormatAmount(rate, unit_));
  if (final) {
    line += " in " + FormatDuration(elapsed);
  } else if (total_ && rate > 0) {
    line += " ETA " + FormatDuration((total_ - std::min(done_, total_)) / rate);
  }
  if (!extra_.empty()) line += " | " + extra_;
  if (tty_) {
    std::fprintf(out_, "\r\033[K%s%s", line.c_str(), final ? "\n" : "");
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

}  // namespace tern
