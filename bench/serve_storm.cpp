// The server under load (docs/serving-speed.md, "Under load"): storms of `--requests` requests at each of the
// `--concurrency` levels against a running `tern serve` (storm.h: a mix of well-formed and hostile
// clients). For each level it reads the server's RSS (/proc/PID/status) and /metrics before and after, waits
// until no sequence runs and no KV block is held, and prints one markdown row. Exit 1 when a storm broke the
// contract (an unanswered well-formed request, a 5xx other than 503, a wrong status, blocks or slots left).
//
//   serve_storm --port 18090 --api-key K --pid PID --requests 2000 --concurrency 64,256
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "serve/storm.h"

namespace {

bool Idle(std::map<std::string, double>& m) {
  return m.count("tern_running_sequences") && m["tern_running_sequences"] == 0 &&
         m["tern_queue_length"] == 0 && m["tern_kv_cache_blocks_used"] == 0 &&
         m["tern_kv_cache_blocks_reserved"] == 0;
}

}  // namespace

int main(int argc, char** argv) {
  tern::StormOptions o;
  std::vector<int> levels = {64, 256};
  int pid = 0, vocab = 259;
  CLI::App app{"storm a running tern serve and check its contract"};
  app.add_option("--port", o.port)->required();
  app.add_option("--api-key", o.api_key);
  app.add_option("--pid", pid, "the server's pid (for RSS)")->required();
  app.add_option("--requests", o.requests, "per concurrency level")->capture_default_str();
  app.add_option("--concurrency", levels)->delimiter(',')->capture_default_str();
  app.add_option("--max-tokens", o.max_tokens)->capture_default_str();
  app.add_option("--long-prompt", o.long_prompt_tokens)->capture_default_str();
  app.add_option("--vocab", vocab)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  o.vocab = vocab;
  bool all_ok = true;
  const long rss_start = tern::ProcessRssKb(pid);
  std::printf(
      "| requests | connections | s | well-formed | 200 | 429/503 | unanswered | other 5xx | wrong "
      "status | server codes (/metrics) | RSS before -> after (MiB) | idle after |\n|---|---|---|---|---|"
      "---|---|---|---|---|---|---|\n");
  for (int c : levels) {
    o.concurrency = c;
    auto before = tern::ScrapeMetrics(o);
    const long rss0 = tern::ProcessRssKb(pid);
    tern::StormReport r = tern::RunStorm(o);
    std::map<std::string, double> after;
    bool idle = false;
    for (int i = 0; i < 600 && !idle; i++) {  // up to 30 s
      after = tern::ScrapeMetrics(o);
      idle = Idle(after);
      if (!idle) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const long rss1 = tern::ProcessRssKb(pid);
    auto codes0 = tern::RequestsByCode(before), codes1 = tern::RequestsByCode(after);
    std::string codes;
    for (const auto& [code, n] : codes1) {
      const double d = n - codes0[code];
      if (d > 0) codes += fmt::format("{}{}: {:.0f}", codes.empty() ? "" : ", ", code, d);
      if (d > 0 && code >= 500 && code != 503) all_ok = false;
    }
    std::printf("| %d | %d | %.1f | %d | %d | %d | %d | %d | %d | %s | %.1f -> %.1f | %s |\n", r.requests, c,
                r.seconds, r.well_formed, r.ok, r.backpressure, r.unanswered, r.server_errors, r.wrong_status,
                codes.c_str(), rss0 / 1024.0, rss1 / 1024.0, idle ? "yes" : "NO");
    std::fflush(stdout);
    if (!r.Ok() || !idle) {
      all_ok = false;
      std::fprintf(stderr, "%s\n", r.Summary().c_str());
    }
  }
  std::printf("\nserver RSS: %.1f MiB at the start, %.1f MiB after all storms\n", rss_start / 1024.0,
              tern::ProcessRssKb(pid) / 1024.0);
  return all_ok ? 0 : 1;
}
