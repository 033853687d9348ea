#include "registry/source.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>

#include <unistd.h>

#include "ckpt/storage.h"
#include "core/file_util.h"
#include "infer/adapter.h"
#include "infer/weights.h"
#include "metrics/run_record.h"
#include "model/safetensors.h"
#include "registry/digest.h"
#include "run/ledger.h"

namespace tern::registry {
namespace fs = std::filesystem;
namespace {

nlohmann::json Scalar(const std::string& s) {
  if (s == "true" || s == "false") return s == "true";
  try {
    size_t used = 0;
    long long i = std::stoll(s, &used);
    if (used == s.size()) return i;
    double d = std::stod(s, &used);
    if (used == s.size()) return d;
  } catch (const std::exception&) {
  }
  return s;
}

void Flatten(const YAML::Node& n, const std::string& prefix, nlohmann::json* out) {
  if (n.IsMap()) {
    for (const auto& kv : n) {
      const std::string key = kv.first.as<std::string>();
      Flatten(kv.second, prefix.empty() ? key : prefix + "." + key, out);
    }
  } else if (n.IsSequence()) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& e : n)
      arr.push_back(e.IsScalar() ? Scalar(e.as<std::string>()) : nlohmann::json(YAML::Dump(e)));
    (*out)[prefix] = arr;
  } else if (n.IsScalar()) {
    (*out)[prefix] = Scalar(n.as<std::string>());
  } else if (!prefix.empty()) {
    (*out)[prefix] = nullptr;
  }
}

// The run directory of a checkpoint RUN/checkpoints/step_N (or RUN/step_N): the first of up to three
// parents that holds config.yaml or tokenizer.model.
std::string RunDirOf(const fs::path& start) {
  fs::path dir = start;
  for (int up = 0; up < 4 && !dir.empty() && dir != dir.parent_path(); up++, dir = dir.parent_path()) {
    if (fs::exists(dir / "config.yaml") || fs::exists(dir / "summary.json") ||
        fs::exists(dir / "model.safetensors"))
      return dir.string();
  }
  return "";
}

Status ReadRunFacts(ModelSource* s) {
  if (s->run_dir.empty()) return Status::Ok();
  const fs::path run = s->run_dir;
  std::error_code ec;
  if (fs::is_regular_file(run / "config.yaml", ec)) {
    TERN_ASSIGN_OR_RETURN(std::string text, ReadFileToString((run / "config.yaml").string()));
    TERN_ASSIGN_OR_RETURN(s->config, FlattenYaml(text, (run / "config.yaml").string()));
  }
  if (s->config.contains("data.dir") && s->config["data.dir"].is_string()) {
    const std::string given = s->config["data.dir"].get<std::string>();
    fs::path data = given;
    std::string text, dir;
    if (ckpt::IsS3Uri(given)) {  // data published with `tern prepare --out s3://...`: its prepare.json there
      ckpt::S3Options s3;
      if (s->config.contains("ckpt.s3_endpoint") && s->config["ckpt.s3_endpoint"].is_string())
        s3.endpoint = s->config["ckpt.s3_endpoint"].get<std::string>();
      if (s->config.contains("ckpt.s3_region") && s->config["ckpt.s3_region"].is_string())
        s3.region = s->config["ckpt.s3_region"].get<std::string>();
      auto store = ckpt::OpenStorage(given, s3);
      auto got = store.ok() ? (*store)->Get("prepare.json") : Result<std::string>(store.status());
      if (got.ok()) {  // unreadable: no data lineage, as for a local data.dir that is gone
        text = std::move(got).value();
        dir = given;
      }
    } else {
      if (data.is_relative() && !fs::exists(data, ec)) data = run / data;
      if (fs::is_regular_file(data / "prepare.json", ec)) {
        TERN_ASSIGN_OR_RETURN(text, ReadFileToString((data / "prepare.json").string()));
        dir = fs::absolute(data).lexically_normal().string();
      }
    }
    if (!dir.empty()) {
      nlohmann::json prepare = nlohmann::json::parse(text, nullptr, false);
      s->data = {{"dir", dir},
                 {"prepare_sha256", Sha256Hex(text)},
                 {"prepare", prepare.is_discarded() ? nlohmann::json(nullptr) : prepare}};
      // The train split's content identity (XXH3 of its tokens; docs/formats.md): the same for the same
      // tokens, whenever and wherever they were prepared, unlike prepare.json's bytes.
      if (prepare.is_object() && prepare.contains("content") && prepare["content"].is_object() &&
          prepare["content"].contains("train") && prepare["content"]["train"].is_string())
        s->data["content"] = prepare["content"]["train"];
    }
  }
  if (fs::is_regular_file(run / "summary.json", ec)) {
    auto end = ReadSummaryFile((run / "summary.json").string());
    if (end.ok()) {
      s->metrics = {{"val_loss", end->val_loss},
                    {"train_loss", end->train_loss},
                    {"tokens", end->tokens},
                    {"steps", end->steps},
                    {"cost_usd", end->cost_usd}};
      if (end->choice_acc) {  // eval.choices
        s->metrics["choice_acc"] = *end->choice_acc;
        s->metrics["choice_acc_norm"] = end->choice_acc_norm.value_or(0);
      }
      if (!end->val_loss_mix.empty()) {  // data.mix: each mixed-in dataset's validation loss
        nlohmann::json mix = nlohmann::json::object();
        for (const auto& [dir, loss] : end->val_loss_mix) mix[dir] = loss;
        s->metrics["val_loss_mix"] = mix;
      }
    }
  }
  if (fs::is_regular_file(run / "ledger.sqlite", ec)) {
    auto ledger = run::Ledger::Open((run / "ledger.sqlite").string());
    if (ledger.ok()) {
      auto jobs = (*ledger)->Jobs();
      if (jobs.ok() && !jobs->empty()) {
        s->job_id = jobs->front().job_id;
        auto attempts = (*ledger)->Attempts(s->job_id);
        if (attempts.ok()) {
          run::JobTotals t = run::SumAttempts(*attempts);
          s->metrics["cost_usd"] = t.cost_usd;  // the bill of every attempt, not only the last one
          s->metrics["attempts"] = t.attempts;
          if (!s->metrics.contains("tokens")) s->metrics["tokens"] = t.tokens;
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Result<nlohmann::json> FlattenYaml(const std::string& yaml_text, const std::string& where) {
  nlohmann::json out = nlohmann::json::object();
  try {
    Flatten(YAML::Load(yaml_text), "", &out);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(where + ": not YAML: " + e.what());
  }
  return out;
}

Result<ModelSource> ReadModelSource(const std::string& path) {
  ModelSource s;
  std::error_code ec;
  s.path = path.rfind("s3://", 0) == 0 ? path : fs::absolute(fs::path(path).lexically_normal()).string();
  while (s.path.size() > 1 && s.path.back() == '/') s.path.pop_back();
  // The same loader as `tern serve`: what registers is what serves.
  TERN_ASSIGN_OR_RETURN(ModelWeights w, LoadModelWeights(s.path));
  s.model = {{"n_layer", w.config.n_layer},
             {"n_head", w.config.n_head},
             {"n_embd", w.config.n_embd},
             {"vocab_size", w.config.vocab_size},
             {"block_size", w.config.block_size}};
  TERN_ASSIGN_OR_RETURN(s.tokenizer, ReadFileToString(w.tokenizer_path));
  if (fs::is_regular_file(fs::path(s.path) / "model.safetensors", ec)) {
    s.kind = "run_dir";
    s.run_dir = s.path;
    TERN_ASSIGN_OR_RETURN(s.weights, ReadFileToString(s.path + "/model.safetensors"));
    if (fs::is_regular_file(fs::path(s.path) / kAdapterFile, ec)) {  // a LoRA run: its adapters alone too
      TERN_ASSIGN_OR_RETURN(s.adapter, ReadFileToString(s.path + "/" + kAdapterFile));
      TERN_RETURN_IF_ERROR(ParseLoraAdapter(s.adapter, s.path + "/" + kAdapterFile).status());
    }
  } else {
    s.kind = "checkpoint";
    if (path.rfind("s3://", 0) != 0) s.run_dir = RunDirOf(fs::path(s.path).parent_path());
    // The checkpoint's tensors, rewritten as the model.safetensors a run directory holds.
    const fs::path tmp =
        fs::temp_directory_path() / ("tern-register-" + std::to_string(::getpid()) + ".safetensors");
    TERN_RETURN_IF_ERROR(WriteGptSafetensors(tmp.string(), w.config, w.params));
    auto bytes = ReadFileToString(tmp.string());
    fs::remove(tmp, ec);
    TERN_ASSIGN_OR_RETURN(s.weights, std::move(bytes));
    TERN_ASSIGN_OR_RETURN(CheckpointModel ck, LoadCheckpointModel(s.path));
    if (ck.lora.enabled()) {  // a LoRA run's checkpoint: its adapters as the run would have written them
      LoraAdapter a{ck.config, ck.lora, {}, BaseFingerprint(ck.config, ck.params)};
      a.params.assign(ck.params.begin() + static_cast<std::ptrdiff_t>(GptParamCount(ck.config)),
                      ck.params.end());
      TERN_ASSIGN_OR_RETURN(s.adapter, LoraAdapterBytes(a));
    }
  }
  TERN_RETURN_IF_ERROR(ReadRunFacts(&s).WithContext("reading the run directory " + s.run_dir));
  return s;
}

}  // namespace tern::registry
