#include "pipeline/pipeline_spec.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <set>
#include <sstream>

#include "fmt/format.h"

namespace tern::pipeline {
namespace {

// Every key of `node` must be one of `allowed`.
Status CheckKeys(const YAML::Node& node, const std::string& section, const std::set<std::string>& allowed,
                 const std::string& where) {
  if (!node.IsMap())
    return Status::InvalidArgument(fmt::format("{}: `{}` must be a mapping", where, section));
  for (const auto& kv : node) {
    // A key that is itself a list or a mapping (`[a, b]: 1`): as<std::string>() would throw.
    if (!kv.first.IsScalar())
      return Status::InvalidArgument(
          fmt::format("{}: a key in `{}` (line {}) is a list or a mapping; keys are "
                      "plain words (name, train, evaluate, ...)",
                      where, section.empty() ? "the top level" : section, kv.first.Mark().line + 1));
    const std::string key = kv.first.as<std::string>();
    if (!allowed.count(key)) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      return Status::InvalidArgument(fmt::format("{}: unknown key `{}{}{}` (line {}); the keys are: {}",
                                                 where, section, section.empty() ? "" : ".", key,
                                                 kv.first.Mark().line + 1, list));
    }
  }
  return Status::Ok();
}

template <typename T>
Status Read(const YAML::Node& node, const char* key, const std::string& section, const std::string& where,
            T* out) {
  if (!node[key]) return Status::Ok();
  try {
    *out = node[key].as<T>();
  } catch (const YAML::Exception&) {
    return Status::InvalidArgument(
        fmt::format("{}: `{}.{}` (line {}) has a bad value", where, section, key, node[key].Mark().line + 1));
  }
  return Status::Ok();
}

}  // namespace

const char* MetricName(Metric m) {
  switch (m) {
    case Metric::kLoss:
      return "loss";
    case Metric::kPromptLogprob:
      return "prompt_logprob";
    case Metric::kChoiceAcc:
      return "choice_acc";
    case Metric::kChoiceAccNorm:
      return "choice_acc_norm";
  }
  return "?";
}

Result<PipelineSpec> ParsePipelineSpec(const std::string& yaml_text, const std::string& where) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(fmt::format("{}: not valid YAML: {}", where, e.what()));
  }
  if (!root.IsMap())
    return Status::InvalidArgument(where + ": a pipeline is a mapping (name, train, evaluate, ...)");
  TERN_RETURN_IF_ERROR(
      CheckKeys(root, "", {"name", "train", "evaluate", "compare", "register", "promote"}, where));
  PipelineSpec s;
  std::string metric = "loss";
  try {
    if (root["name"]) s.name = root["name"].as<std::string>();
    if (root["promote"]) s.promote = root["promote"].as<bool>();
  } catch (const YAML::Exception&) {
    return Status::InvalidArgument(where + ": `name` must be text and `promote` true or false");
  }
  if (const auto t = root["train"]) {
    TERN_RETURN_IF_ERROR(CheckKeys(t, "train", {"config", "model", "set", "run_args"}, where));
    TERN_RETURN_IF_ERROR(Read(t, "config", "train", where, &s.config));
    TERN_RETURN_IF_ERROR(Read(t, "model", "train", where, &s.model));
    TERN_RETURN_IF_ERROR(Read(t, "set", "train", where, &s.set));
    TERN_RETURN_IF_ERROR(Read(t, "run_args", "train", where, &s.run_args));
  }
  if (const auto e = root["evaluate"]) {
    TERN_RETURN_IF_ERROR(
        CheckKeys(e, "evaluate", {"data", "split", "seq_len", "windows", "prompts", "choices"}, where));
    TERN_RETURN_IF_ERROR(Read(e, "data", "evaluate", where, &s.data));
    TERN_RETURN_IF_ERROR(Read(e, "split", "evaluate", where, &s.split));
    TERN_RETURN_IF_ERROR(Read(e, "seq_len", "evaluate", where, &s.seq_len));
    TERN_RETURN_IF_ERROR(Read(e, "windows", "evaluate", where, &s.windows));
    TERN_RETURN_IF_ERROR(Read(e, "prompts", "evaluate", where, &s.prompts));
    TERN_RETURN_IF_ERROR(Read(e, "choices", "evaluate", where, &s.choices));
  }
  if (const auto c = root["compare"]) {
    TERN_RETURN_IF_ERROR(CheckKeys(c, "compare", {"alias", "metric", "margin"}, where));
    TERN_RETURN_IF_ERROR(Read(c, "alias", "compare", where, &s.alias));
    TERN_RETURN_IF_ERROR(Read(c, "metric", "compare", where, &metric));
    TERN_RETURN_IF_ERROR(Read(c, "margin", "compare", where, &s.margin));
  }
  if (const auto r = root["register"]) {
    TERN_RETURN_IF_ERROR(CheckKeys(r, "register", {"registry", "key_file", "note"}, where));
    TERN_RETURN_IF_ERROR(Read(r, "registry", "register", where, &s.registry));
    TERN_RETURN_IF_ERROR(Read(r, "key_file", "register", where, &s.key_file));
    TERN_RETURN_IF_ERROR(Read(r, "note", "register", where, &s.note));
  }
  if (s.name.empty())
    return Status::InvalidArgument(where + ": `name` (the model's name in the registry) is missing");
  if (s.config.empty() == s.model.empty())
    return Status::InvalidArgument(
        where + ": give one of `train.config` (train a job) or `train.model` (a trained run)");
  if (metric == "loss") {
    s.metric = Metric::kLoss;
  } else if (metric == "prompt_logprob") {
    s.metric = Metric::kPromptLogprob;
  } else if (metric == "choice_acc") {
    s.metric = Metric::kChoiceAcc;
  } else if (metric == "choice_acc_norm") {
    s.metric = Metric::kChoiceAccNorm;
  } else {
    return Status::InvalidArgument(fmt::format(
        "{}: compare.metric '{}': use loss, prompt_logprob, choice_acc or choice_acc_norm", where, metric));
  }
  if (s.metric == Metric::kPromptLogprob && s.prompts.empty())
    return Status::InvalidArgument(where + ": compare.metric prompt_logprob needs evaluate.prompts");
  if ((s.metric == Metric::kChoiceAcc || s.metric == Metric::kChoiceAccNorm) && s.choices.empty())
    return Status::InvalidArgument(
        fmt::format("{}: compare.metric {} needs evaluate.choices (a multiple-choice set)", where, metric));
  if (s.margin < 0 || s.margin >= 1)
    return Status::InvalidArgument(fmt::format("{}: compare.margin {} must be in [0, 1)", where, s.margin));
  if (s.windows < 0 || s.seq_len < 0)
    return Status::InvalidArgument(where + ": evaluate.windows and evaluate.seq_len must be >= 0");
  if (s.alias.empty()) return Status::InvalidArgument(where + ": compare.alias is empty");
  return s;
}

Result<PipelineSpec> LoadPipelineSpec(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read the pipeline " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ParsePipelineSpec(ss.str(), path);
}

}  // namespace tern::pipeline
