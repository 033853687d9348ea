#include "model/safetensors.h"

#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/file_util.h"

namespace tern {
namespace {

// One exported tensor: its HF name, HF shape, and where it comes from in tern's layout.
struct Mapping {
  std::string hf_name;
  std::vector<int64_t> hf_shape;
  size_t src_offset;  // elements into the flat tern buffer
  int rows, cols;     // tern's [rows, cols] matrix; transposed on export when `transpose`
  bool transpose;
};

std::vector<Mapping> HfMappings(const GptConfig& cfg) {
  auto layout = GptParamLayout(cfg);
  auto off = [&](const char* name) {
    for (auto& t : layout)
      if (t.name == name) return t.offset;
    return size_t{0};
  };
  const int L = cfg.n_layer, C = cfg.n_embd, V = cfg.vocab_size, T = cfg.block_size;
  std::vector<Mapping> m;
  m.push_back({"transformer.wte.weight", {V, C}, off("wte"), V, C, false});
  m.push_back({"transformer.wpe.weight", {T, C}, off("wpe"), T, C, false});
  for (int l = 0; l < L; l++) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    const size_t lc = static_cast<size_t>(l) * C;
    m.push_back({p + "ln_1.weight", {C}, off("ln1w") + lc, 1, C, false});
    m.push_back({p + "ln_1.bias", {C}, off("ln1b") + lc, 1, C, false});
    m.push_back({p + "attn.c_attn.weight", {C, 3 * C}, off("qkvw") + lc * 3 * C, 3 * C, C, true});
    m.push_back({p + "attn.c_attn.bias", {3 * C}, off("qkvb") + 3 * lc, 1, 3 * C, false});
    m.push_back({p + "attn.c_proj.weight", {C, C}, off("attprojw") + lc * C, C, C, true});
    m.push_back({p + "attn.c_proj.bias", {C}, off("attprojb") + lc, 1, C, false});
    m.push_back({p + "ln_2.weight", {C}, off("ln2w") + lc, 1, C, false});
    m.push_back({p + "ln_2.bias", {C}, off("ln2b") + lc, 1, C, false});
    m.push_back({p + "mlp.c_fc.weight", {C, 4 * C}, off("fcw") + lc * 4 * C, 4 * C, C, true});
    m.push_back({p + "mlp.c_fc.bias", {4 * C}, off("fcb") + 4 * lc, 1, 4 * C, false});
    m.push_back({p + "mlp.c_proj.weight", {4 * C, C}, off("fcprojw") + lc * 4 * C, C, 4 * C, true});
    m.push_back({p + "mlp.c_proj.bias", {C}, off("fcprojb") + lc, 1, C, false});
  }
  m.push_back({"transformer.ln_f.weight", {C}, off("lnfw"), 1, C, false});
  m.push_back({"transformer.ln_f.bias", {C}, off("lnfb"), 1, C, false});
  return m;
}

}  // namespace

std::map<std::string, std::string> ShapeMetadata(const GptConfig& cfg) {
  return {{"format", "pt"},
          {"tern.n_layer", std::to_string(cfg.n_layer)},
          {"tern.n_head", std::to_string(cfg.n_head)},
          {"tern.n_embd", std::to_string(cfg.n_embd)},
          {"tern.vocab_size", std::to_string(cfg.vocab_size)},
          {"tern.block_size", std::to_string(cfg.block_size)}};
}

Result<GptConfig> ShapeFromMetadata(const std::map<std::string, std::string>& metadata,
                                    const std::string& where) {
  GptConfig cfg;
  try {
    cfg.n_layer = std::stoi(metadata.at("tern.n_layer"));
    cfg.n_head = std::stoi(metadata.at("tern.n_head"));
    cfg.n_embd = std::stoi(metadata.at("tern.n_embd"));
    cfg.vocab_size = std::stoi(metadata.at("tern.vocab_size"));
    cfg.block_size = std::stoi(metadata.at("tern.block_size"));
  } catch (const std::exception&) {
    return Status::Corruption(where + ": missing or unreadable tern.* model shape in __metadata__");
  }
  Status valid = cfg.Validate();
  if (!valid.ok()) return Status::Corruption(where + ": model shape: " + valid.message());
  return cfg;
}

Status WriteGptSafetensors(const std::string& path, const GptConfig& cfg, const std::vector<float>& params,
                           const std::map<std::string, std::string>& extra_metadata) {
  auto maps = HfMappings(cfg);
  nlohmann::ordered_json header;
  nlohmann::json meta = nlohmann::json::object();
  for (const auto& [k, v] : ShapeMetadata(cfg)) meta[k] = v;
  for (const auto& [k, v] : extra_metadata) meta[k] = v;
  header["__metadata__"] = meta;
  size_t offset = 0;
  for (const auto& m : maps) {
    size_t bytes = static_cast<size_t>(m.rows) * m.cols * 4;
    header[m.hf_name] = {{"dtype", "F32"}, {"shape", m.hf_shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // align the data to 8 bytes
  std::string out;
  out.reserve(8 + json.size() + offset);
  uint64_t hlen = json.size();
  out.append(reinterpret_cast<const char*>(&hlen), 8);
  out += json;
  for (const auto& m : maps) {
    const float* src = params.data() + m.src_offset;
    if (!m.transpose) {
      out.append(reinterpret_cast<const char*>(src), static_cast<size_t>(m.rows) * m.cols * 4);
      continue;
    }
    std::vector<float> t(static_cast<size_t>(m.rows) * m.cols);
    for (int r = 0; r < m.rows; r++)
      for (int c = 0; c < m.cols; c++)
        t[static_cast<size_t>(c) * m.rows + r] = src[static_cast<size_t>(r) * m.cols + c];
    out.append(reinterpret_cast<const char*>(t.data()), t.size() * 4);
  }
  return WriteFileAtomic(path, out);
}

Result<LoadedWeights> ReadGptSafetensors(const std::string& path) {
  TERN_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  return ParseGptSafetensors(bytes, path);
}

Result<LoadedWeights> ParseGptSafetensors(std::string_view bytes, const std::string& path) {
  auto corrupt = [&](const std::string& what) {
    return Status::Corruption(fmt::format("{}: {} (not a tern/GPT-2 safetensors file?)", path, what));
  };
  if (bytes.size() < 8) return corrupt("file shorter than its 8-byte header length");
  uint64_t hlen;
  std::memcpy(&hlen, bytes.data(), 8);
  if (hlen > bytes.size() - 8) return corrupt("header length beyond the end of the file");
  nlohmann::json header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + hlen, nullptr, false);
  if (header.is_discarded() || !header.is_object() || !header.contains("__metadata__"))
    return corrupt("unreadable JSON header");
  LoadedWeights w;
  const auto& meta = header["__metadata__"];
  if (!meta.is_object()) return corrupt("__metadata__ is not an object");
  for (auto it = meta.begin(); it != meta.end(); ++it)
    if (it.value().is_string()) w.metadata[it.key()] = it.value().get<std::string>();
  TERN_ASSIGN_OR_RETURN(w.config, ShapeFromMetadata(w.metadata, path));
  const char* data = bytes.data() + 8 + hlen;
  const size_t data_bytes = bytes.size() - 8 - hlen;
  // The shape must fit the data before anything is sized from it (a forged shape would ask for terabytes).
  const double C = w.config.n_embd, V = w.config.vocab_size, T = w.config.block_size, L = w.config.n_layer;
  const double params = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
  if (params * 4 > static_cast<double>(data_bytes))
    return corrupt(fmt::format("model shape {} needs {:.0f} bytes of tensors, the file holds {}",
                               w.config.ToString(), params * 4, data_bytes));
  w.params.assign(GptParamCount(w.config), 0.0f);
  for (const auto& m : HfMappings(w.config)) {
    if (!header.contains(m.hf_name)) return corrupt("missing tensor " + m.hf_name);
    const auto& e = header[m.hf_name];
    const bool offsets_ok = e.is_object() && e.contains("dtype") && e.contains("data_offsets") &&
                            e["data_offsets"].is_array() && e["data_offsets"].size() == 2 &&
                            e["data_offsets"][0].is_number_unsigned() &&
                            e["data_offsets"][1].is_number_unsigned();
    if (!offsets_ok)
      return corrupt("bad entry for " + m.hf_name + ": needs dtype and data_offsets [begin, end]");
    const uint64_t begin = e["data_offsets"][0], end = e["data_offsets"][1];
    const size_t want = static_cast<size_t>(m.rows) * m.cols * 4;
    if (e["dtype"] != "F32" || begin > end || end - begin != want || end > data_bytes)
      return corrupt("bad entry for " + m.hf_name);
    const float* src = reinterpret_cast<const float*>(data + begin);
    float* dst = w.params.data() + m.src_offset;
    if (!m.transpose) {
      std::memcpy(dst, src, want);
    } else {
      for (int r = 0; r < m.rows; r++)
        for (int c = 0; c < m.cols; c++)
          dst[static_cast<size_t>(r) * m.cols + c] = src[static_cast<size_t>(c) * m.rows + r];
    }
  }
  return w;
}

}  // namespace tern
