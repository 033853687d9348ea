#include "report/finops.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "metrics/run_record.h"
#include "run/clock.h"
#include "run/job_spec.h"
#include "run/ledger.h"

namespace tern::report {
namespace {

constexpr double kDay = 86400;

std::string Day(double unix_s) {
  return run::FormatUtc(std::floor(unix_s / kDay) * kDay).substr(0, 10);
}

// When the attempt stopped running (a running one: when its supervisor last looked, else now).
double AttemptEnd(const run::AttemptRow& a, double now) {
  double end = a.end_unix > 0 ? a.end_unix : (a.seen_unix > 0 ? a.seen_unix : now);
  return std::max(end, a.start_unix);
}

// The part of [start, end] inside [lo, hi]; an instant attempt counts whole when it lies inside.
double Overlap(double start, double end, double lo, double hi) {
  if (end <= start) return start >= lo && start <= hi ? 1 : 0;
  return std::max(0.0, std::min(end, hi) - std::max(start, lo)) / (end - start);
}

}  // namespace

bool IsFailureReason(const std::string& reason) {
  static const std::set<std::string> kFailures = {"crashed", "signal",        "hung",
                                                  "lost",    "launch_failed", "bad_config"};
  return kFailures.count(reason) > 0;
}

FinOps ComputeFinOps(const std::vector<run::JobWithAttempts>& jobs, double since_unix, double now_unix,
                     const std::map<std::string, double>& gpu_util_by_job) {
  FinOps f;
  f.since_unix = since_unix;
  f.now_unix = now_unix;
  std::map<std::string, ProjectSpend> projects;
  double util_weight = 0, util_sum = 0, first_start = now_unix;
  for (const auto& [job, attempts] : jobs) {
    JobSpend j;
    j.job_id = job.job_id;
    j.project = job.project.empty() ? "(none)" : job.project;
    j.state = job.state;
    j.instance = job.instance.empty() ? (job.price_per_hour > 0 ? "custom price" : "") : job.instance;
    j.run_dir = job.run_dir;
    bool in_window = false;
    for (const run::AttemptRow& a : attempts) {
      const double end = AttemptEnd(a, now_unix);
      const double share = Overlap(a.start_unix, end, since_unix, now_unix);
      const bool ended_inside = a.state != "running" && end >= since_unix && end <= now_unix;
      if (share <= 0 && !ended_inside) continue;
      in_window = true;
      first_start = std::min(first_start, std::max(a.start_unix, since_unix));
      j.attempts++;
      j.usd += share * a.cost_usd;
      j.wall_hours += share * a.wall_s / 3600;
      j.gpu_hours += share * a.wall_s * std::max(1, a.ranks) / 3600;
      j.productive_hours += share * a.productive_s / 3600;
      j.lost_steps += share * a.lost_steps;
      j.lost_s += share * a.lost_s;
      j.lost_usd += share * a.lost_usd;
      j.tokens += share * static_cast<double>(a.tokens);
      if (ended_inside && a.reason == "preempted") j.preemptions++;
      if (ended_inside && IsFailureReason(a.reason)) j.failures++;
      // The cost by UTC day, by the time on each side of midnight.
      if (end <= a.start_unix) {
        f.usd_by_day[Day(a.start_unix)][j.project] += share * a.cost_usd;
        continue;
      }
      const double lo = std::max(a.start_unix, since_unix), hi = std::min(end, now_unix);
      for (double day = std::floor(lo / kDay) * kDay; day < hi; day += kDay) {
        const double part = std::min(hi, day + kDay) - std::max(lo, day);
        if (part > 0) f.usd_by_day[Day(day)][j.project] += a.cost_usd * part / (end - a.start_unix);
      }
    }
    if (!in_window) continue;
    if (auto u = gpu_util_by_job.find(job.job_id); u != gpu_util_by_job.end()) {
      j.gpu_util_pct = u->second;
      util_sum += u->second * j.gpu_hours;
      util_weight += j.gpu_hours;
    }
    ProjectSpend& p = projects[j.project];
    p.project = j.project;
    p.usd += j.usd;
    p.gpu_hours += j.gpu_hours;
    p.lost_usd += j.lost_usd;
    p.jobs++;
    p.attempts += j.attempts;
    p.preemptions += j.preemptions;
    p.failures += j.failures;
    f.usd += j.usd;
    f.gpu_hours += j.gpu_hours;
    f.wall_hours += j.wall_hours;
    f.productive_hours += j.productive_hours;
    f.tokens += j.tokens;
    f.jobs++;
    f.attempts += j.attempts;
    f.preemptions += j.preemptions;
    f.failures += j.failures;
    f.jobs_preempted += j.preemptions > 0;
    f.jobs_failed += j.failures > 0;
    f.lost_steps += j.lost_steps;
    f.lost_s += j.lost_s;
    f.lost_usd += j.lost_usd;
    f.lost_gpu_hours += j.wall_hours > 0 ? j.lost_s / 3600 * j.gpu_hours / j.wall_hours : 0;
    f.jobs_by_usd.push_back(std::move(j));
  }
  if (util_weight > 0) f.gpu_util_pct = util_sum / util_weight;
  std::stable_sort(f.jobs_by_usd.begin(), f.jobs_by_usd.end(),
                   [](const JobSpend& a, const JobSpend& b) { return a.usd > b.usd; });
  for (auto& [name, p] : projects) f.by_project.push_back(p);
  std::stable_sort(f.by_project.begin(), f.by_project.end(),
                   [](const ProjectSpend& a, const ProjectSpend& b) { return a.usd > b.usd; });
  for (const ProjectSpend& p : f.by_project) f.projects.push_back(p.project);
  // Every day of the window (from the first attempt in it when the window is "all"), oldest first.
  const double from = since_unix > 0 ? since_unix : first_start;
  for (double day = std::floor(from / kDay) * kDay; day <= now_unix; day += kDay) f.days.push_back(Day(day));
  for (const auto& [day, by] : f.usd_by_day)
    if (std::find(f.days.begin(), f.days.end(), day) == f.days.end()) f.days.push_back(day);
  std::sort(f.days.begin(), f.days.end());
  return f;
}

Result<double> ParseSince(const std::string& text) {
  if (text == "all") return 0.0;
  if (!text.empty() && text.back() == 'd') {
    TERN_ASSIGN_OR_RETURN(double days, run::ParseSeconds(text.substr(0, text.size() - 1), "--since"));
    return days * kDay;
  }
  auto s = run::ParseSeconds(text, "--since");
  if (!s.ok())
    return Status::InvalidArgument(
        fmt::format("--since {}: give a duration back from now (30d, 12h, 90m, 3600) or all", text));
  return s;
}

Result<FinOps> LoadFinOps(const std::string& path, double since_unix, double now_unix) {
  if (!std::filesystem::exists(path))
    return Status::NotFound(fmt::format(
        "no ledger at {}: jobs get into it when started with `tern run CONFIG` (set TERN_HOME, or give "
        "--ledger FILE, to read another one)",
        path));
  TERN_ASSIGN_OR_RETURN(auto ledger, run::Ledger::Open(path));
  TERN_ASSIGN_OR_RETURN(std::vector<run::JobRow> rows, ledger->Jobs());
  std::vector<run::JobWithAttempts> jobs;
  std::map<std::string, double> util;
  for (const run::JobRow& row : rows) {
    TERN_ASSIGN_OR_RETURN(std::vector<run::AttemptRow> attempts, ledger->Attempts(row.job_id));
    jobs.push_back({row, std::move(attempts)});
    // GPU utilisation, where the job's rows have it (GPU runs with NVML); a run directory gone is fine.
    const std::string metrics = row.run_dir + "/metrics.jsonl";
    if (!std::filesystem::is_regular_file(metrics)) continue;
    auto records = ReadMetricsFile(metrics);
    if (!records.ok()) continue;
    double sum = 0;
    int n = 0;
    for (const RunRow& r : *records)
      if (const auto* s = std::get_if<StepRecord>(&r.record); s && s->gpu) {
        sum += s->gpu->util_pct;
        n++;
      }
    if (n > 0) util[row.job_id] = sum / n;
  }
  FinOps f = ComputeFinOps(jobs, since_unix, now_unix, util);
  f.ledger = path;
  return f;
}

nlohmann::json FinOpsJson(const FinOps& f, size_t top) {
  using nlohmann::json;
  const auto per = [](double n, double d) { return d > 0 ? json(n / d) : json(nullptr); };
  json j;
  j["ledger"] = f.ledger;
  j["window"] = {{"since_unix", f.since_unix},
                 {"now_unix", f.now_unix},
                 {"since_utc", f.since_unix > 0 ? run::FormatUtc(f.since_unix) : "all"},
                 {"now_utc", run::FormatUtc(f.now_unix)}};
  j["totals"] = {{"usd", f.usd},
                 {"gpu_hours", f.gpu_hours},
                 {"wall_hours", f.wall_hours},
                 {"productive_hours", f.productive_hours},
                 {"productive_fraction", per(f.productive_hours, f.wall_hours)},
                 {"gpu_util_pct", f.gpu_util_pct ? json(*f.gpu_util_pct) : json(nullptr)},
                 {"tokens", f.tokens},
                 {"usd_per_gpu_hour", per(f.usd, f.gpu_hours)},
                 {"jobs", f.jobs},
                 {"attempts", f.attempts}};
  j["rates"] = {{"preemptions", f.preemptions},
                {"failures", f.failures},
                {"preemptions_per_job", per(f.preemptions, f.jobs)},
                {"failures_per_job", per(f.failures, f.jobs)},
                {"jobs_preempted_fraction", per(f.jobs_preempted, f.jobs)},
                {"jobs_failed_fraction", per(f.jobs_failed, f.jobs)},
                {"preemptions_per_gpu_hour", per(f.preemptions, f.gpu_hours)},
                {"failures_per_gpu_hour", per(f.failures, f.gpu_hours)}};
  j["lost"] = {{"steps", f.lost_steps},
               {"seconds", f.lost_s},
               {"usd", f.lost_usd},
               {"gpu_hours", f.lost_gpu_hours},
               {"fraction_of_usd", per(f.lost_usd, f.usd)}};
  json days = json::array();
  for (const std::string& d : f.days) {
    json by = json::object();
    double total = 0;
    if (auto it = f.usd_by_day.find(d); it != f.usd_by_day.end())
      for (const auto& [p, usd] : it->second) {
        by[p] = usd;
        total += usd;
      }
    days.push_back({{"day", d}, {"usd", total}, {"by_project", by}});
  }
  j["by_day_utc"] = days;
  j["projects"] = f.projects;
  json projects = json::array();
  for (const ProjectSpend& p : f.by_project)
    projects.push_back({{"project", p.project},
                        {"usd", p.usd},
                        {"gpu_hours", p.gpu_hours},
                        {"jobs", p.jobs},
                        {"attempts", p.attempts},
                        {"preemptions", p.preemptions},
                        {"failures", p.failures},
                        {"lost_usd", p.lost_usd}});
  j["by_project"] = projects;
  json list = json::array();
  for (size_t i = 0; i < f.jobs_by_usd.size() && i < top; ++i) {
    const JobSpend& s = f.jobs_by_usd[i];
    list.push_back({{"job_id", s.job_id},
                    {"project", s.project},
                    {"state", s.state},
                    {"instance", s.instance},
                    {"run_dir", s.run_dir},
                    {"usd", s.usd},
                    {"gpu_hours", s.gpu_hours},
                    {"attempts", s.attempts},
                    {"preemptions", s.preemptions},
                    {"failures", s.failures},
                    {"lost_steps", s.lost_steps},
                    {"lost_usd", s.lost_usd},
                    {"tokens", s.tokens},
                    {"usd_per_mtok", s.tokens > 0 ? json(s.usd / s.tokens * 1e6) : json(nullptr)},
                    {"gpu_util_pct", s.gpu_util_pct ? json(*s.gpu_util_pct) : json(nullptr)}});
  }
  j["top_jobs"] = list;
  j["serving"] = ServingJson(f.serving);
  return j;
}

}  // namespace tern::report
