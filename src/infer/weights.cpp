#include "infer/weights.h"

#include <cstring>
#include <filesystem>

#include "ckpt/manager.h"
#include "ckpt/safetensors_image.h"
#include "model/lora.h"
#include "model/safetensors.h"

namespace tern {
namespace fs = std::filesystem;

namespace {

std::string BaseName(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

// tensors.safetensors of a checkpoint: one fp32 tensor per GptParamLayout entry, the shape in __metadata__.
Result<ModelWeights> FromCheckpoint(const std::string& path) {
  std::vector<std::string> skipped;
  auto ck = ckpt::LoadCheckpointAt(
      path, [](const std::string& uri) { return ckpt::OpenStorage(uri); }, &skipped);
  if (!ck.ok()) return ck.status().WithContext("loading checkpoint " + path);
  auto it = ck->files.find("tensors.safetensors");
  if (it == ck->files.end()) return Status::Corruption(path + ": the checkpoint has no tensors.safetensors");
  TERN_ASSIGN_OR_RETURN(ckpt::ParsedSafetensors st, ckpt::ParseSafetensors(it->second));
  TERN_ASSIGN_OR_RETURN(ModelWeights w, WeightsFromCheckpointTensors(st, path));
  w.name = BaseName(ck->location.empty() ? path : ck->location);
  // RUN/checkpoints/step_N -> RUN/tokenizer.model (local checkpoints only; at most two levels up)
  fs::path dir = fs::absolute(fs::path(path).lexically_normal());
  if (dir.filename().empty()) dir = dir.parent_path();
  for (int up = 0; up < 3 && !dir.empty() && dir != dir.parent_path(); up++, dir = dir.parent_path()) {
    if (fs::exists(dir / "tokenizer.model")) {
      w.tokenizer_path = (dir / "tokenizer.model").string();
      w.name = dir.filename().string();
      break;
    }
  }
  return w;
}

}  // namespace

Result<ModelWeights> WeightsFromCheckpointTensors(const ckpt::ParsedSafetensors& st,
                                                  const std::string& where) {
  ModelWeights w;
  auto meta = [&](const char* key) -> int {
    auto m = st.metadata.find(std::string("tern.") + key);
    return m == st.metadata.end() ? 0 : std::atoi(m->second.c_str());
  };
  w.config =
      GptConfig{meta("n_layer"), meta("n_head"), meta("n_embd"), meta("vocab_size"), meta("block_size")};
  TERN_RETURN_IF_ERROR(w.config.Validate().WithContext(where + ": model shape in tensors.safetensors"));
  LoraSpec lora;
  if (auto r = st.metadata.find("tern.lora_rank"); r != st.metadata.end()) {
    lora.rank = std::atoi(r->second.c_str());
    auto a = st.metadata.find("tern.lora_alpha");
    auto t = st.metadata.find("tern.lora_targets");
    Result<uint8_t> targets = t == st.metadata.end() ? Result<uint8_t>(Status::Corruption("no targets"))
                                                     : ParseLoraTargets(t->second);
    if (a == st.metadata.end() || !targets.ok())
      return Status::Corruption(
          fmt::format("{}: tensors.safetensors has tern.lora_rank but no valid tern.lora_alpha and "
                      "tern.lora_targets",
                      where));
    lora.alpha = std::strtof(a->second.c_str(), nullptr);
    lora.targets = *targets;
    TERN_RETURN_IF_ERROR(lora.Validate(w.config).WithContext(where + ": the LoRA metadata"));
  }
  std::vector<ParamTensor> layout = GptParamLayout(w.config);
  const size_t base = GptParamCount(w.config);
  const std::vector<ParamTensor> adapters = LoraParamLayout(w.config, lora, base);
  layout.insert(layout.end(), adapters.begin(), adapters.end());
  w.params.resize(base + LoraParamCount(w.config, lora));
  for (const ParamTensor& t : layout) {
    auto tv = st.tensors.find(t.name);
    if (tv == st.tensors.end() || tv->second.dtype != "F32" ||
        tv->second.data.size() != t.numel * sizeof(float))
      return Status::Corruption(
          fmt::format("{}: tensor '{}' is missing or has the wrong size", where, t.name));
    std::memcpy(w.params.data() + t.offset, tv->second.data.data(), tv->second.data.size());
  }
  if (lora.enabled()) w.params = MergeLoraOnHost(w.config, lora, w.params);
  return w;
}

Result<ModelWeights> LoadModelWeights(const std::string& path, const std::string& tokenizer,
                                      bool need_tokenizer) {
  ModelWeights w;
  std::error_code ec;
  if (fs::exists(fs::path(path) / "model.safetensors", ec)) {
    TERN_ASSIGN_OR_RETURN(LoadedWeights lw,
                          ReadGptSafetensors((fs::path(path) / "model.safetensors").string()));
    w.config = lw.config;
    w.params = std::move(lw.params);
    w.tokenizer_path = (fs::path(path) / "tokenizer.model").string();
    w.name = BaseName(path);
  } else if (path.rfind("s3://", 0) == 0 || fs::is_directory(path, ec)) {
    auto ck = FromCheckpoint(path);
    if (!ck.ok())
      return ck.status().WithContext(path +
                                     " is neither a run directory (no model.safetensors) nor a checkpoint");
    w = std::move(ck).value();
  } else {
    return Status::NotFound(path +
                            ": no such directory; give a run directory (with model.safetensors) or a "
                            "checkpoint directory (step_...)");
  }
  if (!tokenizer.empty()) w.tokenizer_path = tokenizer;
  if (!w.tokenizer_path.empty() && fs::exists(w.tokenizer_path, ec)) return w;
  if (need_tokenizer)
    return Status::NotFound(fmt::format("no tokenizer.model found for {}; pass --tokenizer PATH", path));
  w.tokenizer_path.clear();
  return w;
}

}  // namespace tern
