#include "infer/adapter.h"

#include <xxhash.h>

#include <cctype>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "ckpt/safetensors_image.h"
#include "core/file_util.h"
#include "infer/weights.h"
#include "model/safetensors.h"

namespace tern {
namespace fs = std::filesystem;

std::string BaseFingerprint(const GptConfig& cfg, const std::vector<float>& params) {
  const size_t n = std::min(GptParamCount(cfg), params.size());
  return fmt::format("{:016x}", XXH3_64bits(params.data(), n * sizeof(float)));
}

Result<std::string> LoraAdapterBytes(const LoraAdapter& a,
                                     const std::map<std::string, std::string>& extra_metadata) {
  if (!a.spec.enabled() || a.params.size() != LoraParamCount(a.config, a.spec))
    return Status::InvalidArgument(fmt::format("an adapter needs LoRA on and {} parameters, got {}",
                                               LoraParamCount(a.config, a.spec), a.params.size()));
  std::map<std::string, std::string> meta = ShapeMetadata(a.config);
  for (const auto& [k, v] : LoraMetadata(a.spec)) meta[k] = v;
  meta["tern.layout"] = "tern";
  meta["tern.base_xxh3"] = a.base_fingerprint;
  for (const auto& [k, v] : extra_metadata) meta[k] = v;
  std::vector<ckpt::TensorSpec> specs;
  for (const ParamTensor& t : LoraParamLayout(a.config, a.spec, 0)) specs.push_back({t.name, t.shape});
  ckpt::SafetensorsImage image(specs, meta);
  std::memcpy(image.data(), a.params.data(), a.params.size() * sizeof(float));
  return std::string(image.bytes());
}

Status WriteLoraAdapter(const std::string& path, const LoraAdapter& a,
                        const std::map<std::string, std::string>& extra_metadata) {
  auto bytes = LoraAdapterBytes(a, extra_metadata);
  if (!bytes.ok()) return bytes.status().WithContext(path);
  return WriteFileAtomic(path, *bytes);
}

Result<LoraAdapter> ParseLoraAdapter(std::string_view bytes, const std::string& file) {
  auto st = ckpt::ParseSafetensors(bytes);
  if (!st.ok()) return st.status().WithContext(file);
  LoraAdapter a;
  TERN_ASSIGN_OR_RETURN(a.config, ShapeFromMetadata(st->metadata, file));
  TERN_ASSIGN_OR_RETURN(a.spec, LoraFromMetadata(st->metadata, a.config, file));
  auto base = st->metadata.find("tern.base_xxh3");
  if (!a.spec.enabled() || base == st->metadata.end())
    return Status::Corruption(file +
                              ": not a tern LoRA adapter (no tern.lora_rank or tern.base_xxh3 metadata)");
  a.base_fingerprint = base->second;
  a.params.resize(LoraParamCount(a.config, a.spec));
  TERN_RETURN_IF_ERROR(ReadF32Tensors(*st, LoraParamLayout(a.config, a.spec, 0), file, a.params.data()));
  return a;
}

namespace {

Result<LoraAdapter> FromAdapterFile(const std::string& file) {
  TERN_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(file));
  return ParseLoraAdapter(bytes, file);
}

}  // namespace

Result<LoraAdapter> LoadLoraAdapter(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return FromAdapterFile(path);
  const fs::path in_run = fs::path(path) / kAdapterFile;
  if (fs::is_regular_file(in_run, ec)) return FromAdapterFile(in_run.string());
  if (fs::exists(fs::path(path) / "model.safetensors", ec))
    return Status::InvalidArgument(
        fmt::format("{} is a run directory without {}: it was not trained with LoRA (train.lora.rank), "
                    "so it has no adapters to serve; serve it as a model of its own",
                    path, kAdapterFile));
  if (path.rfind("s3://", 0) != 0 && !fs::is_directory(path, ec))
    return Status::NotFound(
        fmt::format("{}: no such file or directory; give a LoRA run directory, its {} or one of its "
                    "checkpoints",
                    path, kAdapterFile));
  // A checkpoint of a LoRA run: its frozen base and the adapters beside it.
  auto ck = LoadCheckpointModel(path);
  if (!ck.ok()) return ck.status().WithContext(path + " is neither a LoRA run directory nor a checkpoint");
  if (!ck->lora.enabled())
    return Status::InvalidArgument(path +
                                   ": this checkpoint holds no LoRA adapters (its run trained every "
                                   "weight); serve it as a model of its own");
  LoraAdapter a;
  a.config = ck->config;
  a.spec = ck->lora;
  a.base_fingerprint = BaseFingerprint(ck->config, ck->params);
  a.params.assign(ck->params.begin() + static_cast<std::ptrdiff_t>(GptParamCount(ck->config)),
                  ck->params.end());
  return a;
}

Result<LoraModule> ParseLoraModule(const std::string& arg) {
  LoraModule m;
  const size_t eq = arg.find('=');
  if (eq == std::string::npos && arg.rfind("models:/", 0) == 0) {  // the registry's models:/NAME@REF
    m.name = arg.substr(8, arg.find('@') == std::string::npos ? std::string::npos : arg.find('@') - 8);
    m.path = arg;
  } else if (eq == std::string::npos) {
    fs::path p = fs::path(arg).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();
    m.name = p.filename().string();
    m.path = arg;
  } else {
    m.name = arg.substr(0, eq);
    m.path = arg.substr(eq + 1);
  }
  if (m.path.empty()) return Status::InvalidArgument("--lora '" + arg + "': no path; use --lora NAME=PATH");
  if (m.name.empty()) return Status::InvalidArgument("--lora '" + arg + "': no name; use --lora NAME=PATH");
  TERN_RETURN_IF_ERROR(CheckAdapterName(m.name).WithContext("--lora '" + arg + "'"));
  return m;
}

Status CheckAdapterName(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 128;
  for (char c : name)
    ok = ok &&
         (std::isalnum(static_cast<unsigned char>(c)) || std::string("._-:/").find(c) != std::string::npos);
  if (!ok)
    return Status::InvalidArgument(
        fmt::format("the adapter name '{}' must be 1-128 letters, digits and . _ - : /", name));
  return Status::Ok();
}

Status CheckAdapterBase(const LoraAdapter& adapter, const std::string& adapter_path, const GptConfig& cfg,
                        const std::string& base_fingerprint, const std::string& base_path) {
  if (adapter.config.ToString() != cfg.ToString())
    return Status::InvalidArgument(fmt::format(
        "the adapter {} is for a {} model, but {} is {}; serve the model its LoRA run started from "
        "(its train.init_from)",
        adapter_path, adapter.config.ToString(), base_path, cfg.ToString()));
  if (adapter.base_fingerprint != base_fingerprint)
    return Status::InvalidArgument(fmt::format(
        "the adapter {} was trained on other weights (fingerprint {}) than {} holds ({}): adapters only "
        "work on the exact model they were trained on; serve the model its LoRA run started from (its "
        "train.init_from, in the run's config.yaml)",
        adapter_path, adapter.base_fingerprint, base_path, base_fingerprint));
  return Status::Ok();
}

}  // namespace tern
