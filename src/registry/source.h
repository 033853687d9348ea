// What `tern models register` reads from a run directory or a checkpoint: the weights (as the
// model.safetensors that `tern serve` loads), the tokenizer, the config, the data fingerprint (the
// prepare.json of the config's data.dir), metrics (summary.json) and the job (the run's ledger.sqlite).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace tern::registry {

struct ModelSource {
  std::string path;        // absolute
  std::string kind;        // run_dir | checkpoint
  std::string weights;     // model.safetensors bytes (a checkpoint's tensors are rewritten in this format)
  std::string tokenizer;   // tokenizer.model bytes
  std::string adapter;     // adapter.safetensors bytes of a LoRA run ("" for any other; infer/adapter.h)
  nlohmann::json model;    // n_layer, n_head, n_embd, vocab_size, block_size
  nlohmann::json config;   // config.yaml flattened to dotted keys ({} when absent)
  nlohmann::json data;     // {"dir", "prepare_sha256", "prepare", "content" (when recorded)} or null
  nlohmann::json metrics;  // val_loss, train_loss, tokens, steps, cost_usd (those known)
  std::string run_dir;     // the training run directory ("" when unknown)
  std::string job_id;      // of `tern run`, from the run's ledger ("" when not run under it)
};

// Reads and checks everything (the weights must load as `tern serve` loads them); nothing is written.
Result<ModelSource> ReadModelSource(const std::string& path);

// YAML text -> {"a.b": value, ...} (scalars as numbers/bools when they parse, else strings).
Result<nlohmann::json> FlattenYaml(const std::string& yaml_text, const std::string& where);

}  // namespace tern::registry
