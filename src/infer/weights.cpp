#include "infer/weights.h"

#include <cstring>
#include <filesystem>

#include "ckpt/manager.h"
#include "ckpt/safetensors_image.h"
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
  ModelWeights w;
  auto meta = [&](const char* key) -> int {
    auto m = st.metadata.find(std::string("tern.") + key);
    return m == st.metadata.end() ? 0 : std::atoi(m->second.c_str());
  };
  w.config =
      GptConfig{meta("n_layer"), meta("n_head"), meta("n_embd"), meta("vocab_size"), meta("block_size")};
  TERN_RETURN_IF_ERROR(w.config.Validate().WithContext(path + ": model shape in tensors.safetensors"));
  w.params.resize(GptParamCount(w.config));
  for (const ParamTensor& t : GptParamLayout(w.config)) {
    auto tv = st.tensors.find(t.name);
    if (tv == st.tensors.end() || tv->second.dtype != "F32" ||
        tv->second.data.size() != t.numel * sizeof(float))
      return Status::Corruption(
          fmt::format("{}: tensor '{}' is missing or has the wrong size", path, t.name));
    std::memcpy(w.params.data() + t.offset, tv->second.data.data(), tv->second.data.size());
  }
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
