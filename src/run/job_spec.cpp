#include "run/job_spec.h"

#include <charconv>
#include <filesystem>
#include <functional>
#include <sstream>

#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "plan/units.h"
#include "run/clock.h"
#include "train/train_config.h"

namespace tern::run {
namespace {

Result<double> Number(const std::string& key, const std::string& text, double min_value) {
  double v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end)
    return Status::InvalidArgument(fmt::format("job.{}: '{}' is not a number", key, text));
  if (v < min_value)
    return Status::InvalidArgument(fmt::format("job.{}: {} is below the minimum {}", key, text, min_value));
  return v;
}

Result<int> Integer(const std::string& key, const std::string& text, int min_value) {
  int v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end)
    return Status::InvalidArgument(fmt::format("job.{}: '{}' is not a whole number", key, text));
  if (v < min_value)
    return Status::InvalidArgument(fmt::format("job.{}: {} is below the minimum {}", key, text, min_value));
  return v;
}

std::vector<std::string> Words(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream words(text);
  for (std::string w; words >> w;) out.push_back(w);
  return out;
}

struct JobKey {
  const char* name;
  const char* help;
  std::function<Status(JobSpec&, const std::string&)> set;
};

const std::vector<JobKey>& Keys() {
  static const std::vector<JobKey> keys = {
      {"instance", "provider:region:type[:on-demand|spot|reserved]; the price comes from the catalog",
       [](JobSpec& s, const std::string& v) {
         s.instance = v;
         return Status::Ok();
       }},
      {"price_per_hour", "USD per hour of the machine, when there is no instance in the catalog",
       [](JobSpec& s, const std::string& v) -> Status {
         TERN_ASSIGN_OR_RETURN(s.price_per_hour, Number("price_per_hour", v, 0));
         s.billing = "custom";
         return Status::Ok();
       }},
      {"ranks",
       "trainer processes (1 = plain `tern train`; more go through mpirun -np N); MIN-MAX (\"1-2\") is "
       "elastic: an attempt starts with as many as job.ranks_probe says can run, at least MIN",
       [](JobSpec& s, const std::string& v) -> Status {
         const size_t dash = v.find('-');
         if (dash == std::string::npos) {
           TERN_ASSIGN_OR_RETURN(s.ranks, Integer("ranks", v, 1));
           s.min_ranks = 0;
           return Status::Ok();
         }
         TERN_ASSIGN_OR_RETURN(s.min_ranks, Integer("ranks", v.substr(0, dash), 1));
         TERN_ASSIGN_OR_RETURN(s.ranks, Integer("ranks", v.substr(dash + 1), 1));
         if (s.min_ranks > s.ranks) {
           return Status::InvalidArgument(
               fmt::format("job.ranks: '{}' has its minimum above its maximum; write MIN-MAX, e.g. 1-2", v));
         }
         return Status::Ok();
       }},
      {"ranks_probe",
       "elastic ranks: a shell command printing how many ranks can run now (default: for train.device cuda, "
       "the GPUs `nvidia-smi -L` lists; else the maximum)",
       [](JobSpec& s, const std::string& v) {
         s.ranks_probe = v;
         return Status::Ok();
       }},
      {"on", "where the trainer runs: local (this machine) or slurm (sbatch; a requeued job resumes)",
       [](JobSpec& s, const std::string& v) {
         s.where = v;
         return Status::Ok();
       }},
      {"max_attempts", "attempts in all before giving up (a preemption counts as one)",
       [](JobSpec& s, const std::string& v) -> Status {
         TERN_ASSIGN_OR_RETURN(s.max_attempts, Integer("max_attempts", v, 1));
         return Status::Ok();
       }},
      {"budget", "USD the job may spend in all (\"50\", \"$50\", \"1.2k\"); 0 = no budget",
       [](JobSpec& s, const std::string& v) -> Status {
         TERN_ASSIGN_OR_RETURN(s.budget_usd, plan::ParseMoney(v, "job.budget"));
         return Status::Ok();
       }},
      {"deadline",
       "\"12h\", \"90m\", \"2d\" after the job was first started, or a UTC time "
       "2025-01-02T00:00:00Z",
       [](JobSpec& s, const std::string& v) -> Status {
         TERN_RETURN_IF_ERROR(DeadlineUnix(v, 1).status());
         s.deadline = v;
         return Status::Ok();
       }},
      {"policy",
       "the live spot policy: none, or uniform-progress (each attempt on spot or on-demand by the Uniform "
       "Progress rules, billed at the instance's spot or on-demand price; needs job.deadline)",
       [](JobSpec& s, const std::string& v) -> Status {
         if (v != "none" && v != "uniform-progress") {
           return Status::InvalidArgument(
               fmt::format("job.policy: '{}' is not a live policy; choose uniform-progress (or none)", v));
         }
         s.policy = v == "none" ? "" : v;
         return Status::Ok();
       }},
      {"restart_overhead",
       "the live policy's d: a new instance's start-up and resume (\"5m\"; 300 s), as `tern simulate "
       "--restart-overhead`",
       [](JobSpec& s, const std::string& v) -> Status {
         TERN_ASSIGN_OR_RETURN(s.restart_overhead_s, ParseSeconds(v, "job.restart_overhead"));
         return Status::Ok();
       }},
      {"policy_tick", "how often the live policy decides while an attempt runs (60 s)",
       [](JobSpec& s, const std::string& v) -> Status {
         TERN_ASSIGN_OR_RETURN(s.policy_tick_s, ParseSeconds(v, "job.policy_tick"));
         if (s.policy_tick_s <= 0) return Status::InvalidArgument("job.policy_tick: must be above 0 s");
         return Status::Ok();
       }},
      {"project", "a tag the spend reports group by",
       [](JobSpec& s, const std::string& v) {
         s.project = v;
         return Status::Ok();
       }},
      {"heartbeat",
       "metrics.jsonl silent this long (\"600\", \"10m\") = hung: killed and relaunched; 0 = off",
       [](JobSpec& s, const std::string& v) -> Status {
         TERN_ASSIGN_OR_RETURN(s.heartbeat_s, ParseSeconds(v, "job.heartbeat"));
         return Status::Ok();
       }},
      {"kill_grace", "after a SIGTERM, how long the trainer may take to save before SIGKILL",
       [](JobSpec& s, const std::string& v) -> Status {
         TERN_ASSIGN_OR_RETURN(s.kill_grace_s, ParseSeconds(v, "job.kill_grace"));
         return Status::Ok();
       }},
      {"backoff", "first wait after a crash (doubles per failure in a row)",
       [](JobSpec& s, const std::string& v) -> Status {
         TERN_ASSIGN_OR_RETURN(s.backoff_s, ParseSeconds(v, "job.backoff"));
         return Status::Ok();
       }},
      {"backoff_max", "the longest wait between attempts",
       [](JobSpec& s, const std::string& v) -> Status {
         TERN_ASSIGN_OR_RETURN(s.backoff_max_s, ParseSeconds(v, "job.backoff_max"));
         return Status::Ok();
       }},
      {"mpirun_args", "extra mpirun arguments when ranks > 1, e.g. \"--allow-run-as-root --oversubscribe\"",
       [](JobSpec& s, const std::string& v) {
         s.mpirun_args = Words(v);
         return Status::Ok();
       }},
      {"nodes", "Slurm: nodes for the job (sbatch --nodes)",
       [](JobSpec& s, const std::string& v) -> Status {
         TERN_ASSIGN_OR_RETURN(s.nodes, Integer("nodes", v, 1));
         return Status::Ok();
       }},
      {"gpus_per_rank", "Slurm: GPUs per trainer process (--gpus-per-task); default 1 for train.device cuda",
       [](JobSpec& s, const std::string& v) -> Status {
         TERN_ASSIGN_OR_RETURN(s.gpus_per_rank, Integer("gpus_per_rank", v, 0));
         return Status::Ok();
       }},
      {"time_limit", "Slurm: the job's time limit (sbatch --time, e.g. 4:00:00); saved and requeued at it",
       [](JobSpec& s, const std::string& v) {
         s.time_limit = v;
         return Status::Ok();
       }},
      {"signal_lead", "Slurm: how long before the time limit the trainer saves (--signal=B:USR1@N; 120 s)",
       [](JobSpec& s, const std::string& v) -> Status {
         TERN_ASSIGN_OR_RETURN(s.signal_lead_s, ParseSeconds(v, "job.signal_lead"));
         return Status::Ok();
       }},
      {"sbatch_args", "Slurm: more sbatch options, e.g. \"--partition=gpu --account=ml\"",
       [](JobSpec& s, const std::string& v) {
         s.sbatch_args = Words(v);
         return Status::Ok();
       }},
      {"srun_args", "Slurm: srun options for the trainer (default --mpi=pmix when ranks > 1)",
       [](JobSpec& s, const std::string& v) {
         s.srun_args = Words(v);
         return Status::Ok();
       }},
  };
  return keys;
}

}  // namespace

Status SetJobKey(const std::string& key, const std::string& value, JobSpec* spec) {
  for (const JobKey& k : Keys())
    if (key == k.name) return k.set(*spec, value);
  std::vector<std::string> names;
  for (const JobKey& k : Keys()) names.push_back(std::string("job.") + k.name);
  return Status::InvalidArgument(
      fmt::format("unknown job key 'job.{}'; allowed keys: {}", key, fmt::join(names, ", ")));
}

Status LoadJobSection(const std::string& config_path, JobSpec* spec) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(config_path);
  } catch (const YAML::BadFile&) {
    return Status::NotFound(fmt::format("config file {} does not exist or cannot be read", config_path));
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(
        fmt::format("{}: YAML syntax error at line {}: {}", config_path, e.mark.line + 1, e.msg));
  }
  const YAML::Node job = root.IsMap() ? root["job"] : YAML::Node();
  if (!job || job.IsNull()) return Status::Ok();
  if (!job.IsMap())
    return Status::InvalidArgument(fmt::format("{}: job: must be a mapping of keys", config_path));
  for (const auto& kv : job) {
    const std::string key = kv.first.as<std::string>();
    if (!kv.second.IsScalar())
      return Status::InvalidArgument(fmt::format("{}: job.{}: expected a single value", config_path, key));
    TERN_RETURN_IF_ERROR(SetJobKey(key, kv.second.Scalar(), spec).WithContext(config_path));
  }
  return Status::Ok();
}

Status ValidateJobSpec(const JobSpec& spec) {
  if (spec.where != "local" && spec.where != "slurm")
    return Status::InvalidArgument(fmt::format("job.on: '{}' is not one of local, slurm", spec.where));
  if (spec.where == "slurm" && Elastic(spec)) {
    return Status::InvalidArgument(
        "elastic job.ranks (MIN-MAX) is for --on local: a Slurm allocation has the tasks sbatch gave it; "
        "give "
        "one number");
  }
  if (spec.where == "local" && spec.nodes > 1)
    return Status::InvalidArgument("job.nodes > 1 needs a cluster: run with --on slurm");
  if (!spec.instance.empty() && spec.billing == "custom") {
    return Status::InvalidArgument(
        "give either an instance (its price comes from the catalog) or a price per hour, not both");
  }
  if (spec.backoff_max_s < spec.backoff_s)
    return Status::InvalidArgument("job.backoff_max must be at least job.backoff");
  if (!spec.policy.empty() && (spec.deadline.empty() || spec.deadline == "0" || spec.deadline == "none")) {
    return Status::InvalidArgument(fmt::format(
        "--policy {} needs a deadline: the policy keeps the job on the straight line to it; add e.g. "
        "--deadline 48h",
        spec.policy));
  }
  if (!spec.policy.empty() && spec.where != "local") {
    return Status::InvalidArgument(
        "--policy is for --on local: under Slurm the allocation decides the machine; drop --policy");
  }
  return Status::Ok();
}

Result<double> DeadlineUnix(const std::string& deadline, double created_unix) {
  if (deadline.empty() || deadline == "0" || deadline == "none") return 0.0;
  if (deadline.find('T') != std::string::npos) {
    const double t = ParseUtc(deadline);
    if (t <= 0) {
      return Status::InvalidArgument(fmt::format(
          "job.deadline: '{}' is not a UTC time like 2025-01-02T00:00:00Z, nor a duration like 12h",
          deadline));
    }
    return t;
  }
  TERN_ASSIGN_OR_RETURN(double hours, plan::ParseDurationHours(deadline, "job.deadline"));
  return created_unix + hours * 3600;
}

Result<double> ParseSeconds(const std::string& text, const std::string& what) {
  double v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec == std::errc() && ptr == end && v >= 0) return v;
  TERN_ASSIGN_OR_RETURN(double hours, plan::ParseDurationHours(text, what));
  return hours * 3600;
}

Status ReadTrainConfig(JobSpec* spec, double* config_price) {
  TrainConfig cfg;
  TERN_RETURN_IF_ERROR(LoadTrainConfigFile(spec->config_path, &cfg));
  for (const auto& o : spec->overrides) TERN_RETURN_IF_ERROR(ApplyOverride(o, &cfg));
  TERN_RETURN_IF_ERROR(cfg.Validate());
  spec->run_dir = std::filesystem::absolute(cfg.run_dir).lexically_normal().string();
  while (spec->run_dir.size() > 1 && spec->run_dir.back() == '/') spec->run_dir.pop_back();
  spec->total_steps = cfg.steps;
  spec->cuda = cfg.device == TrainDevice::kCuda;
  *config_price = cfg.price_per_hour;
  return Status::Ok();
}

std::string DescribeJobKeys() {
  std::string out;
  for (const JobKey& k : Keys()) out += fmt::format("  job.{:<15} {}\n", k.name, k.help);
  return out;
}

}  // namespace tern::run
