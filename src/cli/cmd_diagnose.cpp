// tern diagnose RUN_DIR [--json] [--calibration bench.json]: the diagnosis rules of report/diagnose.h over a
// run's records, the findings ranked by $ cost, each with its evidence and fix (docs/report.md, "Diagnosis").
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "report/diagnose.h"
#include "report/run_input.h"

namespace tern::cli {
namespace {

struct DiagnoseCliOptions {
  std::string run_dir, calibration;
  bool json = false;
  report::DiagnoseOptions rules;
};

int RunDiagnose(const DiagnoseCliOptions& o) {
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
  sub->add_option("run_dir", o->run_dir, "the run directory (run.dir: metrics.jsonl, summary.json)")
      ->required();
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
  sub->footer("\n" + report::RulesHelp(o->rules) +
              "\nA rule that does not apply prints nothing. Rules, thresholds and sources: docs/report.md.\n"
              "Example: tern diagnose runs/demo --calibration bench.json\n");
  table.Add(sub, [o] { return RunDiagnose(*o); });
}

}  // namespace tern::cli
