// tern diagnose RUN_DIR [--json] [--calibration bench.json]: the diagnosis rules of report/diagnose.h over a
// run's records, the findings ranked by $ cost, each with its evidence and fix (docs/report.md, "Diagnosis").
// tern diagnose --serve URL|FILE [--since FILE | --window DURATION] [--save FILE]: the serving rules of
// report/serve_diagnose.h over tern serve's /metrics, since the server started or over a window.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/file_util.h"
#include "plan/catalog.h"
#include "plan/defaults.h"
#include "plan/units.h"
#include "report/diagnose.h"
#include "report/run_input.h"
#include "report/serve_diagnose.h"

namespace tern::cli {
namespace {

struct DiagnoseCliOptions {
  std::string run_dir, calibration;
  bool json = false;
  report::DiagnoseOptions rules;
  std::string serve, api_key;       // --serve URL|FILE; the key /metrics needs (else $TERN_API_KEY)
  std::string since, window, save;  // an earlier scrape; a wait between two scrapes; where to keep the scrape
  report::ServeDiagnoseOptions serve_rules;
};

bool IsUrl(const std::string& s) {
  return s.rfind("http://", 0) == 0 || s.rfind("https://", 0) == 0;
}

// The /metrics text of a server (http://HOST:PORT) or a file holding a scrape of it.
Result<std::string> ReadMetricsText(const std::string& source, const std::string& api_key) {
  if (IsUrl(source)) {
    std::string base = source;
    if (base.size() > 8 && base.substr(base.size() - 8) == "/metrics") base.resize(base.size() - 8);
    while (!base.empty() && base.back() == '/') base.pop_back();
    httplib::Client client(base);
    client.set_connection_timeout(5, 0);
    client.set_read_timeout(30, 0);
    httplib::Headers headers;
    const char* env = std::getenv("TERN_API_KEY");
    const std::string key = !api_key.empty() ? api_key : env ? env : "";
    if (!key.empty()) headers.emplace("Authorization", "Bearer " + key);
    auto r = client.Get("/metrics", headers);
    if (!r)
      return Status::Unavailable(
          fmt::format("cannot reach {}/metrics: {}", base, httplib::to_string(r.error())));
    if (r->status == 401)
      return Status::InvalidArgument(
          fmt::format("{}/metrics needs an API key: --api-key KEY or $TERN_API_KEY", base));
    if (r->status != 200) return Status::Unavailable(fmt::format("{}/metrics answered {}", base, r->status));
    return r->body;
  }
  std::ifstream in(source);
  if (!in)
    return Status::NotFound(
        fmt::format("cannot read {} (a URL http://HOST:PORT or a file of tern serve's "
                    "/metrics, e.g. curl -s HOST:PORT/metrics > m.txt)",
                    source));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A scrape read and checked to be tern serve's.
Result<report::PromMetrics> ReadScrape(const std::string& source, const std::string& api_key,
                                       std::string* text_out = nullptr) {
  auto text = ReadMetricsText(source, api_key);
  if (!text.ok()) return text.status();
  auto samples = report::ParsePromText(*text);
  if (!samples.ok()) return Status::InvalidArgument(source + ": " + samples.status().message());
  report::PromMetrics metrics(std::move(*samples));
  if (!metrics.Has("tern_busy_seconds_total"))
    return Status::InvalidArgument(source + " is not tern serve's /metrics (no tern_busy_seconds_total)");
  if (text_out) *text_out = std::move(*text);
  return metrics;
}

int RunServeDiagnose(const DiagnoseCliOptions& o) {
  auto fail = [](const Status& st) {
    std::fprintf(stderr, "tern diagnose: %s\n", st.message().c_str());
    return 1;
  };
  if (!o.since.empty() && !o.window.empty())
    return fail(
        Status::InvalidArgument("--since and --window both set: give one (an earlier scrape, or a wait)"));
  std::optional<report::PromMetrics> before;
  std::string source = o.serve;
  if (!o.since.empty()) {
    auto b = ReadScrape(o.since, o.api_key);
    if (!b.ok()) return fail(b.status());
    before = std::move(*b);
    source = o.serve + " since " + o.since;
  } else if (!o.window.empty()) {
    if (!IsUrl(o.serve))
      return fail(Status::InvalidArgument(
          "--window needs a live server (--serve http://HOST:PORT); for two saved scrapes use --since OLD"));
    auto hours = plan::ParseDurationHours(o.window, "--window");
    if (!hours.ok()) return fail(hours.status());
    auto b = ReadScrape(o.serve, o.api_key);
    if (!b.ok()) return fail(b.status());
    before = std::move(*b);
    std::fprintf(stderr, "tern diagnose: read %s; reading it again in %s (Ctrl-C to stop)\n", o.serve.c_str(),
                 o.window.c_str());
    std::this_thread::sleep_for(std::chrono::duration<double>(*hours * 3600));
    source = o.serve + " over " + o.window;
  }
  std::string text;
  auto now = ReadScrape(o.serve, o.api_key, &text);
  if (!now.ok()) return fail(now.status());
  if (!o.save.empty())
    if (Status st = WriteFileAtomic(o.save, text); !st.ok()) return fail(st);
  report::PromMetrics metrics = std::move(*now);
  if (before) {
    report::PromWindow window = report::PromSince(metrics, *before);
    metrics = std::move(window.metrics);
    if (!window.restart.empty()) {
      source += " (the server restarted in between: its life since the restart)";
      std::fprintf(
          stderr,
          "tern diagnose: the server restarted between the two scrapes (%s): diagnosing its life since "
          "the restart; the time before it is in neither scrape\n",
          window.restart.c_str());
    }
  }
  const report::ServeSummary summary = report::SummarizeServe(metrics);
  std::optional<plan::Catalog> catalog;
  if (auto dir = plan::FindCatalogDir(); dir.ok())
    if (auto c = plan::LoadCatalog(plan::ShippedCatalogFiles(*dir), plan::PlanDefaults{}); c.ok())
      catalog = std::move(*c);
  const auto findings = report::DiagnoseServe(summary, o.serve_rules, catalog ? &*catalog : nullptr);
  if (o.json) {
    nlohmann::json j = {{"source", source},
                        {"summary", report::ServeSummaryJson(summary)},
                        {"findings", nlohmann::json::array()}};
    for (const auto& f : findings) j["findings"].push_back(report::ToJson(f));
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::fputs(report::FormatServeFindings(source, summary, findings).c_str(), stdout);
  }
  return 0;
}

int RunDiagnose(const DiagnoseCliOptions& o) {
  if (!o.serve.empty()) return RunServeDiagnose(o);
  if (o.run_dir.empty()) {
    std::fprintf(stderr, "tern diagnose: give a RUN_DIR, or --serve URL|FILE for a server\n");
    return 1;
  }
  auto in = report::LoadRunInput(o.run_dir, o.calibration);
  if (!in.ok()) {
    std::fprintf(stderr, "tern diagnose: %s\n", in.status().message().c_str());
    return 1;
  }
  auto findings = report::Diagnose(*in, o.rules);
  if (o.json) {
    nlohmann::json j = {{"run_dir", o.run_dir},
                        {"steps", in->steps.size()},
                        {"price_per_hour", in->start ? in->start->price_per_hour : 0.0},
                        {"findings", nlohmann::json::array()}};
    for (const auto& f : findings) j["findings"].push_back(report::ToJson(f));
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::fputs(report::FormatFindings(*in, findings).c_str(), stdout);
  }
  return 0;
}

}  // namespace

void AddDiagnoseCommand(CLI::App& root, CommandTable& table) {
  auto o = std::make_shared<DiagnoseCliOptions>();
  auto* sub =
      root.add_subcommand("diagnose", "What slowed a run or cost it money, with the fix (findings by $)");
  auto* run_dir =
      sub->add_option("run_dir", o->run_dir, "the run directory (run.dir: metrics.jsonl, summary.json)");
  sub->add_option(
         "--serve", o->serve,
         "diagnose a tern serve instead: its URL (http://HOST:PORT, /metrics is read) or a file of its "
         "/metrics text; idle time, refusals, cancellations, preemptions, drafts and a cheaper instance "
         "for the load it saw")
      ->excludes(run_dir);
  sub->add_option("--api-key", o->api_key, "with --serve URL: the server's API key (default $TERN_API_KEY)");
  sub->add_option(
      "--since", o->since,
      "with --serve: an earlier scrape of the same server (a file, e.g. from --save): diagnose what "
      "happened between it and now, not since the server started");
  sub->add_option(
      "--window", o->window,
      "with --serve URL: read /metrics, wait this long (30s, 15m, 1h), read it again and diagnose "
      "that window");
  sub->add_option("--save", o->save,
                  "with --serve: also write the (latest) scrape to this file, for a later --since");
  sub->add_flag("--json", o->json,
                "the findings as JSON: rule, evidence, numbers, step_fraction, usd_per_hour, fix");
  sub->add_option("--calibration", o->calibration,
                  "a `tern bench --json` file: compare the run's MFU with the bench's (rule low_mfu)");
  sub->add_option("--data-wait", o->rules.data_wait_fraction, "data_bound threshold, fraction of step time");
  sub->add_option("--ckpt-stall", o->rules.ckpt_stall_fraction,
                  "checkpoint_stall threshold, fraction of time");
  sub->add_option("--comm", o->rules.comm_fraction, "exposed_comm threshold, fraction of step time");
  sub->add_option("--spike-factor", o->rules.spike_factor, "loss_spike: loss over this x the running median");
  sub->add_option("--forget-rise", o->rules.forget_rise,
                  "forgetting: a data.mix dataset's val loss this fraction above its best");
  sub->footer("\n" + report::RulesHelp(o->rules) + "\n" + report::ServeRulesHelp(o->serve_rules) +
              "\nA rule that does not apply prints nothing. Rules, thresholds and sources: docs/report.md.\n"
              "Example: tern diagnose runs/demo --calibration bench.json\n"
              "         tern diagnose --serve http://127.0.0.1:8080\n"
              "         tern diagnose --serve http://127.0.0.1:8080 --window 15m     # the last 15 minutes\n"
              "         tern diagnose --serve URL --since monday.prom --save today.prom\n");
  table.Add(sub, [o] { return RunDiagnose(*o); });
}

}  // namespace tern::cli
