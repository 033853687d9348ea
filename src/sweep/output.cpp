#include "sweep/output.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/file_util.h"
#include "metrics/run_record.h"
#include "report/html.h"
#include "train/train_config.h"

namespace tern::sweep {
namespace {

using nlohmann::json;

std::string ParamsText(const TrialRow& t) {
  std::string s;
  for (const auto& [k, v] : t.params) s += (s.empty() ? "" : " ") + k + "=" + v;
  return s;
}

// The trial's (cost, objective) at each evaluation: the step rows carry the job's cost so far.
json LossVsDollars(const TrialRow& t, Objective objective) {
  json pts = json::array();
  auto rows = ReadMetricsFile(t.run_dir + "/metrics.jsonl");
  if (!rows.ok()) return pts;
  std::map<int, double> cost_at;
  for (const RunRow& r : *rows)
    if (const auto* s = std::get_if<StepRecord>(&r.record); s && s->cost_usd) cost_at[s->step] = *s->cost_usd;
  for (const RunRow& r : *rows)
    if (const auto* e = std::get_if<EvalRecord>(&r.record); e && cost_at.count(e->step)) {
      if (const std::optional<double> y = ObjectiveOf(*e, objective))
        pts.push_back({{"x", cost_at[e->step]}, {"y", *y}, {"step", e->step}});
    }
  return pts;
}

// Cents where they matter; small amounts (a few steps on a cheap instance) with six decimals.
std::string Dollars(double usd) {
  return usd >= 0.01 ? fmt::format("{:.4f}", usd) : fmt::format("{:.6f}", usd);
}

// Trial t's value on axis p: a parameter (a choice by its index, a log-uniform one as its log), or the loss
// at the trial's highest rung after the last parameter.
double AxisValue(const SweepSpec& spec, const TrialRow& t, size_t p) {
  if (p == spec.space.size()) return t.losses.empty() ? 0 : t.losses.back();
  const Param& param = spec.space[p];
  if (param.kind == Param::Kind::kChoice)
    return static_cast<double>(std::find(param.choices.begin(), param.choices.end(), t.params[p].second) -
                               param.choices.begin());
  const double v = std::strtod(t.params[p].second.c_str(), nullptr);
  return param.kind == Param::Kind::kLogUniform ? std::log(v) : v;
}

constexpr const char* kHead = R"(<!doctype html><html><head><meta charset="utf-8"><title>tern sweep</title>
<style>body{font-family:sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}.chart{height:380px;margin:1em 0}</style><script>)";
constexpr const char* kBody = R"(</script></head><body><h1>tern sweep</h1><p>@SUMMARY@</p>
<h2>Parameters &rarr; @OBJECTIVE@ (parallel coordinates)</h2><p>Each line is a trial; each axis is scaled
from its smallest to its largest value (the labels say the range); the last axis is the loss at the trial's
highest rung.</p><div class="chart"><canvas id="pc"></canvas></div>
<h2>@OBJECTIVE@ vs $</h2><div class="chart"><canvas id="cost"></canvas></div>
<h2>Trials</h2>@TABLE@
<script>const D = @DATA@;
const axes = D.axes, palette = ['#1f77b4','#ff7f0e','#2ca02c','#d62728','#9467bd','#8c564b','#e377c2','#7f7f7f','#bcbd22','#17becf'];
new Chart(document.getElementById('pc'), {type: 'line', data: {labels: axes.map(a => a.label),
  datasets: D.trials.map((t, i) => ({label: 'trial ' + t.id, data: t.scaled, borderColor: palette[i % 10],
    borderWidth: t.id === D.best ? 4 : 1.5, fill: false, tension: 0}))},
  options: {maintainAspectRatio: false, animation: false, scales: {y: {min: 0, max: 1, title: {display: true, text: 'scaled (0 = min, 1 = max)'}}}}});
new Chart(document.getElementById('cost'), {type: 'scatter', data: {datasets: D.trials.map((t, i) => ({
    label: 'trial ' + t.id, data: t.curve, showLine: true, borderColor: palette[i % 10]}))},
  options: {maintainAspectRatio: false, animation: false, scales: {x: {title: {display: true, text: '$ (ledger price)'}},
    y: {title: {display: true, text: D.objective}}}}});
</script></body></html>
)";

}  // namespace

std::string SweepTable(const SweepResult& r) {
  std::string out = fmt::format("{:>5}  {:<44}", "trial", "parameters");
  for (int s : r.rung_steps) out += fmt::format(" {:>9}", fmt::format("@{}", s));
  out += fmt::format(" {:>9}  {:<8} {}\n", "$", "status", "why");
  for (const TrialRow& t : r.trials) {
    out += fmt::format("{:>5}{} {:<44}", t.id, t.id == r.best ? "*" : " ", ParamsText(t));
    for (size_t k = 0; k < r.rung_steps.size(); k++)
      out += k < t.losses.size() ? fmt::format(" {:>9.4f}", t.losses[k]) : fmt::format(" {:>9}", "-");
    out += fmt::format(" {:>9}  {:<8} {}\n", Dollars(t.cost_usd), t.state, t.reason);
  }
  out += "spent $" + Dollars(r.spent_usd);
  if (r.best >= 0)
    out += fmt::format("; best: trial {} ({} {:.4f})", r.best, ObjectiveLabel(r.objective),
                       r.trials[r.best].losses.back());
  if (!r.stopped.empty()) out += "; stopped launching: " + r.stopped;
  return out + "\n";
}

json SweepJson(const SweepSpec& spec, const SweepResult& r) {
  json trials = json::array();
  for (const TrialRow& t : r.trials) {
    json params = json::object();
    for (const auto& [k, v] : t.params) params[k] = v;
    trials.push_back({{"id", t.id},
                      {"params", params},
                      {"losses", t.losses},
                      {"cost_usd", t.cost_usd},
                      {"steps", t.steps},
                      {"state", t.state},
                      {"reason", t.reason},
                      {"run_dir", t.run_dir},
                      {"slurm_job_id", t.slurm_job_id}});
  }
  return {{"dir", spec.dir},          {"rung_steps", r.rung_steps},
          {"eta", spec.asha.eta},     {"budget_usd", spec.budget_usd},
          {"spent_usd", r.spent_usd}, {"best", r.best},
          {"stopped", r.stopped},     {"objective", ObjectiveName(spec.objective)},
          {"trials", trials}};
}

Result<std::string> BestConfigYaml(const SweepSpec& spec, const SweepResult& r) {
  if (r.best < 0) return Status::NotFound("no trial finished a rung: there is no best config");
  TrainConfig cfg;
  TERN_RETURN_IF_ERROR(LoadTrainConfigFile(spec.base_config, &cfg));
  for (const std::string& kv : spec.overrides) TERN_RETURN_IF_ERROR(ApplyOverride(kv, &cfg));
  const TrialRow& t = r.trials[r.best];
  for (const auto& [k, v] : t.params) TERN_RETURN_IF_ERROR(ApplyOverride(k + "=" + v, &cfg));
  cfg.steps = spec.asha.max_steps;
  cfg.run_dir = spec.dir + "/best";
  return fmt::format("# tern sweep {}: trial {}, {} {:.4f} at {} steps ({})\n", spec.dir, t.id,
                     ObjectiveLabel(spec.objective), t.losses.back(), r.rung_steps[t.losses.size() - 1],
                     ParamsText(t)) +
         TrainConfigToYaml(cfg);
}

std::string SweepHtml(const SweepSpec& spec, const SweepResult& r, const std::string& chartjs) {
  // One axis per parameter (numbers scaled min..max; choices by their index), then the loss.
  json axes = json::array();
  std::vector<std::vector<double>> values(r.trials.size());
  const size_t n_params = spec.space.size();
  for (size_t p = 0; p <= n_params; p++) {
    std::vector<double> col;
    const bool log_axis = p < n_params && spec.space[p].kind == Param::Kind::kLogUniform;
    for (const TrialRow& t : r.trials) col.push_back(AxisValue(spec, t, p));
    double lo = 0, hi = 0;
    if (!col.empty()) {
      lo = *std::min_element(col.begin(), col.end());
      hi = *std::max_element(col.begin(), col.end());
    }
    const std::string name = p == n_params ? ObjectiveLabel(spec.objective) : spec.space[p].key;
    axes.push_back(
        {{"label", log_axis ? fmt::format("{} [{:.4g}, {:.4g}] (log)", name, std::exp(lo), std::exp(hi))
                            : fmt::format("{} [{:.4g}, {:.4g}]", name, lo, hi)}});
    for (size_t i = 0; i < col.size(); i++) values[i].push_back(hi > lo ? (col[i] - lo) / (hi - lo) : 0.5);
  }
  json trials = json::array();
  for (size_t i = 0; i < r.trials.size(); i++) {
    if (r.trials[i].losses.empty()) continue;
    trials.push_back({{"id", r.trials[i].id},
                      {"scaled", values[i]},
                      {"curve", LossVsDollars(r.trials[i], spec.objective)}});
  }
  const json data = {
      {"axes", axes}, {"trials", trials}, {"best", r.best}, {"objective", ObjectiveLabel(spec.objective)}};
  std::string body = kBody;
  for (int twice = 0; twice < 2; twice++)  // the two headings
    report::FillMarker(&body, "@OBJECTIVE@", report::HtmlEscape(ObjectiveLabel(spec.objective)));
  report::FillMarker(
      &body, "@SUMMARY@",
      report::HtmlEscape(fmt::format(
          "{}: {} trials, rungs at {} steps (eta {}), ${:.4f} spent of {}", spec.dir, r.trials.size(),
          fmt::join(r.rung_steps, ", "), spec.asha.eta, r.spent_usd,
          spec.budget_usd > 0 ? fmt::format("${:.2f}", spec.budget_usd) : std::string("no budget"))));
  report::FillMarker(&body, "@TABLE@", "<pre>" + report::HtmlEscape(SweepTable(r)) + "</pre>");
  report::FillMarker(&body, "@DATA@", report::ScriptSafeJson(data.dump()));
  return kHead + chartjs + body;
}

Status WriteSweepOutputs(const SweepSpec& spec, const SweepResult& r) {
  TERN_RETURN_IF_ERROR(WriteFileAtomic(spec.dir + "/sweep.json", SweepJson(spec, r).dump(2) + "\n"));
  if (r.best >= 0) {
    TERN_ASSIGN_OR_RETURN(std::string yaml, BestConfigYaml(spec, r));
    TERN_RETURN_IF_ERROR(WriteFileAtomic(spec.dir + "/best.yaml", yaml));
  }
  TERN_ASSIGN_OR_RETURN(std::string chartjs, report::ReadChartJs());
  return WriteFileAtomic(spec.dir + "/sweep.html", SweepHtml(spec, r, chartjs));
}

}  // namespace tern::sweep
