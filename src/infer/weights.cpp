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

}  // namespace

Result<CheckpointModel> ModelFromCheckpointTensors(const ckpt::ParsedSafetensors& st,
                                                   const std::string& where) {
  CheckpointModel m;
  TERN_ASSIGN_OR_RETURN(m.config, ShapeFromMetadata(st.metadata, where + " (tensors.safetensors)"));
  TERN_ASSIGN_OR_RETURN(m.lora, LoraFromMetadata(st.metadata, m.config, where + " (tensors.safetensors)"));
  std::vector<ParamTensor> layout = GptParamLayout(m.config);
  const size_t base = GptParamCount(m.config);
  const std::vector<ParamTensor> adapters = LoraParamLayout(m.config, m.lora, base);
  layout.insert(layout.end(), adapters.begin(), adapters.end());
  m.params.resize(base + LoraParamCount(m.config, m.lora));
  TERN_RETURN_IF_ERROR(ReadF32Tensors(st, layout, where, m.params.data()));
  return m;
}

Status ReadF32Tensors(const ckpt::ParsedSafetensors& st, const std::vector<ParamTensor>& layout,
                      const std::string& where, float* out) {
  for (const ParamTensor& t : layout) {
    auto tv = st.tensors.find(t.name);
    if (tv == st.tensors.end() || tv->second.dtype != "F32" ||
        tv->second.data.size() != t.numel * sizeof(float))
      return Status::Corruption(
          fmt::format("{}: tensor '{}' is missing or has the wrong size", where, t.name));
    std::memcpy(out + t.offset, tv->second.data.data(), tv->second.data.size());
  }
  return Status::Ok();
}

std::vector<float> CheckpointModel::TakeMergedParams() {
  return lora.enabled() ? MergeLoraOnHost(config, lora, params) : std::move(params);
}

Result<CheckpointModel> LoadCheckpointModel(const std::string& path, std::string* location) {
  std::vector<std::string> skipped;
  auto ck = ckpt::LoadCheckpointAt(
      path, [](const std::string& uri) { return ckpt::OpenStorage(uri); }, &skipped);
  if (!ck.ok()) return ck.status().WithContext("loading checkpoint " + path);
  auto it = ck->files.find("tensors.safetensors");
  if (it == ck->files.end()) return Status::Corruption(path + ": the checkpoint has no tensors.safetensors");
  TERN_ASSIGN_OR_RETURN(ckpt::ParsedSafetensors st, ckpt::ParseSafetensors(it->second));
  if (location) *location = ck->location.empty() ? path : ck->location;
  return ModelFromCheckpointTensors(st, path);
}

Result<ModelWeights> WeightsFromCheckpointTensors(const ckpt::ParsedSafetensors& st,
                                                  const std::string& where) {
  TERN_ASSIGN_OR_RETURN(CheckpointModel m, ModelFromCheckpointTensors(st, where));
  ModelWeights w;
  w.config = m.config;
  w.params = m.TakeMergedParams();
  return w;
}

namespace {

// A checkpoint (local or s3://) as a model: its adapters merged, its run directory's tokenizer and name.
Result<ModelWeights> FromCheckpoint(const std::string& path) {
  std::string location;
  TERN_ASSIGN_OR_RETURN(CheckpointModel m, LoadCheckpointModel(path, &location));
  ModelWeights w;
  w.config = m.config;
  w.params = m.TakeMergedParams();
  w.name = BaseName(location);
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
