// The progress bar: the amounts and durations it prints, the lines it writes to a file and to a terminal
// (a pseudo-terminal here), and that quiet mode (no stream) writes nothing.
#include "core/progress.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <pty.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <regex>
#include <string>
#include <thread>

namespace tern {
namespace {

// What was written to `f` (a tmpfile) so far.
std::string Contents(FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, f)) out.append(buf, n);
  return out;
}

void ExpectMatch(const std::string& text, const std::string& pattern) {
  EXPECT_TRUE(std::regex_match(text, std::regex(pattern))) << "got:  " << text << "\nwant: " << pattern;
}

TEST(ProgressBar, FormatDuration) {
  EXPECT_EQ(ProgressBar::FormatDuration(0), "0:00");
  EXPECT_EQ(ProgressBar::FormatDuration(4.4), "0:04");
  EXPECT_EQ(ProgressBar::FormatDuration(4.6), "0:05");
  EXPECT_EQ(ProgressBar::FormatDuration(65), "1:05");
  EXPECT_EQ(ProgressBar::FormatDuration(3599), "59:59");
  EXPECT_EQ(ProgressBar::FormatDuration(3723), "1:02:03");
  EXPECT_EQ(ProgressBar::FormatDuration(-1), "?");
  EXPECT_EQ(ProgressBar::FormatDuration(0.0 / 0.0), "?");
  EXPECT_EQ(ProgressBar::FormatDuration(1e9), "?");
}

TEST(ProgressBar, FormatAmount) {
  EXPECT_EQ(ProgressBar::FormatAmount(0, "B"), "0.0 B");
  EXPECT_EQ(ProgressBar::FormatAmount(999, "B"), "999.0 B");
  EXPECT_EQ(ProgressBar::FormatAmount(1234567, "B"), "1.2 MB");
  EXPECT_EQ(ProgressBar::FormatAmount(3.5e12, "B"), "3.5 TB");
  EXPECT_EQ(ProgressBar::FormatAmount(2e15, "B"), "2000.0 TB") << "TB is the largest unit";
  EXPECT_EQ(ProgressBar::FormatAmount(5, "tok"), "5.00 tok");
  EXPECT_EQ(ProgressBar::FormatAmount(50, "tok"), "50 tok");
  EXPECT_EQ(ProgressBar::FormatAmount(9999, "tok"), "9999 tok");
  EXPECT_EQ(ProgressBar::FormatAmount(12345, "tok"), "12.3k tok");
  EXPECT_EQ(ProgressBar::FormatAmount(2.5e6, "tok/s"), "2.50M tok/s");
}

// On a file: no redraws, Update draws at most every 5 s (so not here), Print writes its line, Finish writes
// the final state: a full bar, the rate, the elapsed time, the extra text.
TEST(ProgressBar, OnAFileWritesPlainLines) {
  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressBar bar("train", 40, "step", f);
    bar.Update(10, "loss 3.00");
    EXPECT_EQ(Contents(f), "") << "throttled on a file";
    bar.Print("step 10: val loss 2.90");
    EXPECT_EQ(Contents(f), "step 10: val loss 2.90\n");
    bar.Update(20, "loss 2.50");
    bar.Finish("loss 2.00");
    bar.Finish("again");  // once only
  }                       // the destructor does not finish twice
  const std::string all = Contents(f);
  ExpectMatch(all,
              "step 10: val loss 2\\.90\n"
              "train \\[#{24}\\] 100% [0-9.]+[kM]? step/s in 0:00 \\| loss 2\\.00\n");
  std::fclose(f);
}

TEST(ProgressBar, UnknownTotalShowsTheAmountAndNoBar) {
  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressBar bar("read", 0, "B", f);
    bar.Update(1500);
  }  // destroyed with progress made: it finishes itself
  ExpectMatch(Contents(f), "read 1\\.5 KB [0-9.]+ [KMGT]?B/s in 0:00\n");
  std::fclose(f);
  FILE* g = std::tmpfile();
  { ProgressBar idle("idle", 10, "step", g); }  // nothing done: nothing printed
  EXPECT_EQ(Contents(g), "");
  std::fclose(g);
}

// On a terminal the line is redrawn in place ("\r\033[K"), at most every 0.1 s, with an ETA while running.
TEST(ProgressBar, OnATerminalRedrawsInPlace) {
  int master = -1, slave = -1;
  ASSERT_EQ(::openpty(&master, &slave, nullptr, nullptr, nullptr), 0);
  FILE* tty = ::fdopen(slave, "w");
  ASSERT_NE(tty, nullptr);
  ::fcntl(master, F_SETFL, O_NONBLOCK);
  auto drain = [&] {
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = ::read(master, buf, sizeof buf)) > 0;) out.append(buf, n);
    return out;
  };
  {
    ProgressBar bar("train", 24, "step", tty);
    bar.Update(6);
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    bar.Update(12, "loss 1.50");
    bar.Print("a line above");
    bar.Finish();
  }
  std::fflush(tty);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  // The terminal turns "\n" into "\r\n" on output; undo that.
  const std::string raw = drain();
  std::string out;
  for (size_t i = 0; i < raw.size(); i++) {
    if (!(raw[i] == '\r' && i + 1 < raw.size() && raw[i + 1] == '\n')) out += raw[i];
  }
  // The second Update (the first came too soon after the start), the line Print writes after clearing the
  // bar, the bar redrawn, and Finish's final state.
  const std::string half =
      "\r\033\\[Ktrain \\[#{12}\\.{12}\\]  50% [0-9.]+[kM]? step/s ETA [0-9:]+ \\| loss 1\\.50";
  const std::string full = "\r\033\\[Ktrain \\[#{24}\\] 100% [0-9.]+[kM]? step/s in 0:00 \\| loss 1\\.50\n";
  ExpectMatch(out, half + "\r\033\\[Ka line above\n" + half + full);
  std::fclose(tty);
  ::close(master);
}

// Quiet mode (the trainer's --quiet passes no stream): every call is a no-op and nothing reaches stderr.
TEST(ProgressBar, QuietWritesNothing) {
  std::fflush(stderr);
  const int saved = ::dup(2);
  FILE* capture = std::tmpfile();
  ASSERT_NE(capture, nullptr);
  ::dup2(::fileno(capture), 2);
  {
    ProgressBar bar("train", 10, "step", nullptr);
    bar.Update(5, "loss 1");
    bar.Print("a line");
    bar.Finish("done");
  }
  {
    ProgressBar unfinished("train", 10, "step", nullptr);
    unfinished.Update(3);
  }
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  EXPECT_EQ(Contents(capture), "");
  std::fclose(capture);
}

}  // namespace
}  // namespace tern
