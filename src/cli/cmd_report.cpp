// tern report RUN_DIR [RUN_DIR ...] [--out report.html] [--json]
// One self-contained HTML page (charts, cost table, A/B comparison) of one run or several; --json: the same
// numbers for machines. src/report/ does the work.
#include <cstdio>
#include <fstream>

#include "cli/command.h"
#include "report/html.h"
#include "report/run_data.h"

namespace tern::cli {
namespace {

struct ReportOptions {
  std::vector<std::string> dirs;
  std::string out = "report.html";
  bool json = false;
};

int RunReport(const ReportOptions& o) {
  std::vector<report::RunData> runs;
  for (const auto& d : o.dirs) {
    auto r = report::LoadRun(d);
    if (!r.ok()) {
      std::fprintf(stderr, "tern report: %s\n", r.status().message().c_str());
      return 1;
    }
    runs.push_back(std::move(r).value());
  }
  if (o.json) {
    std::printf("%s\n", report::ReportJson(runs, /*with_series=*/false).dump(2).c_str());
    return 0;
  }
  auto chartjs = report::ReadChartJs();
  if (!chartjs.ok()) {
    std::fprintf(stderr, "tern report: %s\n", chartjs.status().message().c_str());
    return 1;
  }
  const std::string page = report::RenderHtml(runs, chartjs.value());
  const std::string tmp = o.out + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << page;
    if (!f.good()) {
      std::fprintf(stderr, "tern report: cannot write %s (is the directory there and writable?)\n",
                   tmp.c_str());
      return 1;
    }
  }
  if (std::rename(tmp.c_str(), o.out.c_str()) != 0) {
    std::fprintf(stderr, "tern report: cannot rename %s to %s\n", tmp.c_str(), o.out.c_str());
    return 1;
  }
  std::fprintf(stderr, "tern report: wrote %s (%.2f MB, %zu run%s); open it in a browser (works offline)\n",
               o.out.c_str(), static_cast<double>(page.size()) / 1e6, runs.size(),
               runs.size() == 1 ? "" : "s");
  return 0;
}

}  // namespace

void AddReportCommand(CLI::App& root, CommandTable& table) {
  auto opts = std::make_shared<ReportOptions>();
  CLI::App* sub = root.add_subcommand(
      "report",
      "One HTML page of a run, or several compared: loss against step, tokens, wall time or dollars; "
      "throughput and MFU; the step-time breakdown; LR and grad norm; GPU metrics; checkpoints, "
      "preemptions and resumes marked, attempts stitched (lost work shaded); a cost table with $ per 1M "
      "tokens and $ to reach a validation loss.\n\n"
      "  tern report runs/demo                          # -> report.html, opens offline\n"
      "  tern report runs/fp32 runs/bf16 --out ab.html  # A/B: curves overlaid on $, config diff, ratios\n"
      "  tern report runs/fp32 runs/bf16 --json         # the same numbers as JSON\n\n"
      "Run with --price-per-hour (tern train) or under `tern run` for the dollar axis. docs/report.md.");
  sub->add_option("run_dirs", opts->dirs, "run directories (each with metrics.jsonl); two or more compare")
      ->required()
      ->check(CLI::ExistingDirectory);
  sub->add_option("--out,-o", opts->out, "the HTML file to write")->capture_default_str();
  sub->add_flag("--json", opts->json, "print per-run summaries and the comparison as JSON instead");
  table.Add(sub, [opts] { return RunReport(*opts); });
}

}  // namespace tern::cli
