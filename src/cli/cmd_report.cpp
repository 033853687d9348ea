// tern report RUN_DIR [RUN_DIR ...] [--out report.html] [--json]
// One self-contained HTML page (charts, cost table, A/B comparison) of one run or several; --json: the same
// numbers for machines. src/report/ does the work.
#include <cstdio>
#include <fstream>

#include "cli/command.h"
#include "report/diagnose.h"
#include "report/html.h"
#include "report/run_data.h"
#include "report/run_input.h"

namespace tern::cli {
namespace {

struct ReportOptions {
  std::vector<std::string> dirs;
  std::string out = "report.html";
  bool json = false;
};

std::string Escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

// The findings of `tern diagnose` for each run, as the page's Diagnosis section and as JSON.
struct Diagnoses {
  std::string html;
  nlohmann::json json = nlohmann::json::array();
};
Diagnoses DiagnoseRuns(const std::vector<std::string>& dirs) {
  Diagnoses d;
  for (const auto& dir : dirs) {
    nlohmann::json run = {{"run_dir", dir}, {"findings", nlohmann::json::array()}};
    d.html += "<h3>" + Escape(dir) + "</h3>";
    auto input = report::LoadRunInput(dir, "");
    if (!input.ok()) {
      d.html += "<p>cannot diagnose: " + Escape(input.status().message()) + "</p>";
      run["error"] = input.status().message();
      d.json.push_back(run);
      continue;
    }
    const std::vector<report::Finding> findings = report::Diagnose(*input, report::DiagnoseOptions{});
    if (findings.empty())
      d.html += "<p>No finding: none of the rules applies (docs/report.md lists them).</p>";
    d.html += "<ul>";
    for (const report::Finding& f : findings) {
      d.html += fmt::format("<li data-rule=\"{}\"><b>{}</b>: {} <i>Fix:</i> <code>{}</code>{}</li>", f.rule,
                            Escape(f.title), Escape(f.evidence), Escape(f.fix),
                            f.usd_per_hour > 0 ? fmt::format(" (${:.2f}/h)", f.usd_per_hour) : "");
      run["findings"].push_back(report::ToJson(f));
    }
    d.html += "</ul>";
    d.json.push_back(run);
  }
  return d;
}

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
  const Diagnoses diagnoses = DiagnoseRuns(o.dirs);
  if (o.json) {
    nlohmann::json j = report::ReportJson(runs, /*with_series=*/false);
    j["diagnosis"] = diagnoses.json;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  auto chartjs = report::ReadChartJs();
  if (!chartjs.ok()) {
    std::fprintf(stderr, "tern report: %s\n", chartjs.status().message().c_str());
    return 1;
  }
  const std::string page = report::RenderHtml(runs, chartjs.value(), diagnoses.html);
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
