#include "report/run_data.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "plan/defaults.h"
#include "run/ledger.h"

namespace tern::report {
namespace {

namespace fs = std::filesystem;

void FlattenJson(const nlohmann::json& j, const std::string& prefix,
                 std::map<std::string, std::string>* out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) FlattenJson(it.value(), prefix + "." + it.key(), out);
  } else {
    (*out)[prefix] = j.is_string() ? j.get<std::string>() : j.dump();
  }
}

void FlattenYaml(const YAML::Node& n, const std::string& prefix, std::map<std::string, std::string>* out) {
  if (n.IsMap()) {
    for (const auto& kv : n) FlattenYaml(kv.second, prefix + "." + kv.first.as<std::string>(), out);
  } else if (n.IsScalar()) {
    (*out)[prefix] = n.as<std::string>();
  } else if (n.IsSequence()) {
    YAML::Emitter e;
    e << YAML::Flow << n;
    (*out)[prefix] = e.c_str();
  } else {
    (*out)[prefix] = "";
  }
}

// Drops the stitched points (and evaluations) after `step`: a later attempt redoes them.
void Supersede(RunData* run, int step) {
  auto& pts = run->points;
  auto first = std::find_if(pts.begin(), pts.end(), [&](const Point& p) { return p.step > step; });
  if (first != pts.end()) {
    LostSpan span;
    const Point* before = first == pts.begin() ? nullptr : &*(first - 1);
    span.from_step = before ? before->step : 0;
    span.t0_s = before ? before->t_s : 0;
    span.tokens0 = before ? before->tokens : 0;
    span.usd0 = before ? before->usd : std::optional<double>(0.0);
    span.to_step = pts.back().step;
    span.t1_s = pts.back().t_s;
    span.tokens1 = pts.back().tokens;
    span.usd1 = pts.back().usd;
    for (auto it = first; it != pts.end(); ++it) {
      run->lost_steps++;
      run->lost_s += it->row.step_ms / 1e3;
    }
    run->lost.push_back(span);
    pts.erase(first, pts.end());
  }
  auto& ev = run->evals;
  ev.erase(std::remove_if(ev.begin(), ev.end(), [&](const EvalPoint& e) { return e.step > step; }), ev.end());
}

// A checkpoint row of a tier in object storage: its bytes kept under its step, the steps retention removed
// from that tier forgotten.
void NoteStored(const EventRecord& ev, std::map<std::string, std::map<int64_t, uint64_t>>* stored) {
  const auto& f = ev.fields;
  const auto loc = f.find("location");
  const auto tier = f.find("tier");
  if (loc == f.end() || !loc->is_string() || loc->get<std::string>().rfind("s3://", 0) != 0) return;
  auto& steps = (*stored)[tier != f.end() && tier->is_string() ? tier->get<std::string>() : ""];
  if (ev.step >= 0) steps[ev.step] = static_cast<uint64_t>(std::max(0.0, ev.Number("bytes")));
  if (const auto rm = f.find("removed"); rm != f.end() && rm->is_array())
    for (const auto& r : *rm)
      if (r.is_number_integer()) steps.erase(r.get<int64_t>());
}

}  // namespace

Result<RunData> StitchRows(const std::vector<RunRow>& rows) {
  std::map<std::string, std::map<int64_t, uint64_t>> stored;  // object-storage tier -> step -> bytes
  RunData run;
  int attempt = -1;
  bool have_start = false, attempt_first_step = false;
  double t_offset = 0, usd_offset = 0, raw_t_last = 0, raw_usd_last = 0, last_t = 0;
  std::optional<double> last_usd;
  auto place = [&](int step, double tokens, double t, std::optional<double> usd) {
    Mark m;
    m.step = step;
    m.tokens = tokens;
    m.t_s = t;
    m.usd = usd;
    return m;
  };
  for (const RunRow& r : rows) {
    if (const auto* s = std::get_if<StartRecord>(&r.record)) {
      if (!have_start) run.start = *s;
      have_start = true;
      attempt++;
      attempt_first_step = true;
    } else if (const auto* st = std::get_if<StepRecord>(&r.record)) {
      if (attempt < 0) attempt = 0;
      // A step seen again without a "resume" row (another tool's log): the later row wins all the same.
      if (!run.points.empty() && st->step <= run.points.back().step) Supersede(&run, st->step - 1);
      const double raw_t = st->elapsed_s ? *st->elapsed_s : raw_t_last + st->step_ms / 1e3;
      const double raw_usd = st->cost_usd.value_or(0);
      if (attempt_first_step && attempt > 0) {
        // A clock (or bill) that restarted with the process is continued from where the last attempt ended.
        if (raw_t < raw_t_last) t_offset = last_t;
        if (st->cost_usd && last_usd && raw_usd < raw_usd_last) usd_offset = *last_usd;
      }
      attempt_first_step = false;
      Point p;
      p.step = st->step;
      p.tokens = static_cast<double>(st->tokens);
      p.t_s = t_offset + raw_t;
      if (st->cost_usd) p.usd = usd_offset + raw_usd;
      p.row = *st;
      p.attempt = std::max(attempt, 0);
      raw_t_last = raw_t;
      raw_usd_last = raw_usd;
      last_t = p.t_s;
      last_usd = p.usd;
      run.points.push_back(std::move(p));
    } else if (const auto* e = std::get_if<EvalRecord>(&r.record)) {
      EvalPoint ep;
      ep.step = e->step;
      ep.val_loss = e->val_loss;
      ep.eval_ms = e->eval_ms;
      ep.choice_acc = e->choice_acc;
      ep.choice_acc_norm = e->choice_acc_norm;
      ep.val_loss_mix = e->val_loss_mix;
      // The point of the step it evaluated (the newest one at or before it).
      for (auto it = run.points.rbegin(); it != run.points.rend(); ++it) {
        if (it->step <= e->step) {
          ep.tokens = it->tokens;
          ep.t_s = it->t_s;
          ep.usd = it->usd;
          break;
        }
      }
      auto& ev = run.evals;  // an evaluation seen again (a later attempt's) replaces the earlier one
      ev.erase(std::remove_if(ev.begin(), ev.end(), [&](const EvalPoint& x) { return x.step >= e->step; }),
               ev.end());
      run.evals.push_back(ep);
    } else if (const auto* end = std::get_if<EndRecord>(&r.record)) {
      run.end = *end;
    } else if (const auto* ev = std::get_if<EventRecord>(&r.record)) {
      const Point* last = run.points.empty() ? nullptr : &run.points.back();
      if (ev->event == "resume") {
        const int from = std::max(ev->step, 0);
        Supersede(&run, from);
        Mark m = place(from, 0, last_t, last_usd);
        for (const Point& p : run.points)
          if (p.step == from) m.tokens = p.tokens;
        m.kind = "resume";
        run.marks.push_back(m);
      } else if (ev->event == "checkpoint" || ev->event == "preempted") {
        Mark m = last ? place(last->step, last->tokens, last->t_s, last->usd) : place(0, 0, 0, 0.0);
        m.kind = ev->event;
        if (ev->step >= 0) m.step = ev->step;
        run.marks.push_back(m);
        if (ev->event == "checkpoint" && !run.points.empty())
          run.points.back().ckpt_stall_ms += ev->Number("stall_ms");
        if (ev->event == "checkpoint") NoteStored(*ev, &stored);
      }
    }
  }
  if (!have_start && run.points.empty())
    return Status::InvalidArgument("no start row and no step rows: not a tern metrics.jsonl");
  run.attempts = std::max(attempt + 1, 1);
  for (const auto& [tier, steps] : stored)
    for (const auto& [step, bytes] : steps) {
      ++run.object_store.kept;
      run.object_store.bytes += bytes;
    }
  FlattenJson(ToJson(run.start), "start", &run.config);
  run.config.erase("start.v");
  run.config.erase("start.event");
  return run;
}

Result<std::optional<run::JobRow>> RunDirJob(const std::string& run_dir) {
  const std::string path = run::RunDirLedgerPath(run_dir);
  if (!fs::exists(path)) return std::optional<run::JobRow>();  // a run `tern run` did not start
  TERN_ASSIGN_OR_RETURN(auto ledger, run::Ledger::Open(path));
  TERN_ASSIGN_OR_RETURN(auto job, ledger->FindJob(fs::absolute(run_dir).lexically_normal().string()));
  if (!job) {  // the run directory was moved: its own copy holds only its jobs, read the newest
    TERN_ASSIGN_OR_RETURN(auto jobs, ledger->Jobs());
    if (!jobs.empty()) job = jobs.front();
  }
  return job;
}

Result<RunData> LoadRun(const std::string& dir) {
  const std::string metrics = dir + "/metrics.jsonl";
  if (!fs::is_regular_file(metrics))
    return Status::NotFound(
        fmt::format("{} has no metrics.jsonl: give the run directory `tern train` wrote (its run.dir)", dir));
  TERN_ASSIGN_OR_RETURN(auto rows, ReadMetricsFile(metrics));
  return LoadRunFromRows(dir, rows);
}

Result<RunData> LoadRunFromRows(const std::string& dir, const std::vector<RunRow>& rows) {
  const std::string metrics = dir + "/metrics.jsonl";
  auto stitched = StitchRows(rows);
  if (!stitched.ok())
    return Status::InvalidArgument(fmt::format("{}: {}", metrics, stitched.status().message()));
  RunData run = std::move(stitched).value();
  run.dir = dir;
  std::string name = fs::path(dir).lexically_normal().filename().string();
  if (name.empty() || name == ".") name = fs::path(dir).lexically_normal().parent_path().filename().string();
  run.name = name.empty() ? dir : name;
  TERN_ASSIGN_OR_RETURN(auto job, RunDirJob(dir));
  if (job) run.instance = job->instance;
  if (fs::is_regular_file(dir + "/summary.json")) {
    TERN_ASSIGN_OR_RETURN(auto end, ReadSummaryFile(dir + "/summary.json"));
    run.end = std::move(end);
  }
  if (fs::is_regular_file(dir + "/config.yaml")) {
    try {
      FlattenYaml(YAML::LoadFile(dir + "/config.yaml"), "config", &run.config);
    } catch (const YAML::Exception& e) {
      return Status::InvalidArgument(fmt::format("{}/config.yaml: {}", dir, e.what()));
    }
    run.config.erase("config.run.dir");  // differs between any two runs and says nothing
  }
  return run;
}

RunSummary Summarize(const RunData& run) {
  RunSummary s;
  if (!run.points.empty()) {
    const Point& last = run.points.back();
    s.steps = last.step;
    s.tokens = last.tokens;
    s.wall_s = last.t_s;
    s.final_train_loss = last.row.loss;
    s.usd = last.usd;
  }
  const bool one = run.attempts == 1;
  if (run.end) {
    if (one && run.end->wall_s > s.wall_s) s.wall_s = run.end->wall_s;
    if (one && run.end->cost_usd > 0) s.usd = run.end->cost_usd;
    if (run.points.empty()) {
      s.steps = run.end->steps;
      s.tokens = static_cast<double>(run.end->tokens);
      s.final_train_loss = run.end->train_loss;
    }
  }
  if (!run.evals.empty()) {
    s.final_val_loss = run.evals.back().val_loss;
    double best = run.evals.front().val_loss;
    for (const auto& e : run.evals) best = std::min(best, e.val_loss);
    s.best_val_loss = best;
  } else if (run.end) {
    s.final_val_loss = s.best_val_loss = run.end->val_loss;
  }
  if (s.usd && s.tokens > 0) s.usd_per_mtok = *s.usd / s.tokens * 1e6;
  double step_s = 0, joules = 0, measured_tokens = 0, prev_tokens = 0, mfu_sum = 0;
  for (const Point& p : run.points) {
    step_s += p.row.step_ms / 1e3;
    mfu_sum += p.row.mfu;
    const double dt = std::max(0.0, p.tokens - prev_tokens);
    prev_tokens = p.tokens;
    if (p.row.gpu) {
      joules += p.row.gpu->joules_per_token * dt;
      measured_tokens += dt;
    }
  }
  if (run.end && one && run.end->tokens_per_s > 0) {
    s.tokens_per_s = run.end->tokens_per_s;
    s.mfu = run.end->mfu;
  } else if (step_s > 0) {
    s.tokens_per_s = s.tokens / step_s;
    s.mfu = mfu_sum / static_cast<double>(run.points.size());
  }
  if (measured_tokens > 0) {
    s.energy_kwh = joules / 3.6e6;
    s.joules_per_token = joules / measured_tokens;
  }
  s.provider = run.instance.substr(0, run.instance.find(':'));
  if (s.provider.empty() && run.object_store.kept > 0) s.provider = "aws";  // s3://
  s.stored_gb = static_cast<double>(run.object_store.bytes) / 1e9;
  s.model_gb = static_cast<double>(run.start.params) * 4 / 1e9;
  if (!s.provider.empty()) {
    const plan::PlanDefaults d;
    const plan::ProviderRates& rates = d.Rates(s.provider);
    s.storage_usd = s.stored_gb * (s.wall_s / 3600 / 730) * rates.storage_usd_per_gb_month;
    s.egress_usd = s.model_gb * rates.egress_usd_per_gb;
  }
  return s;
}

std::optional<EvalPoint> FirstReach(const RunData& run, double target) {
  for (const auto& e : run.evals)
    if (e.val_loss <= target) return e;
  return std::nullopt;
}

std::optional<double> ReachTarget(const std::vector<RunData>& runs) {
  std::optional<double> target;
  for (const auto& r : runs) {
    const RunSummary s = Summarize(r);
    const auto v = runs.size() == 1 ? s.final_val_loss : s.best_val_loss;
    if (!v) continue;
    target = target ? std::max(*target, *v) : *v;
  }
  if (!target) return std::nullopt;
  return std::ceil(*target * 100 - 1e-9) / 100;
}

std::map<std::string, std::vector<std::string>> ConfigDiff(const std::vector<RunData>& runs) {
  std::map<std::string, std::vector<std::string>> diff;
  std::map<std::string, bool> keys;
  for (const auto& r : runs)
    for (const auto& [k, v] : r.config) keys[k] = true;
  for (const auto& [k, unused] : keys) {
    std::vector<std::string> values;
    for (const auto& r : runs) {
      auto it = r.config.find(k);
      values.push_back(it == r.config.end() ? "" : it->second);
    }
    if (std::adjacent_find(values.begin(), values.end(), std::not_equal_to<>()) != values.end())
      diff[k] = std::move(values);
  }
  return diff;
}

Ratios CompareTwo(const RunData& a, const RunData& b, double target) {
  Ratios out;
  const auto ra = FirstReach(a, target), rb = FirstReach(b, target);
  const RunSummary sa = Summarize(a), sb = Summarize(b);
  if (sa.tokens_per_s && sb.tokens_per_s && *sa.tokens_per_s > 0)
    out.tokens_per_s = *sb.tokens_per_s / *sa.tokens_per_s;
  if (!ra || !rb) {
    out.sentence = fmt::format("{} does not reach val {:.2f}", !rb ? b.name : a.name, target);
    return out;
  }
  if (ra->usd && rb->usd && *ra->usd > 0) out.usd = *rb->usd / *ra->usd;
  if (ra->t_s > 0) out.time = rb->t_s / ra->t_s;
  if (out.usd) {
    out.sentence =
        fmt::format("{} reaches val {:.2f} in {:.2f}× the dollars of {}", b.name, target, *out.usd, a.name);
    if (out.time) out.sentence += fmt::format(" ({:.2f}× the time)", *out.time);
  } else if (out.time) {
    out.sentence = fmt::format(
        "{} reaches val {:.2f} in {:.2f}× the time of {} (no price: run with "
        "--price-per-hour for dollars)",
        b.name, target, *out.time, a.name);
  }
  return out;
}

std::vector<size_t> EnvelopeIndices(const std::vector<double>& values, size_t buckets) {
  std::vector<size_t> out;
  const size_t n = values.size();
  if (buckets == 0) buckets = 1;
  if (n <= 2 * buckets) {
    for (size_t i = 0; i < n; ++i)
      if (std::isfinite(values[i])) out.push_back(i);
    return out;
  }
  out.reserve(2 * buckets);
  for (size_t b = 0; b < buckets; ++b) {
    const size_t lo = b * n / buckets, hi = (b + 1) * n / buckets;
    size_t imin = n, imax = n;
    for (size_t i = lo; i < hi; ++i) {
      if (!std::isfinite(values[i])) continue;
      if (imin == n || values[i] < values[imin]) imin = i;
      if (imax == n || values[i] > values[imax]) imax = i;
    }
    if (imin == n) continue;
    out.push_back(std::min(imin, imax));
    if (imax != imin) out.push_back(std::max(imin, imax));
  }
  return out;
}

}  // namespace tern::report
