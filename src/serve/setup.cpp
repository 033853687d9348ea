#include "serve/setup.h"

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
Result<ServeWeights> FromCheckpoint(const std::string& path) {
  std::vector<std::string> skipped;
  auto ck = ckpt::LoadCheckpointAt(
      path, [](const std::string& uri) { return ckpt::OpenStorage(uri); }, &skipped);
  if (!ck.ok()) return ck.status().WithContext("loading checkpoint " + path);
  auto it = ck->files.find("tensors.safetensors");
  if (it == ck->files.end()) return Status::Corruption(path + ": the checkpoint has no tensors.safetensors");
  TERN_ASSIGN_OR_RETURN(ckpt::ParsedSafetensors st, ckpt::ParseSafetensors(it->second));
  ServeWeights w;
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

Result<ServeWeights> LoadServeWeights(const std::string& path, const std::string& tokenizer) {
  ServeWeights w;
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
  if (w.tokenizer_path.empty() || !fs::exists(w.tokenizer_path, ec))
    return Status::NotFound(fmt::format("no tokenizer.model found for {}; pass --tokenizer PATH", path));
  return w;
}

Result<std::unique_ptr<Engine>> MakeEngine(Backend* backend, const GptConfig& cfg,
                                           const std::vector<float>& params, const Tokenizer* tokenizer,
                                           const EngineSetup& setup, ServeMetrics* metrics) {
  EngineOptions eo = setup.engine;
  if (eo.max_batch < 1 || eo.max_batch_tokens < eo.max_batch || eo.max_queue < 1)
    return Status::InvalidArgument("need max_batch >= 1, max_batch_tokens >= max_batch and max_queue >= 1");
  if (tokenizer->vocab_size() > cfg.vocab_size)
    return Status::InvalidArgument(fmt::format("the tokenizer has {} tokens but the model only {}",
                                               tokenizer->vocab_size(), cfg.vocab_size));
  const int seq_len = eo.max_seq_len > 0 ? std::min(eo.max_seq_len, cfg.block_size) : cfg.block_size;
  const size_t per_block = InferenceModel::KvBytesPerBlock(cfg, setup.block_size, setup.kv_dtype);
  const int blocks = static_cast<int>(setup.kv_cache_mb * 1024 * 1024 / per_block);
  const int per_seq = (seq_len + setup.block_size - 1) / setup.block_size;
  if (blocks < per_seq)
    return Status::InvalidArgument(
        fmt::format("--kv-cache-mb {} holds {} tokens; one sequence of {} tokens needs {:.1f} MB (or lower "
                    "--max-seq-len)",
                    setup.kv_cache_mb, blocks * setup.block_size, seq_len, per_seq * per_block / 1048576.0));
  InferenceModelOptions mo;
  mo.quantize = setup.quantize;
  mo.kv_dtype = setup.kv_dtype;
  mo.block_size = setup.block_size;
  mo.num_blocks = blocks;
  mo.max_rows = eo.max_batch_tokens;
  mo.max_seqs = eo.max_batch;
  TERN_ASSIGN_OR_RETURN(auto model, InferenceModel::Create(backend, cfg, params, mo));
  return std::make_unique<Engine>(std::move(model), tokenizer, eo, metrics);
}

}  // namespace tern
