#include "model/lora.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "model/init.h"

namespace tern {
namespace {

struct TargetName {
  LoraTarget bit;
  const char* name;  // in `train.lora.targets`
  const char* base;  // the base tensor
};
constexpr TargetName kTargets[] = {
    {kLoraQkv, "qkv", "qkvw"},
    {kLoraAttproj, "attproj", "attprojw"},
    {kLoraFc, "fc", "fcw"},
    {kLoraFcproj, "fcproj", "fcprojw"},
};

}  // namespace

Status LoraSpec::Validate(const GptConfig& cfg) const {
  if (!enabled()) {
    if (rank < 0)
      return Status::InvalidArgument(
          fmt::format("train.lora.rank must be 0 (off) or positive, got {}", rank));
    return Status::Ok();
  }
  if (!(alpha > 0) || !std::isfinite(alpha))
    return Status::InvalidArgument(fmt::format(
        "train.lora.alpha must be positive, got {} (the scale is alpha / rank; 2 x rank is usual)", alpha));
  if ((targets & kLoraAllTargets) == 0)
    return Status::InvalidArgument(
        "train.lora.targets is empty; name at least one of qkv, attproj, fc, fcproj");
  if (rank > cfg.n_embd)
    return Status::InvalidArgument(
        fmt::format("train.lora.rank {} exceeds the model's width n_embd {}: an adapter of that rank is no "
                    "smaller than the "
                    "matrix; use a rank of 4 to 64",
                    rank, cfg.n_embd));
  return Status::Ok();
}

std::map<std::string, std::string> LoraMetadata(const LoraSpec& spec) {
  if (!spec.enabled()) return {};
  return {{"tern.lora_rank", std::to_string(spec.rank)},
          {"tern.lora_alpha", fmt::format("{}", spec.alpha)},
          {"tern.lora_targets", LoraTargetNames(spec.targets)}};
}

Result<LoraSpec> LoraFromMetadata(const std::map<std::string, std::string>& metadata, const GptConfig& cfg,
                                  const std::string& where) {
  LoraSpec lora;
  auto r = metadata.find("tern.lora_rank");
  if (r == metadata.end()) return lora;
  lora.rank = std::atoi(r->second.c_str());
  auto a = metadata.find("tern.lora_alpha");
  auto t = metadata.find("tern.lora_targets");
  Result<uint8_t> targets =
      t == metadata.end() ? Result<uint8_t>(Status::Corruption("no targets")) : ParseLoraTargets(t->second);
  if (a == metadata.end() || !targets.ok())
    return Status::Corruption(
        fmt::format("{}: tern.lora_rank is there but no valid tern.lora_alpha and tern.lora_targets", where));
  lora.alpha = std::strtof(a->second.c_str(), nullptr);
  lora.targets = *targets;
  Status valid = lora.Validate(cfg);
  if (!valid.ok()) return Status::Corruption(where + ": the LoRA metadata: " + valid.message());
  return lora;
}

std::string LoraSpec::ToString() const {
  if (!enabled()) return "off";
  return fmt::format("r{} alpha{} {}", rank, alpha, LoraTargetNames(targets));
}

Result<uint8_t> ParseLoraTargets(const std::string& csv) {
  uint8_t bits = 0;
  size_t start = 0;
  while (start <= csv.size()) {
    size_t end = csv.find(',', start);
    if (end == std::string::npos) end = csv.size();
    std::string item = csv.substr(start, end - start);
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (item == "all") {
      bits |= kLoraAllTargets;
    } else if (!item.empty()) {
      const auto* t = std::find_if(std::begin(kTargets), std::end(kTargets),
                                   [&](const TargetName& n) { return item == n.name; });
      if (t == std::end(kTargets))
        return Status::InvalidArgument(
            fmt::format("train.lora.targets: unknown matrix '{}'; use a comma-separated subset of qkv, "
                        "attproj, fc, fcproj "
                        "(or all)",
                        item));
      bits |= t->bit;
    }
    start = end + 1;
  }
  if (bits == 0)
    return Status::InvalidArgument(
        "train.lora.targets is empty; use a comma-separated subset of qkv, attproj, fc, fcproj (or all)");
  return bits;
}

std::string LoraTargetNames(uint8_t targets) {
  std::vector<std::string> names;
  for (const auto& t : kTargets)
    if (targets & t.bit) names.emplace_back(t.name);
  return fmt::format("{}", fmt::join(names, ","));
}

std::vector<LoraMatrix> LoraMatrices(const GptConfig& cfg, const LoraSpec& spec) {
  std::vector<LoraMatrix> out;
  if (!spec.enabled()) return out;
  const int C = cfg.n_embd;
  const int shapes[4][2] = {{3 * C, C}, {C, C}, {4 * C, C}, {C, 4 * C}};
  for (int i = 0; i < 4; i++)
    if (spec.targets & kTargets[i].bit) out.push_back({kTargets[i].base, shapes[i][0], shapes[i][1]});
  return out;
}

std::vector<ParamTensor> LoraParamLayout(const GptConfig& cfg, const LoraSpec& spec, size_t offset) {
  std::vector<ParamTensor> t;
  const int64_t L = cfg.n_layer, r = spec.rank;
  for (const auto& m : LoraMatrices(cfg, spec)) {
    t.push_back({"lora_a." + m.base, {L, r, m.in}, 0, 0, true});
    t.push_back({"lora_b." + m.base, {L, m.out, r}, 0, 0, true});
  }
  for (auto& p : t) {
    p.numel = 1;
    for (int64_t d : p.shape) p.numel *= static_cast<size_t>(d);
    p.offset = offset;
    offset += p.numel;
  }
  return t;
}

size_t LoraParamCount(const GptConfig& cfg, const LoraSpec& spec) {
  size_t n = 0;
  for (const auto& t : LoraParamLayout(cfg, spec, 0)) n += t.numel;
  return n;
}

std::vector<float> LoraInitialWeights(const GptConfig& cfg, const LoraSpec& spec, uint64_t seed) {
  const auto layout = LoraParamLayout(cfg, spec, 0);
  std::vector<float> w(LoraParamCount(cfg, spec), 0.0f);
  for (size_t ti = 0; ti < layout.size(); ti++) {
    const auto& t = layout[ti];
    if (t.name.rfind("lora_a.", 0) != 0) continue;  // B starts at zero
    const double bound = 1.0 / std::sqrt(static_cast<double>(t.shape[2]));
    std::mt19937_64 rng(SplitMix64(seed ^ SplitMix64(0x4c6f5241ull + ti)));
    for (size_t i = 0; i < t.numel; i++) {
      const double u = (static_cast<double>(rng() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
      w[t.offset + i] = static_cast<float>((2.0 * u - 1.0) * bound);
    }
  }
  return w;
}

size_t LoraScratchFloats(const GptConfig& cfg, const LoraSpec& spec, bool bf16, size_t rows) {
  if (!spec.enabled()) return 0;
  size_t merged = 0, low_rank = 0;
  for (const auto& m : LoraMatrices(cfg, spec)) {
    merged += m.per_layer();
    low_rank += static_cast<size_t>(spec.rank) * (m.in + m.out);
  }
  const size_t r = spec.rank;
  return merged + (bf16 ? (merged + 1) / 2 : 0) + low_rank + r * r + 2 * cfg.n_embd + 2 * r * rows;
}

GptMemory WithLora(GptMemory m, const GptConfig& cfg, const LoraSpec& spec, bool bf16, size_t rows, int world,
                   ZeroStage zero, int rank) {
  if (!spec.enabled()) return m;
  const size_t P = GptParamCount(cfg), A = LoraParamCount(cfg, spec);
  m.params = (P + A) * 4;
  m.params_bf16 = bf16 ? (P + A) * 2 : 0;
  m.grads = A * 4;
  const bool sharded = world > 1 && zero != ZeroStage::kNone;
  m.adam_state = (sharded ? std::max<size_t>(ShardElements(A, world, rank), 1) : A) * 8;
  m.scratch += LoraScratchFloats(cfg, spec, bf16, rows) * 4;
  return m;
}

double LoraFlopsPerToken(const GptConfig& cfg, const LoraSpec& spec, int T) {
  if (!spec.enabled()) return GptFlopsPerToken(cfg, T);
  const double L = cfg.n_layer, C = cfg.n_embd, V = cfg.vocab_size;
  double adapters = 0;
  for (const auto& m : LoraMatrices(cfg, spec)) adapters += 4.0 * spec.rank * (m.in + m.out);
  return 4.0 * (12.0 * L * C * C + C * V) + 12.0 * L * T * C + L * adapters;
}

std::vector<float> MergeLoraOnHost(const GptConfig& cfg, const LoraSpec& spec,
                                   const std::vector<float>& params) {
  const auto base = GptParamLayout(cfg);
  const size_t P = GptParamCount(cfg);
  std::vector<float> out(params.begin(), params.begin() + static_cast<std::ptrdiff_t>(P));
  const auto adapters = LoraParamLayout(cfg, spec, P);
  const size_t L = cfg.n_layer, r = spec.rank;
  const double s = spec.scale();
  for (const auto& m : LoraMatrices(cfg, spec)) {
    const auto find = [](const std::vector<ParamTensor>& v, const std::string& name) {
      return *std::find_if(v.begin(), v.end(), [&](const ParamTensor& t) { return t.name == name; });
    };
    const ParamTensor w = find(base, m.base), a = find(adapters, "lora_a." + m.base),
                      b = find(adapters, "lora_b." + m.base);
    for (size_t l = 0; l < L; l++) {
      const float* A = params.data() + a.offset + l * r * m.in;
      const float* B = params.data() + b.offset + l * m.out * r;
      float* W = out.data() + w.offset + l * m.per_layer();
      for (int o = 0; o < m.out; o++)
        for (int i = 0; i < m.in; i++) {
          double acc = 0;
          for (size_t k = 0; k < r; k++) acc += static_cast<double>(B[o * r + k]) * A[k * m.in + i];
          W[static_cast<size_t>(o) * m.in + i] += static_cast<float>(s * acc);
        }
    }
  }
  return out;
}

}  // namespace tern
