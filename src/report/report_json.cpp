// ReportJson: the per-run summary, the downsampled series the page draws, and the comparison.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "report/run_data.h"

namespace tern::report {
namespace {

using nlohmann::json;

// `digits` significant digits: the file stays small, the charts cannot tell.
double Round(double x, int digits = 6) {
  if (!std::isfinite(x) || x == 0) return x;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*g", digits, x);
  return std::strtod(buf, nullptr);
}

json Opt(const std::optional<double>& v, int digits = 8) {
  return v ? json(Round(*v, digits)) : json(nullptr);
}

json SummaryJson(const RunSummary& s) {
  return {{"steps", s.steps},
          {"tokens", s.tokens},
          {"wall_s", Round(s.wall_s, 8)},
          {"final_train_loss", Opt(s.final_train_loss)},
          {"final_val_loss", Opt(s.final_val_loss)},
          {"best_val_loss", Opt(s.best_val_loss)},
          {"usd", Opt(s.usd)},
          {"usd_per_mtok", Opt(s.usd_per_mtok)},
          {"tokens_per_s", Opt(s.tokens_per_s)},
          {"mfu", Opt(s.mfu)},
          {"energy_kwh", Opt(s.energy_kwh)},
          {"joules_per_token", Opt(s.joules_per_token)},
          {"provider", s.provider},
          {"stored_gb", Round(s.stored_gb, 9)},
          {"model_gb", Round(s.model_gb, 9)},
          {"storage_usd", Opt(s.storage_usd)},
          {"egress_usd", Opt(s.egress_usd)}};
}

json ReachJson(const RunData& run, std::optional<double> target) {
  if (!target) return nullptr;
  const auto e = FirstReach(run, *target);
  if (!e) return {{"target", *target}, {"reached", false}};
  return {{"target", *target},   {"reached", true},         {"step", e->step},
          {"tokens", e->tokens}, {"t_s", Round(e->t_s, 8)}, {"usd", Opt(e->usd)}};
}

json XJson(int step, double tokens, double t, const std::optional<double>& usd) {
  return {{"step", step}, {"tokens", tokens}, {"t", Round(t, 7)}, {"usd", Opt(usd, 7)}};
}

// Each series downsampled on its own (its own extremes kept); the x table holds the union of the rows any
// series kept, and a series names its rows by their index in that table.
json SeriesJson(const RunData& run) {
  const auto& pts = run.points;
  using Getter = double (*)(const Point&);
  const bool gpu = std::any_of(pts.begin(), pts.end(), [](const Point& p) { return p.row.gpu.has_value(); });
  std::vector<std::pair<const char*, Getter>> getters = {
      {"loss", [](const Point& p) { return p.row.loss; }},
      {"lr", [](const Point& p) { return p.row.lr; }},
      {"grad_norm", [](const Point& p) { return p.row.grad_norm; }},
      {"tokens_per_s", [](const Point& p) { return p.row.tokens_per_s; }},
      {"mfu", [](const Point& p) { return p.row.mfu; }},
      {"compute_ms",
       [](const Point& p) { return std::max(0.0, p.row.step_ms - p.row.data_wait_ms - p.row.comm_ms); }},
      {"data_wait_ms", [](const Point& p) { return p.row.data_wait_ms; }},
      {"comm_ms", [](const Point& p) { return p.row.comm_ms; }},
      {"ckpt_stall_ms", [](const Point& p) { return p.ckpt_stall_ms; }},
  };
  if (gpu) {
    getters.push_back({"gpu_util", [](const Point& p) { return p.row.gpu ? p.row.gpu->util_pct : NAN; }});
    getters.push_back(
        {"gpu_mem_gb", [](const Point& p) { return p.row.gpu ? p.row.gpu->mem_used_gb : NAN; }});
    getters.push_back({"gpu_power_w", [](const Point& p) { return p.row.gpu ? p.row.gpu->power_w : NAN; }});
  }
  std::vector<std::vector<size_t>> kept;
  std::vector<std::vector<double>> values;
  std::set<size_t> rows;
  // The four parts of the step-time breakdown are drawn stacked, so they share the rows of one envelope:
  // that of their sum (a checkpoint stall is a spike the envelope keeps).
  std::vector<double> total(pts.size());
  for (size_t i = 0; i < pts.size(); ++i) total[i] = pts[i].row.step_ms + pts[i].ckpt_stall_ms;
  const std::vector<size_t> breakdown = EnvelopeIndices(total, kBuckets);
  for (const auto& [name, get] : getters) {
    std::vector<double> v(pts.size());
    for (size_t i = 0; i < pts.size(); ++i) v[i] = get(pts[i]);
    const std::string n = name;
    const bool part = n == "compute_ms" || n == "data_wait_ms" || n == "comm_ms" || n == "ckpt_stall_ms";
    kept.push_back(part ? breakdown : EnvelopeIndices(v, kBuckets));
    rows.insert(kept.back().begin(), kept.back().end());
    values.push_back(std::move(v));
  }
  std::vector<size_t> table(rows.begin(), rows.end());
  std::vector<size_t> slot(pts.size(), 0);
  json xs = {
      {"step", json::array()}, {"tokens", json::array()}, {"t", json::array()}, {"usd", json::array()}};
  for (size_t k = 0; k < table.size(); ++k) {
    const Point& p = pts[table[k]];
    slot[table[k]] = k;
    xs["step"].push_back(p.step);
    xs["tokens"].push_back(p.tokens);
    xs["t"].push_back(Round(p.t_s, 7));
    xs["usd"].push_back(Opt(p.usd, 7));
  }
  json series = json::object();
  for (size_t s = 0; s < getters.size(); ++s) {
    json idx = json::array(), ys = json::array();
    for (size_t i : kept[s]) {
      idx.push_back(slot[i]);
      ys.push_back(Round(values[s][i]));
    }
    series[getters[s].first] = {{"i", std::move(idx)}, {"y", std::move(ys)}, {"n", kept[s].size()}};
  }
  // Evaluations: the same envelope over the validation loss.
  std::vector<double> vl;
  for (const auto& e : run.evals) vl.push_back(e.val_loss);
  json evals = json::array();
  for (size_t i : EnvelopeIndices(vl, kBuckets)) {
    const auto& e = run.evals[i];
    json j = XJson(e.step, e.tokens, e.t_s, e.usd);
    j["y"] = Round(e.val_loss);
    if (e.choice_acc) j["acc"] = Round(*e.choice_acc);
    if (e.choice_acc_norm) j["acc_norm"] = Round(*e.choice_acc_norm);
    for (const auto& [dir, loss] : e.val_loss_mix) j["mix"][dir] = Round(loss);
    evals.push_back(std::move(j));
  }
  json marks = json::array();
  // Checkpoints of a long run are many: at most 500 marks of each kind drawn (every k-th).
  std::map<std::string, size_t> count;
  for (const auto& m : run.marks) count[m.kind]++;
  std::map<std::string, size_t> seen;
  for (const auto& m : run.marks) {
    const size_t every = std::max<size_t>(1, count[m.kind] / 500);
    if (seen[m.kind]++ % every) continue;
    json j = XJson(m.step, m.tokens, m.t_s, m.usd);
    j["kind"] = m.kind;
    marks.push_back(std::move(j));
  }
  json lost = json::array();
  for (const auto& l : run.lost)
    lost.push_back({{"step", {l.from_step, l.to_step}},
                    {"tokens", {l.tokens0, l.tokens1}},
                    {"t", {Round(l.t0_s, 7), Round(l.t1_s, 7)}},
                    {"usd", {Opt(l.usd0, 7), Opt(l.usd1, 7)}}});
  return {{"x", std::move(xs)},
          {"series", std::move(series)},
          {"evals", std::move(evals)},
          {"marks", std::move(marks)},
          {"lost", std::move(lost)}};
}

}  // namespace

json ReportJson(const std::vector<RunData>& runs, bool with_series) {
  const auto target = ReachTarget(runs);
  json out = {{"tool", "tern report"}, {"v", 1}, {"runs", json::array()}};
  for (const auto& r : runs) {
    json j = {{"name", r.name},
              {"dir", r.dir},
              {"model", r.start.model},
              {"device", r.start.device},
              {"precision", r.start.precision},
              {"price_per_hour", r.start.price_per_hour},
              {"attempts", r.attempts},
              {"lost_steps", r.lost_steps},
              {"lost_s", Round(r.lost_s, 6)},
              {"summary", SummaryJson(Summarize(r))},
              {"reach", ReachJson(r, target)}};
    if (with_series) j["series"] = SeriesJson(r);
    out["runs"].push_back(std::move(j));
  }
  json cmp = {{"target_val_loss", target ? json(*target) : json(nullptr)}};
  json diff = json::object();
  if (runs.size() > 1)
    for (const auto& [k, v] : ConfigDiff(runs)) diff[k] = v;
  cmp["config_diff"] = std::move(diff);
  if (runs.size() == 2 && target) {
    const Ratios r = CompareTwo(runs[0], runs[1], *target);
    cmp["ratios"] = {{"a", runs[0].name},
                     {"b", runs[1].name},
                     {"usd", Opt(r.usd, 4)},
                     {"time", Opt(r.time, 4)},
                     {"tokens_per_s", Opt(r.tokens_per_s, 4)},
                     {"sentence", r.sentence}};
  }
  out["comparison"] = std::move(cmp);
  return out;
}

}  // namespace tern::report
