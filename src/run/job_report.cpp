#include "run/job_report.h"

#include <cmath>
#include <cstring>
#include <ctime>
#include <map>

#include "core/file_util.h"
#include "run/clock.h"

namespace tern::run {
namespace {

std::string Steps(const AttemptRow& a) {
  if (a.last_step < 0) return "-";
  return fmt::format("{}-{}", a.first_step, a.last_step);
}

std::string ExitText(const AttemptRow& a) {
  if (a.state == "running") return "running";
  if (a.signal != 0) {
    const char* name = sigabbrev_np(a.signal);
    return name ? fmt::format("SIG{}", name) : fmt::format("signal {}", a.signal);
  }
  if (a.exit_code < 0) return "-";
  return fmt::format("exit {}", a.exit_code);
}

double UtcDayStart(double unix_s) {
  return std::floor(unix_s / 86400) * 86400;
}

}  // namespace

std::string FormatDollars(double usd) {
  if (usd > 0 && usd < 0.00005) return "<$0.0001";
  if (std::fabs(usd) < 1) return fmt::format("${:.4f}", usd);
  return fmt::format("${:.2f}", usd);
}

std::string FormatSeconds(double s) {
  if (s < 0) return "?";
  if (s < 60) return fmt::format("{:.1f} s", s);
  const long t = std::lround(s);
  if (t < 3600) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}h{:02}m", t / 3600, (t % 3600) / 60);
}

std::string AttemptLine(const AttemptRow& a) {
  std::string line = fmt::format("{} ({}), steps {}, {} wall", a.reason.empty() ? a.state : a.reason,
                                 ExitText(a), Steps(a), FormatSeconds(a.wall_s));
  if (a.startup_s >= 0) line += fmt::format(" ({} start-up)", FormatSeconds(a.startup_s));
  if (a.lost_steps > 0) line += fmt::format(", {} steps redone ({})", a.lost_steps, FormatSeconds(a.lost_s));
  if (a.price_per_hour > 0) line += ", " + FormatDollars(a.cost_usd);
  return line;
}

std::string JobTable(const JobRow& job, const std::vector<AttemptRow>& attempts) {
  const JobTotals t = SumAttempts(attempts);
  std::string out = fmt::format("\n== job {} ({}{}) ==\n", job.job_id, job.state,
                                job.reason.empty() ? "" : ": " + job.reason);
  out +=
      fmt::format("  run dir {}, {}, {} rank{}{}\n", job.run_dir,
                  job.instance.empty() ? job.where : job.instance, job.ranks, job.ranks == 1 ? "" : "s",
                  job.price_per_hour > 0 ? fmt::format(", ${}/h ({})", job.price_per_hour, job.billing) : "");
  out += fmt::format("  {:>3} {:<13} {:<9} {:>11} {:>9} {:>9} {:>9} {:>8} {:>10}\n", "#", "reason", "exit",
                     "steps", "wall", "start-up", "redone", "saves", "$");
  for (const AttemptRow& a : attempts) {
    out += fmt::format("  {:>3} {:<13} {:<9} {:>11} {:>9} {:>9} {:>9} {:>8} {:>10}\n", a.attempt,
                       a.reason.empty() ? a.state : a.reason, ExitText(a), Steps(a), FormatSeconds(a.wall_s),
                       FormatSeconds(a.startup_s), a.lost_steps, FormatSeconds(a.checkpoint_s),
                       FormatDollars(a.cost_usd));
  }
  out += fmt::format(
      "  total: {} attempt{}, last step {}, {} wall ({} start-up, {} in new steps), {} steps "
      "redone ({}, {}), {}\n",
      t.attempts, t.attempts == 1 ? "" : "s", t.last_step, FormatSeconds(t.wall_s),
      FormatSeconds(t.startup_s), FormatSeconds(t.productive_s), t.lost_steps, FormatSeconds(t.lost_s),
      FormatDollars(t.lost_usd), FormatDollars(t.cost_usd));
  return out;
}

std::string SwitchTable(const std::vector<SwitchRow>& switches) {
  if (switches.empty()) return "";
  std::string out = "  policy switches:\n";
  for (const SwitchRow& w : switches) {
    out += fmt::format("    {}  {:>9} -> {:<9}  attempt {}: {}\n", FormatUtc(w.at_unix), w.from, w.to,
                       w.attempt, w.why);
  }
  return out;
}

nlohmann::json SwitchesJson(const std::vector<SwitchRow>& switches) {
  nlohmann::json out = nlohmann::json::array();
  for (const SwitchRow& w : switches) {
    out.push_back({{"at_utc", FormatUtc(w.at_unix)},
                   {"at_unix", w.at_unix},
                   {"attempt", w.attempt},
                   {"from", w.from},
                   {"to", w.to},
                   {"why", w.why}});
  }
  return out;
}

nlohmann::json AttemptJson(const AttemptRow& a) {
  auto step = [](int s) { return s < 0 ? nlohmann::json(nullptr) : nlohmann::json(s); };
  return {{"attempt", a.attempt},
          {"state", a.state},
          {"reason", a.reason},
          {"message", a.message},
          {"start_utc", FormatUtc(a.start_unix)},
          {"end_utc", FormatUtc(a.end_unix)},
          {"host", a.host},
          {"ranks", a.ranks},
          {"exit_code", a.exit_code < 0 ? nlohmann::json(nullptr) : nlohmann::json(a.exit_code)},
          {"signal", a.signal},
          {"first_step", step(a.first_step)},
          {"last_step", step(a.last_step)},
          {"resumed_from", step(a.resumed_from)},
          {"tokens", a.tokens},
          {"wall_s", a.wall_s},
          {"startup_s", a.startup_s < 0 ? nlohmann::json(nullptr) : nlohmann::json(a.startup_s)},
          {"productive_s", a.productive_s},
          {"lost_steps", a.lost_steps},
          {"lost_s", a.lost_s},
          {"lost_usd", a.lost_usd},
          {"checkpoint_s", a.checkpoint_s},
          {"instance", a.instance},
          {"billing", a.billing},
          {"price_per_hour", a.price_per_hour},
          {"cost_usd", a.cost_usd},
          {"trainer_pid", a.trainer_pid},
          {"log", a.log},
          {"slurm_job_id", a.slurm_job_id.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.slurm_job_id)},
          {"slurm_restart_count",
           a.slurm_restart_count < 0 ? nlohmann::json(nullptr) : nlohmann::json(a.slurm_restart_count)}};
}

nlohmann::json JobJson(const JobRow& job, const std::vector<AttemptRow>& attempts) {
  const JobTotals t = SumAttempts(attempts);
  nlohmann::json j = {{"job_id", job.job_id},
                      {"run_dir", job.run_dir},
                      {"config", job.config},
                      {"project", job.project},
                      {"state", job.state},
                      {"reason", job.reason},
                      {"instance", job.instance},
                      {"billing", job.billing},
                      {"price_per_hour", job.price_per_hour},
                      {"ranks", job.ranks},
                      {"where", job.where},
                      {"max_attempts", job.max_attempts},
                      {"budget_usd", job.budget_usd},
                      {"deadline_utc", FormatUtc(job.deadline_unix)},
                      {"created_utc", FormatUtc(job.created_unix)},
                      {"updated_utc", FormatUtc(job.updated_unix)},
                      {"host", job.host},
                      {"supervisor_pid", job.supervisor_pid},
                      {"cancel_requested", job.cancel_requested},
                      {"slurm_job_id", job.slurm_job_id.empty() ? nlohmann::json(nullptr)
                                                                : nlohmann::json(job.slurm_job_id)}};
  j["totals"] = {{"attempts", t.attempts},     {"last_step", t.last_step},
                 {"tokens", t.tokens},         {"wall_s", t.wall_s},
                 {"startup_s", t.startup_s},   {"productive_s", t.productive_s},
                 {"lost_steps", t.lost_steps}, {"lost_s", t.lost_s},
                 {"lost_usd", t.lost_usd},     {"checkpoint_s", t.checkpoint_s},
                 {"cost_usd", t.cost_usd}};
  j["attempts"] = nlohmann::json::array();
  for (const AttemptRow& a : attempts) j["attempts"].push_back(AttemptJson(a));
  return j;
}

nlohmann::json JobsJson(const std::vector<JobWithAttempts>& jobs) {
  nlohmann::json list = nlohmann::json::array();
  std::map<std::string, double> by_project, by_day;
  double total = 0;
  for (const auto& [job, attempts] : jobs) {
    nlohmann::json j = JobJson(job, attempts);
    j.erase("attempts");
    list.push_back(j);
    for (const AttemptRow& a : attempts) {
      by_project[job.project] += a.cost_usd;
      total += a.cost_usd;
      // Split the attempt's cost over the UTC days it ran on, by time.
      const double end = std::max(a.end_unix > 0 ? a.end_unix : a.seen_unix, a.start_unix);
      if (end <= a.start_unix) {
        by_day[FormatUtc(a.start_unix).substr(0, 10)] += a.cost_usd;
        continue;
      }
      for (double day = UtcDayStart(a.start_unix); day < end; day += 86400) {
        const double overlap = std::min(end, day + 86400) - std::max(a.start_unix, day);
        by_day[FormatUtc(day).substr(0, 10)] += a.cost_usd * overlap / (end - a.start_unix);
      }
    }
  }
  nlohmann::json projects = nlohmann::json::object(), days = nlohmann::json::object();
  for (const auto& [p, usd] : by_project) projects[p.empty() ? "(none)" : p] = usd;
  for (const auto& [d, usd] : by_day) days[d] = usd;
  return {{"jobs", list}, {"spend", {{"total_usd", total}, {"by_project", projects}, {"by_day_utc", days}}}};
}

std::string JobsTable(const std::vector<JobWithAttempts>& jobs) {
  std::string out = fmt::format("{:<36} {:<10} {:<12} {:>8} {:>9} {:>10}  {}\n", "job", "state", "project",
                                "attempts", "wall", "$", "run dir");
  for (const auto& [job, attempts] : jobs) {
    const JobTotals t = SumAttempts(attempts);
    out += fmt::format("{:<36} {:<10} {:<12} {:>8} {:>9} {:>10}  {}\n", job.job_id, job.state,
                       job.project.empty() ? "-" : job.project, t.attempts, FormatSeconds(t.wall_s),
                       FormatDollars(t.cost_usd), job.run_dir);
  }
  return out;
}

Status AddJobToSummary(const std::string& run_dir, const JobRow& job,
                       const std::vector<AttemptRow>& attempts) {
  const std::string path = run_dir + "/summary.json";
  auto text = ReadFileToString(path);
  if (!text.ok()) return Status::Ok();  // a trainer that writes none (a test's fake): nothing to add to
  nlohmann::json summary = nlohmann::json::parse(*text, nullptr, false);
  if (!summary.is_object()) return Status::Ok();
  nlohmann::json j = JobJson(job, attempts);
  j["state"] = "done";
  summary["job"] = j;
  return WriteFileAtomic(path, summary.dump(2) + "\n");
}

}  // namespace tern::run
