#include "pipeline/pipeline.h"

#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "backend/registry.h"
#include "core/file_util.h"
#include "data/loader.h"
#include "fmt/format.h"
#include "infer/evaluate.h"
#include "infer/weights.h"
#include "registry/registry.h"
#include "registry/source.h"
#include "train/remote_data.h"
#include "train/train_config.h"

extern char** environ;

namespace tern::pipeline {
namespace {

namespace fs = std::filesystem;

// Runs argv with this process's stdin, stdout and stderr; its exit code (-1 when killed by a signal).
Result<int> RunInherited(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  if (int err = ::posix_spawn(&pid, args[0], nullptr, nullptr, args.data(), environ); err != 0)
    return Status::IoError(fmt::format("cannot start {}: {}", argv[0], std::strerror(err)));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR)
      return Status::IoError(fmt::format("waiting for {}: {}", argv[0], std::strerror(errno)));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The training config after the spec's overrides: where the run lands and what data it read.
Result<TrainConfig> CandidateConfig(const PipelineSpec& spec) {
  TrainConfig cfg;
  TERN_RETURN_IF_ERROR(LoadTrainConfigFile(spec.config, &cfg));
  for (const auto& s : spec.set) TERN_RETURN_IF_ERROR(ApplyOverride(s, &cfg).WithContext("train.set " + s));
  return cfg;
}

// What every model of this pipeline is evaluated on: the spec's, else the candidate run's own data and T.
struct EvalInputs {
  std::vector<std::string> shards, prompts;
  std::vector<ChoiceItem> choices;
  std::string data;
  EvalOptions options;
};

Result<EvalInputs> ResolveEvalInputs(const PipelineSpec& spec, const std::string& run_dir) {
  EvalInputs in;
  TrainConfig train;
  const std::string config = (fs::path(run_dir) / "config.yaml").string();
  const bool have = fs::exists(config) && LoadTrainConfigFile(config, &train).ok();
  in.data = !spec.data.empty() ? spec.data : have ? train.data_dir : "";
  if (in.data.empty())
    return Status::InvalidArgument("evaluate.data is missing and " + run_dir +
                                   " has no config.yaml naming its data");
  // s3:// data (data.dir or evaluate.data): this machine's verified copy of it (train/remote_data.h).
  TERN_ASSIGN_OR_RETURN(const std::string local, LocalDataDir(in.data, DataMirrorOptionsFor(train)));
  TERN_ASSIGN_OR_RETURN(in.shards, FindShards(local, spec.split));
  in.options.seq_len = spec.seq_len > 0 ? spec.seq_len : have ? train.seq_len : 0;
  in.options.max_windows = spec.windows;
  if (!spec.prompts.empty()) {
    std::ifstream f(spec.prompts);
    if (!f) return Status::NotFound("cannot read evaluate.prompts " + spec.prompts);
    for (std::string line; std::getline(f, line);)
      if (!line.empty()) in.prompts.push_back(line);
    if (in.prompts.empty())
      return Status::InvalidArgument("evaluate.prompts " + spec.prompts + " holds no prompt");
  }
  if (!spec.choices.empty()) {
    auto items = LoadChoiceItems(spec.choices);
    if (!items.ok()) return items.status().WithContext("evaluate.choices");
    in.choices = std::move(items).value();
  }
  return in;
}

Result<Judgement> Judge(const std::string& model_dir, const EvalInputs& in) {
  TERN_ASSIGN_OR_RETURN(ModelWeights w, LoadModelWeights(model_dir));
  TERN_ASSIGN_OR_RETURN(auto backend, MakeBackend("cpu"));
  EvalOptions o = in.options;
  o.seq_len = std::min(o.seq_len > 0 ? o.seq_len : w.config.block_size, w.config.block_size);
  TERN_ASSIGN_OR_RETURN(EvalResult r, EvaluateShards(backend.get(), w.config, w.params, in.shards, o));
  Judgement j;
  j.loss = r.loss;
  j.perplexity = r.perplexity();
  j.windows = r.windows;
  j.tokens = r.tokens;
  if (in.prompts.empty() && in.choices.empty()) return j;
  TERN_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::Load(w.tokenizer_path));
  if (!in.prompts.empty()) {
    TERN_ASSIGN_OR_RETURN(auto scores,
                          ScorePrompts(backend.get(), w.config, w.params, tok, in.prompts, o.quantize));
    double sum = 0;
    for (const auto& s : scores) sum += s.logprob;
    j.prompt_logprob = sum;
  }
  if (!in.choices.empty()) {
    TERN_ASSIGN_OR_RETURN(ChoiceResult c,
                          ScoreChoices(backend.get(), w.config, w.params, tok, in.choices, o.quantize));
    j.choice_acc = c.acc();
    j.choice_acc_norm = c.acc_norm();
    j.choice_items = c.items;
  }
  return j;
}

double Value(Metric m, const Judgement& j) {
  switch (m) {
    case Metric::kLoss:
      return j.loss;
    case Metric::kPromptLogprob:
      return j.prompt_logprob.value_or(NAN);
    case Metric::kChoiceAcc:
      return j.choice_acc.value_or(NAN);
    case Metric::kChoiceAccNorm:
      return j.choice_acc_norm.value_or(NAN);
  }
  return NAN;
}

Result<std::unique_ptr<registry::Registry>> OpenRegistry(const PipelineSpec& spec) {
  return registry::OpenRegistry(spec.registry, spec.key_file);
}

PipelineOutcome Failed(PipelineOutcome out, const std::string& step, const Status& st) {
  out.exit_code = kFailed;
  out.decision = fmt::format("failed at {}: {} (no alias was moved)", step, st.message());
  return out;
}

}  // namespace

nlohmann::json Judgement::ToJson() const {
  nlohmann::json j = {{"loss", loss}, {"perplexity", perplexity}, {"windows", windows}, {"tokens", tokens}};
  if (prompt_logprob) j["prompt_logprob"] = *prompt_logprob;
  if (choice_acc) {
    j["choice_acc"] = *choice_acc;
    j["choice_acc_norm"] = choice_acc_norm.value_or(NAN);
    j["choice_items"] = choice_items;
  }
  return j;
}

nlohmann::json PipelineOutcome::ToJson(const PipelineSpec& spec) const {
  nlohmann::json j = {{"name", spec.name},
                      {"alias", spec.alias},
                      {"metric", MetricName(spec.metric)},
                      {"margin", spec.margin},
                      {"exit_code", exit_code},
                      {"decision", decision},
                      {"run_dir", run_dir},
                      {"promoted", exit_code == kPromoted && version > 0 && spec.promote}};
  if (version > 0) j["version"] = version;
  if (baseline_version) j["baseline_version"] = *baseline_version;
  if (candidate) j["candidate"] = candidate->ToJson();
  if (baseline) j["baseline"] = baseline->ToJson();
  return j;
}

bool IsBetter(Metric metric, double margin, const Judgement& candidate, const Judgement& baseline) {
  const double c = Value(metric, candidate), b = Value(metric, baseline);
  if (std::isnan(c) || std::isnan(b)) return false;
  return metric == Metric::kLoss ? c < b * (1 - margin) : c > b + margin * std::fabs(b);
}

PipelineOutcome RunPipeline(const PipelineSpec& spec, const PipelineOptions& options) {
  PipelineOutcome out;
  FILE* log = options.log;
  // 1. train
  if (!spec.model.empty()) {
    out.run_dir = spec.model;
  } else {
    auto cfg = CandidateConfig(spec);
    if (!cfg.ok()) return Failed(out, "train", cfg.status());
    out.run_dir = cfg->run_dir;
    std::vector<std::string> argv = {options.tern_binary, "run", spec.config};
    for (const auto& s : spec.set) argv.insert(argv.end(), {"--set", s});
    argv.insert(argv.end(), spec.run_args.begin(), spec.run_args.end());
    if (options.quiet) argv.push_back("--quiet");
    std::fprintf(log, "tern pipeline: train: tern run %s -> %s\n", spec.config.c_str(), out.run_dir.c_str());
    auto code = RunInherited(argv);
    if (!code.ok()) return Failed(out, "train", code.status());
    if (*code != 0)
      return Failed(out, "train",
                    Status::Internal(fmt::format("tern run exited {} (see its output above)", *code)));
  }
  // 2. evaluate the candidate
  auto inputs = ResolveEvalInputs(spec, out.run_dir);
  if (!inputs.ok()) return Failed(out, "evaluate", inputs.status());
  std::fprintf(log, "tern pipeline: evaluate: %s on %s/%s_*.bin\n", out.run_dir.c_str(), inputs->data.c_str(),
               spec.split.c_str());
  auto cand = Judge(out.run_dir, *inputs);
  if (!cand.ok()) return Failed(out, "evaluate", cand.status().WithContext(out.run_dir));
  out.candidate = *cand;

  // 3. compare with the version under the alias, on the same windows
  auto reg = OpenRegistry(spec);
  if (!reg.ok()) return Failed(out, "compare", reg.status());
  auto aliases = (*reg)->Aliases(spec.name);
  if (!aliases.ok()) return Failed(out, "compare", aliases.status());
  for (const auto& a : *aliases)
    if (a.alias == spec.alias) out.baseline_version = a.version;
  if (out.baseline_version) {
    registry::ModelRef ref;
    ref.name = spec.name;
    ref.version = *out.baseline_version;
    auto dir = (*reg)->Materialize(ref);
    if (!dir.ok()) return Failed(out, "compare", dir.status().WithContext(ref.ToString()));
    auto base = Judge(*dir, *inputs);
    if (!base.ok()) return Failed(out, "compare", base.status().WithContext(ref.ToString()));
    out.baseline = *base;
  }

  // 4. register
  auto source = registry::ReadModelSource(out.run_dir);
  if (!source.ok()) return Failed(out, "register", source.status());
  registry::RegisterOptions ro;
  ro.name = spec.name;
  ro.note = spec.note;
  auto entry = (*reg)->Register(*source, ro);
  if (!entry.ok()) return Failed(out, "register", entry.status());
  out.version = entry->version;

  // 5. promote
  const bool better = !out.baseline || IsBetter(spec.metric, spec.margin, *out.candidate, *out.baseline);
  const std::string metric = MetricName(spec.metric);
  const std::string versus =
      out.baseline ? fmt::format("{} {:.4f} vs {:.4f} for {}@{} (v{}), margin {:g}", metric,
                                 Value(spec.metric, *out.candidate), Value(spec.metric, *out.baseline),
                                 spec.name, spec.alias, *out.baseline_version, spec.margin)
                   : fmt::format("{} {:.4f}; no version held {}@{}", metric,
                                 Value(spec.metric, *out.candidate), spec.name, spec.alias);
  if (!better) {
    out.exit_code = kNotBetter;
    out.decision = fmt::format("not better: {}@{} registered, {} stays on v{} ({})", spec.name, out.version,
                               spec.alias, *out.baseline_version, versus);
    return out;
  }
  if (!spec.promote) {
    out.exit_code = kPromoted;
    out.decision =
        fmt::format("better, not promoted (promote: false): {}@{} ({})", spec.name, out.version, versus);
    return out;
  }
  if (Status st = (*reg)->SetAlias(spec.name, out.version, spec.alias); !st.ok())
    return Failed(out, "promote", st);
  out.exit_code = kPromoted;
  out.decision = fmt::format("promoted: {}@{} -> v{} ({})", spec.name, spec.alias, out.version, versus);
  return out;
}

}  // namespace tern::pipeline
