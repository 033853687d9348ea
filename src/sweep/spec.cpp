#include "sweep/spec.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "run/job_spec.h"

namespace tern::sweep {
namespace {

namespace fs = std::filesystem;

std::string Absolute(const std::string& p, const fs::path& anchor) {
  fs::path path(p);
  if (path.is_relative()) path = anchor / path;
  return fs::absolute(path).lexically_normal().string();
}

Result<double> Number(const YAML::Node& n, const std::string& where) {
  try {
    return n.as<double>();
  } catch (const YAML::Exception&) {
    return Status::InvalidArgument(fmt::format("{}: '{}' is not a number", where, n.Scalar()));
  }
}

Result<int> Integer(const YAML::Node& n, const std::string& where) {
  try {
    return n.as<int>();
  } catch (const YAML::Exception&) {
    return Status::InvalidArgument(fmt::format("{}: '{}' is not a whole number", where, n.Scalar()));
  }
}

// `key: {choice: [a, b]}`, `{uniform: [lo, hi]}`, `{loguniform: [lo, hi]}` or `{int: [lo, hi]}`.
Result<Param> ParseParam(const std::string& key, const YAML::Node& n, const std::string& where) {
  const std::string at = fmt::format("{}: space.{}", where, key);
  const char* const kLaws = "choice: [a, b, ...], uniform: [lo, hi], loguniform: [lo, hi] or int: [lo, hi]";
  if (!n.IsMap() || n.size() != 1)
    return Status::InvalidArgument(fmt::format("{}: give one of {}", at, kLaws));
  const std::string law = n.begin()->first.as<std::string>();
  const YAML::Node v = n.begin()->second;
  Param p;
  p.key = key;
  if (law == "choice") {
    if (!v.IsSequence() || v.size() == 0)
      return Status::InvalidArgument(fmt::format("{}: choice needs a non-empty list, e.g. [a, b]", at));
    p.kind = Param::Kind::kChoice;
    for (const auto& c : v) {
      if (!c.IsScalar()) return Status::InvalidArgument(fmt::format("{}: choice values must be scalars", at));
      p.choices.push_back(c.Scalar());
    }
    return p;
  }
  if (law == "uniform")
    p.kind = Param::Kind::kUniform;
  else if (law == "loguniform")
    p.kind = Param::Kind::kLogUniform;
  else if (law == "int")
    p.kind = Param::Kind::kInt;
  else
    return Status::InvalidArgument(fmt::format("{}: unknown law '{}'; give one of {}", at, law, kLaws));
  if (!v.IsSequence() || v.size() != 2)
    return Status::InvalidArgument(fmt::format("{}: {} needs [lo, hi]", at, law));
  if (p.kind == Param::Kind::kInt) {
    TERN_ASSIGN_OR_RETURN(int lo, Integer(v[0], at));
    TERN_ASSIGN_OR_RETURN(int hi, Integer(v[1], at));
    p.lo = lo, p.hi = hi;
  } else {
    TERN_ASSIGN_OR_RETURN(p.lo, Number(v[0], at));
    TERN_ASSIGN_OR_RETURN(p.hi, Number(v[1], at));
    if (!std::isfinite(p.lo) || !std::isfinite(p.hi))
      return Status::InvalidArgument(
          fmt::format("{}: {} needs finite [lo, hi] (got {}, {})", at, law, p.lo, p.hi));
  }
  if (!(p.lo <= p.hi))
    return Status::InvalidArgument(fmt::format("{}: lo {} is above hi {}", at, p.lo, p.hi));
  if (p.kind == Param::Kind::kLogUniform && p.lo <= 0)
    return Status::InvalidArgument(fmt::format("{}: loguniform needs lo > 0 (got {})", at, p.lo));
  return p;
}

Status ParseAsha(const YAML::Node& n, const std::string& where, AshaSettings* a) {
  if (!n.IsMap())
    return Status::InvalidArgument(
        fmt::format("{}: asha: give {{eta: 4, min_steps: N, max_steps: M}}", where));
  for (const auto& kv : n) {
    const std::string k = kv.first.as<std::string>();
    const std::string at = fmt::format("{}: asha.{}", where, k);
    int* field = k == "eta"         ? &a->eta
                 : k == "min_steps" ? &a->min_steps
                 : k == "max_steps" ? &a->max_steps
                                    : nullptr;
    if (!field)
      return Status::InvalidArgument(fmt::format("{}: unknown key; asha has eta, min_steps, max_steps", at));
    TERN_ASSIGN_OR_RETURN(*field, Integer(kv.second, at));
  }
  if (a->eta < 2) return Status::InvalidArgument(fmt::format("{}: asha.eta must be 2 or more", where));
  if (a->min_steps < 1 || a->max_steps < a->min_steps)
    return Status::InvalidArgument(fmt::format("{}: asha needs 1 <= min_steps <= max_steps (got {} and {})",
                                               where, a->min_steps, a->max_steps));
  return Status::Ok();
}

// `job: {time_limit: "0:30:00", sbatch_args: "--partition=gpu"}`: checked as `tern run` checks a job:
// section; the instance and its price are the sweep's own keys.
Status ParseJob(const YAML::Node& n, const std::string& where, SweepSpec* s) {
  if (!n.IsMap())
    return Status::InvalidArgument(
        fmt::format("{}: job: give a mapping of job keys, e.g. {{time_limit: \"0:30:00\"}}", where));
  run::JobSpec scratch;
  for (const auto& kv : n) {
    const std::string k = kv.first.as<std::string>();
    const std::string at = fmt::format("{}: job.{}", where, k);
    if (!kv.second.IsScalar()) return Status::InvalidArgument(fmt::format("{}: expected a single value", at));
    const std::string v = kv.second.Scalar();
    if (k == "instance" || k == "price_per_hour")
      return Status::InvalidArgument(
          fmt::format("{}: give {} at the top of the sweep file (it prices the budget too)", at, k));
    if (k == "on") {
      if (v != "local" && v != "slurm")
        return Status::InvalidArgument(fmt::format("{}: '{}' is not one of local, slurm", at, v));
      s->on = v;
      continue;
    }
    TERN_RETURN_IF_ERROR(run::SetJobKey(k, v, &scratch).WithContext(where));
    s->job.emplace_back(k, v);
  }
  return Status::Ok();
}

// The values of one key in a grid, in 64 bits: an int law's hi - lo + 1 can exceed an int
// ([-2147483648, 2147483647] has 2^32 values; the cast once overflowed).
int64_t GridSize(const Param& p) {
  return p.kind == Param::Kind::kChoice ? static_cast<int64_t>(p.choices.size())
                                        : static_cast<int64_t>(p.hi) - static_cast<int64_t>(p.lo) + 1;
}

constexpr int64_t kMaxGrid = 1 << 20;  // the most trials a grid may have

std::string FormatNumber(double v) {
  return fmt::format("{:.6g}", v);
}

Result<Objective> ParseObjective(const std::string& name, const std::string& at) {
  for (Objective o : {Objective::kValLoss, Objective::kChoiceError, Objective::kChoiceErrorNorm,
                      Objective::kValLossMean, Objective::kValLossMax})
    if (name == ObjectiveName(o)) return o;
  return Status::InvalidArgument(fmt::format(
      "{}: '{}' is not one of val_loss, choice_error, choice_error_norm (these two need eval.choices), "
      "val_loss_mean, val_loss_max (these two need data.mix)",
      at, name));
}

Result<SweepSpec> ParseRoot(const YAML::Node& root, const std::string& path) {
  if (!root.IsMap())
    return Status::InvalidArgument(fmt::format("{}: expected a mapping of sweep keys", path));
  const fs::path anchor = fs::absolute(fs::path(path)).parent_path();
  SweepSpec s;
  std::string sampler = "random";
  for (const auto& kv : root) {
    const std::string k = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    const std::string at = fmt::format("{}: {}", path, k);
    if (k == "base") {
      s.base_config = Absolute(v.as<std::string>(), anchor);
    } else if (k == "dir") {
      s.dir = Absolute(v.as<std::string>(), anchor);
    } else if (k == "sampler") {
      sampler = v.as<std::string>();
    } else if (k == "seed") {
      TERN_ASSIGN_OR_RETURN(int seed, Integer(v, at));
      s.seed = static_cast<uint64_t>(seed);
    } else if (k == "trials") {
      TERN_ASSIGN_OR_RETURN(s.trials, Integer(v, at));
    } else if (k == "parallel") {
      TERN_ASSIGN_OR_RETURN(s.parallel, Integer(v, at));
    } else if (k == "budget_usd") {
      TERN_ASSIGN_OR_RETURN(s.budget_usd, Number(v, at));
    } else if (k == "price_per_hour") {
      TERN_ASSIGN_OR_RETURN(s.price_per_hour, Number(v, at));
    } else if (k == "instance") {
      s.instance = v.as<std::string>();
    } else if (k == "objective") {
      TERN_ASSIGN_OR_RETURN(s.objective, ParseObjective(v.as<std::string>(), at));
    } else if (k == "asha") {
      TERN_RETURN_IF_ERROR(ParseAsha(v, path, &s.asha));
    } else if (k == "job") {
      TERN_RETURN_IF_ERROR(ParseJob(v, path, &s));
    } else if (k == "set") {
      if (!v.IsMap()) return Status::InvalidArgument(fmt::format("{}: give a mapping of key: value", at));
      for (const auto& o : v) s.overrides.push_back(o.first.as<std::string>() + "=" + o.second.Scalar());
    } else if (k == "space") {
      if (!v.IsMap() || v.size() == 0)
        return Status::InvalidArgument(fmt::format("{}: give a mapping of config keys to laws", at));
      for (const auto& p : v) {
        TERN_ASSIGN_OR_RETURN(Param param, ParseParam(p.first.as<std::string>(), p.second, path));
        s.space.push_back(std::move(param));
      }
    } else {
      return Status::InvalidArgument(
          fmt::format("{}: unknown key; a sweep has base, dir, space, sampler, seed, trials, asha, instance, "
                      "price_per_hour, budget_usd, parallel, set, job, objective",
                      at));
    }
  }
  if (s.base_config.empty())
    return Status::InvalidArgument(
        fmt::format("{}: give base: the training config each trial starts from", path));
  if (s.space.empty())
    return Status::InvalidArgument(fmt::format("{}: give space: the keys to search", path));
  if (s.asha.max_steps == 0)
    return Status::InvalidArgument(fmt::format("{}: give asha: {{min_steps: N, max_steps: M}}", path));
  if (sampler == "grid") {
    s.grid = true;
    for (const Param& p : s.space) {
      if (p.kind == Param::Kind::kUniform || p.kind == Param::Kind::kLogUniform)
        return Status::InvalidArgument(fmt::format(
            "{}: space.{}: a grid needs choice or int values; use choice: [...] or sampler: random", path,
            p.key));
      if (GridSize(p) > kMaxGrid)
        return Status::InvalidArgument(
            fmt::format("{}: space.{}: a grid over {} values is more than {} trials; narrow the range or use "
                        "sampler: random",
                        path, p.key, GridSize(p), kMaxGrid));
    }
  } else if (sampler != "random") {
    return Status::InvalidArgument(
        fmt::format("{}: sampler: '{}' is not one of random, grid", path, sampler));
  }
  if (!s.grid && s.trials < 1)
    return Status::InvalidArgument(
        fmt::format("{}: trials: give how many trials to sample (1 or more)", path));
  if (s.parallel < 1) return Status::InvalidArgument(fmt::format("{}: parallel must be 1 or more", path));
  if (s.budget_usd < 0) return Status::InvalidArgument(fmt::format("{}: budget_usd must be >= 0", path));
  if (!s.instance.empty() && s.price_per_hour > 0)
    return Status::InvalidArgument(fmt::format("{}: give instance or price_per_hour, not both", path));
  if (s.dir.empty()) s.dir = Absolute("sweeps/" + fs::path(path).stem().string(), fs::current_path());
  return s;
}

}  // namespace

const char* ObjectiveName(Objective o) {
  switch (o) {
    case Objective::kValLoss:
      return "val_loss";
    case Objective::kChoiceError:
      return "choice_error";
    case Objective::kChoiceErrorNorm:
      return "choice_error_norm";
    case Objective::kValLossMean:
      return "val_loss_mean";
    case Objective::kValLossMax:
      return "val_loss_max";
  }
  return "?";
}

const char* ObjectiveLabel(Objective o) {
  switch (o) {
    case Objective::kValLoss:
      return "val loss";
    case Objective::kChoiceError:
      return "choice error (1 - acc)";
    case Objective::kChoiceErrorNorm:
      return "choice error (1 - acc_norm)";
    case Objective::kValLossMean:
      return "mean val loss over the datasets";
    case Objective::kValLossMax:
      return "worst val loss over the datasets";
  }
  return "?";
}

Result<SweepSpec> ParseSweepSpec(std::string_view text, const std::string& path) {
  try {
    return ParseRoot(YAML::Load(std::string(text)), path);
  } catch (const YAML::Exception& e) {  // malformed YAML, or a list or map where a value was expected
    return Status::InvalidArgument(
        fmt::format("{}: not valid YAML or a value of the wrong shape: {}", path, e.what()));
  }
}

Result<SweepSpec> LoadSweepSpec(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(fmt::format("cannot read the sweep file {}", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseSweepSpec(ss.str(), path);
}

std::vector<int> RungSteps(const AshaSettings& a) {
  std::vector<int> out;
  for (int64_t s = a.min_steps; s < a.max_steps; s *= a.eta) out.push_back(static_cast<int>(s));
  out.push_back(a.max_steps);
  return out;
}

int TrialCount(const SweepSpec& spec) {
  if (!spec.grid) return spec.trials;
  int64_t n = 1;
  for (const Param& p : spec.space) n = std::min<int64_t>(n * GridSize(p), kMaxGrid);
  return spec.trials > 0 && spec.trials < n ? spec.trials : static_cast<int>(n);
}

std::vector<std::pair<std::string, std::string>> SampleTrial(const SweepSpec& spec, int index) {
  std::vector<std::pair<std::string, std::string>> out;
  if (spec.grid) {  // the index in mixed radix, the last key fastest
    std::vector<int> digit(spec.space.size());
    int64_t rest = index;
    for (size_t i = spec.space.size(); i-- > 0;) {
      digit[i] = static_cast<int>(rest % GridSize(spec.space[i]));
      rest /= GridSize(spec.space[i]);
    }
    for (size_t i = 0; i < spec.space.size(); i++) {
      const Param& p = spec.space[i];
      out.emplace_back(p.key, p.kind == Param::Kind::kChoice
                                  ? p.choices[digit[i]]
                                  : std::to_string(static_cast<int>(p.lo) + digit[i]));
    }
    return out;
  }
  // The 64-bit Mersenne Twister's output is fixed by the standard; the distributions are not, so u in [0, 1)
  // is made here from the top 53 bits.
  std::mt19937_64 rng(spec.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(index) + 1);
  for (const Param& p : spec.space) {
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    switch (p.kind) {
      case Param::Kind::kChoice:
        out.emplace_back(
            p.key, p.choices[std::min(p.choices.size() - 1, static_cast<size_t>(u * p.choices.size()))]);
        break;
      case Param::Kind::kUniform:
        out.emplace_back(p.key, FormatNumber(p.lo + u * (p.hi - p.lo)));
        break;
      case Param::Kind::kLogUniform:
        out.emplace_back(p.key,
                         FormatNumber(std::exp(std::log(p.lo) + u * (std::log(p.hi) - std::log(p.lo)))));
        break;
      case Param::Kind::kInt:
        out.emplace_back(
            p.key,
            std::to_string(static_cast<int>(std::min(p.hi, p.lo + std::floor(u * (p.hi - p.lo + 1))))));
        break;
    }
  }
  return out;
}

}  // namespace tern::sweep
