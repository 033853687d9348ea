#include "plan/model_spec.h"

#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "plan/units.h"

namespace tern::plan {

Result<GptConfig> GptConfigForParams(double params, int vocab_size, int block_size) {
  if (!(params >= 1e6 && params <= 1e12)) {
    return Status::InvalidArgument(fmt::format("--params: {} is outside 1M..1T", FormatCount(params)));
  }
  GptConfig best;
  double best_err = 1e300;
  // Depth from the GPT-2 family's growth; then try widths around it and a layer either side, keeping
  // the closest parameter count. Cheap (a few hundred counts) and deterministic.
  const int l0 = std::max(2, static_cast<int>(std::lround(12.0 * std::pow(params / 124e6, 0.55))));
  for (int L = std::max(1, l0 - 1); L <= l0 + 1; ++L) {
    for (int C = 64; C <= 16384; C += 64) {
      GptConfig cfg;
      cfg.n_layer = L;
      cfg.n_embd = C;
      cfg.n_head = C / 64;
      cfg.vocab_size = vocab_size;
      cfg.block_size = block_size;
      const double err =
          std::fabs(static_cast<double>(GptParamCount(cfg)) - params) + (L == l0 ? 0 : 0.01 * params);
      if (err < best_err) {
        best_err = err;
        best = cfg;
      }
    }
  }
  return best;
}

Result<GptConfig> LoadModelYaml(const std::string& path) {
  GptConfig cfg;
  try {
    YAML::Node root = YAML::LoadFile(path);
    YAML::Node m = root["model"];
    if (!m || !m.IsMap()) {
      return Status::InvalidArgument(fmt::format(
          "{}: no `model:` block (expected keys n_layer, n_head, n_embd, vocab_size, block_size)", path));
    }
    auto read = [&](const char* key, int* out) {
      if (m[key]) *out = m[key].as<int>();
    };
    read("n_layer", &cfg.n_layer);
    read("n_head", &cfg.n_head);
    read("n_embd", &cfg.n_embd);
    read("vocab_size", &cfg.vocab_size);
    read("block_size", &cfg.block_size);
    // vocab_size 0 means "the tokenizer's" in a training config; the planner cannot open the tokenizer,
    // so it assumes the demo's 4096 as `tern bench --config` does (the vocabulary barely moves the plan).
    if (cfg.vocab_size == 0) cfg.vocab_size = kAssumedTokenizerVocab;
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(fmt::format("{}: {}", path, e.what()));
  }
  TERN_RETURN_IF_ERROR(cfg.Validate().WithContext(path));
  return cfg;
}

Result<ModelChoice> ResolveModel(const std::string& model_arg, const std::string& params_arg) {
  if (model_arg.empty() == params_arg.empty()) {
    return Status::InvalidArgument(
        "give exactly one of --model (gpt2-124m, a YAML config), --params (e.g. 1.3B) or --config (a tern "
        "train config)");
  }
  ModelChoice choice;
  if (!params_arg.empty()) {
    TERN_ASSIGN_OR_RETURN(double p, ParseCount(params_arg, "--params"));
    TERN_ASSIGN_OR_RETURN(choice.cfg, GptConfigForParams(p));
    choice.label = fmt::format("~{} params", FormatCount(static_cast<double>(GptParamCount(choice.cfg))));
    return choice;
  }
  const bool looks_like_file =
      model_arg.ends_with(".yaml") || model_arg.ends_with(".yml") || std::filesystem::exists(model_arg);
  if (looks_like_file) {
    TERN_ASSIGN_OR_RETURN(choice.cfg, LoadModelYaml(model_arg));
  } else {
    Result<GptConfig> preset = GptPreset(model_arg);
    if (!preset.ok()) {
      return Status::InvalidArgument(
          fmt::format("unknown model '{}': use one of {}, a YAML config path, or --params 1.3B", model_arg,
                      GptPresetList()));
    }
    choice.cfg = *preset;
  }
  choice.label = model_arg;
  return choice;
}

}  // namespace tern::plan
