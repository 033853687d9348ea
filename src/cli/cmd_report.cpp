// tern report RUN_DIR [RUN_DIR ...] [--out report.html] [--json]
// tern report --ledger [FILE] [--since 30d] [--out finops.html] [--json]
// One self-contained HTML page (charts, cost table, A/B comparison) of one run or several, or the FinOps page
// of every job in the ledger; --json: the same numbers for machines. src/report/ does the work.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli/command.h"
#include "report/diagnose.h"
#include "report/finops.h"
#include "report/html.h"
#include "report/run_data.h"
#include "report/run_input.h"
#include "run/clock.h"
#include "run/ledger.h"

namespace tern::cli {
namespace {

struct ReportOptions {
  std::vector<std::string> dirs;
  std::string out;  // default report.html, or finops.html with --ledger
  bool json = false;
  bool ledger = false;               // --ledger given
  std::string ledger_file;           // its value; "" = $TERN_HOME/ledger.sqlite, as `tern job ls`
  std::vector<std::string> serving;  // --serving: `tern serve --usage-file` files
  std::string since = "30d";
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
Diagnoses DiagnoseRuns(const std::vector<std::string>& dirs, const std::vector<std::vector<RunRow>>& rows) {
  Diagnoses d;
  for (size_t i = 0; i < dirs.size(); ++i) {
    const std::string& dir = dirs[i];
    nlohmann::json run = {{"run_dir", dir}, {"findings", nlohmann::json::array()}};
    d.html += "<h3>" + Escape(dir) + "</h3>";
    auto input = report::LoadRunInput(dir, "", &rows[i]);
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

// Writes `page` to `out` through a temporary file (a reader never sees half a page).
int WritePage(const std::string& page, const std::string& out, const std::string& what) {
  const std::string tmp = out + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << page;
    if (!f.good()) {
      std::fprintf(stderr, "tern report: cannot write %s (is the directory there and writable?)\n",
                   tmp.c_str());
      return 1;
    }
  }
  if (std::rename(tmp.c_str(), out.c_str()) != 0) {
    std::fprintf(stderr, "tern report: cannot rename %s to %s\n", tmp.c_str(), out.c_str());
    return 1;
  }
  std::fprintf(stderr, "tern report: wrote %s (%.2f MB, %s); open it in a browser (works offline)\n",
               out.c_str(), static_cast<double>(page.size()) / 1e6, what.c_str());
  return 0;
}

int RunFinOps(const ReportOptions& o) {
  if (!o.dirs.empty()) {
    std::fprintf(stderr,
                 "tern report: --ledger reads every job of the ledger; give no run directory with it\n");
    return 2;
  }
  auto back = report::ParseSince(o.since);
  if (!back.ok()) {
    std::fprintf(stderr, "tern report: %s\n", back.status().message().c_str());
    return 2;
  }
  const double now = run::RealClock().Now();
  const std::string path = o.ledger_file.empty() ? run::DefaultLedgerPath() : o.ledger_file;
  const double since = *back > 0 ? now - *back : 0;
  // Serving usage alone (no job ever run through `tern run`) still makes a page.
  auto f = !o.serving.empty() && !std::filesystem::exists(path)
               ? Result<report::FinOps>(report::ComputeFinOps({}, since, now))
               : report::LoadFinOps(path, since, now);
  if (!f.ok()) {
    std::fprintf(stderr, "tern report: %s\n", f.status().message().c_str());
    return 1;
  }
  for (const std::string& file : o.serving) {
    auto u = report::LoadServingUsage(file);
    if (!u.ok()) {
      std::fprintf(stderr, "tern report: %s\n", u.status().message().c_str());
      return 1;
    }
    f->serving.push_back(std::move(*u));
  }
  if (o.json) {
    std::printf("%s\n", report::FinOpsJson(*f).dump(2).c_str());
    return 0;
  }
  auto chartjs = report::ReadChartJs();
  if (!chartjs.ok()) {
    std::fprintf(stderr, "tern report: %s\n", chartjs.status().message().c_str());
    return 1;
  }
  return WritePage(report::FinOpsHtml(*f, chartjs.value()), o.out.empty() ? "finops.html" : o.out,
                   fmt::format("{} job{} since {}", f->jobs, f->jobs == 1 ? "" : "s", o.since));
}

int RunReport(const ReportOptions& o) {
  if (o.ledger || !o.serving.empty()) return RunFinOps(o);
  if (o.dirs.empty()) {
    std::fprintf(stderr, "tern report: give one or more run directories, or --ledger for the FinOps page\n");
    return 2;
  }
  // Each metrics.jsonl is read once, for the page and the diagnosis (on a long run, reading is most of it).
  std::vector<report::RunData> runs;
  std::vector<std::vector<RunRow>> rows;
  for (const auto& d : o.dirs) {
    auto read = ReadMetricsFile(d + "/metrics.jsonl");
    auto r = read.ok() ? report::LoadRunFromRows(d, *read) : report::LoadRun(d);  // LoadRun: its message
    if (!r.ok()) {
      std::fprintf(stderr, "tern report: %s\n", r.status().message().c_str());
      return 1;
    }
    runs.push_back(std::move(r).value());
    rows.push_back(std::move(read).value());
  }
  const Diagnoses diagnoses = DiagnoseRuns(o.dirs, rows);
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
  return WritePage(page, o.out.empty() ? "report.html" : o.out,
                   fmt::format("{} run{}", runs.size(), runs.size() == 1 ? "" : "s"));
}

}  // namespace

void AddReportCommand(CLI::App& root, CommandTable& table) {
  auto opts = std::make_shared<ReportOptions>();
  CLI::App* sub =
      root.add_subcommand("report", "One offline HTML page of a run, or several compared (A/B in $); FinOps");
  sub->footer(
      "\nThe page: loss against step, tokens, wall time or dollars; throughput and MFU; the step-time "
      "breakdown; LR and grad norm; GPU metrics; checkpoints, preemptions and resumes marked, attempts "
      "stitched (lost work shaded); a cost table with $ per 1M tokens and $ to reach a validation loss.\n\n"
      "  tern report runs/demo                          # -> report.html, opens offline\n"
      "  tern report runs/fp32 runs/bf16 --out ab.html  # A/B: curves overlaid on $, config diff, ratios\n"
      "  tern report runs/fp32 runs/bf16 --json         # the same numbers as JSON\n\n"
      "  tern report --ledger --since 30d               # FinOps: every job's spend by day and project\n\n"
      "Run with --price-per-hour (tern train) or under `tern run` for the dollar axis. docs/report.md.");
  sub->add_option("run_dirs", opts->dirs, "run directories (each with metrics.jsonl); two or more compare")
      ->check(CLI::ExistingDirectory);
  sub->add_option("--out,-o", opts->out,
                  "the HTML file to write (default report.html; finops.html with --ledger)");
  sub->add_flag("--json", opts->json, "print per-run summaries and the comparison as JSON instead");
  sub->add_option_function<std::vector<std::string>>(
         "--ledger",
         [opts](const std::vector<std::string>& v) {
           opts->ledger = true;
           if (!v.empty()) opts->ledger_file = v.back();
         },
         "the FinOps page of every job in the ledger: $TERN_HOME/ledger.sqlite (default ~/.tern/), as "
         "`tern job ls`, or the FILE given")
      ->expected(0, 1)
      ->type_name("[FILE]");
  sub->add_option("--since", opts->since, "with --ledger: the window back from now (30d, 12h, all)")
      ->capture_default_str();
  sub->add_option(
      "--serving", opts->serving,
      "with --ledger: `tern serve --usage-file` files, shown as the serving section (repeatable)");
  table.Add(sub, [opts] { return RunReport(*opts); });
}

}  // namespace tern::cli
