#include "model/gpt_config.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tern {

Status GptConfig::Validate() const {
  auto positive = [](const char* key, int v) -> Status {
    if (v <= 0)
      return Status::InvalidArgument(fmt::format("model.{} must be a positive integer, got {}", key, v));
    return Status::Ok();
  };
  TERN_RETURN_IF_ERROR(positive("n_layer", n_layer));
  TERN_RETURN_IF_ERROR(positive("n_head", n_head));
  TERN_RETURN_IF_ERROR(positive("n_embd", n_embd));
  TERN_RETURN_IF_ERROR(positive("vocab_size", vocab_size));
  TERN_RETURN_IF_ERROR(positive("block_size", block_size));
  if (n_embd % n_head != 0) {
    return Status::InvalidArgument(fmt::format(
        "model.n_embd ({}) must be divisible by model.n_head ({}); pick n_head among the divisors of n_embd",
        n_embd, n_head));
  }
  return Status::Ok();
}

std::string GptConfig::ToString() const {
  return fmt::format("L{} H{} C{} V{} T{}", n_layer, n_head, n_embd, vocab_size, block_size);
}

const std::vector<GptPresetEntry>& GptPresets() {
  // The names by parameter count (tern's); the aliases are what people and the docs also say.
  static const std::vector<GptPresetEntry> presets = {
      {"gpt2-124m", {"gpt2"}, {12, 12, 768, 50257, 1024}},
      {"gpt2-350m", {}, {24, 16, 1024, 50257, 1024}},
      {"gpt2-774m", {}, {36, 20, 1280, 50257, 1024}},
      {"gpt2-1558m", {"gpt2-1.5b"}, {48, 25, 1600, 50257, 1024}},
  };
  return presets;
}

std::vector<std::string> GptPresetNames() {
  std::vector<std::string> names;
  for (const auto& p : GptPresets()) {
    names.push_back(p.name);
    names.insert(names.end(), p.aliases.begin(), p.aliases.end());
  }
  return names;
}

std::string GptPresetList() {
  std::vector<std::string> items;
  for (const auto& p : GptPresets()) {
    items.push_back(p.aliases.empty() ? p.name : fmt::format("{} ({})", p.name, fmt::join(p.aliases, ", ")));
  }
  return fmt::format("{}", fmt::join(items, ", "));
}

Result<GptConfig> GptPreset(const std::string& name) {
  for (const auto& p : GptPresets()) {
    if (name == p.name || std::find(p.aliases.begin(), p.aliases.end(), name) != p.aliases.end())
      return p.cfg;
  }
  return Status::InvalidArgument(
      fmt::format("unknown model preset '{}'; use one of: {}", name, GptPresetList()));
}

std::vector<ParamTensor> GptParamLayout(const GptConfig& cfg) {
  const int64_t L = cfg.n_layer, C = cfg.n_embd, V = cfg.vocab_size, maxT = cfg.block_size;
  std::vector<ParamTensor> t = {
      {"wte", {V, C}, 0, 0, true},
      {"wpe", {maxT, C}, 0, 0, true},
      {"ln1w", {L, C}, 0, 0, false},
      {"ln1b", {L, C}, 0, 0, false},
      {"qkvw", {L, 3 * C, C}, 0, 0, true},
      {"qkvb", {L, 3 * C}, 0, 0, false},
      {"attprojw", {L, C, C}, 0, 0, true},
      {"attprojb", {L, C}, 0, 0, false},
      {"ln2w", {L, C}, 0, 0, false},
      {"ln2b", {L, C}, 0, 0, false},
      {"fcw", {L, 4 * C, C}, 0, 0, true},
      {"fcb", {L, 4 * C}, 0, 0, false},
      {"fcprojw", {L, C, 4 * C}, 0, 0, true},
      {"fcprojb", {L, C}, 0, 0, false},
      {"lnfw", {C}, 0, 0, false},
      {"lnfb", {C}, 0, 0, false},
  };
  size_t offset = 0;
  for (auto& p : t) {
    size_t n = 1;
    for (int64_t d : p.shape) n *= static_cast<size_t>(d);
    p.numel = n;
    p.offset = offset;
    offset += n;
  }
  return t;
}

size_t GptParamCount(const GptConfig& cfg) {
  auto layout = GptParamLayout(cfg);
  return layout.back().offset + layout.back().numel;
}

double GptFlopsPerToken(const GptConfig& cfg, int T) {
  const double L = cfg.n_layer, C = cfg.n_embd, V = cfg.vocab_size;
  return 6.0 * (12.0 * L * C * C + C * V) + 12.0 * L * T * C;
}

const char* RecomputeName(Recompute r) {
  switch (r) {
    case Recompute::kGelu:
      return "gelu";
    case Recompute::kBlocks:
      return "blocks";
    case Recompute::kNone:
      break;
  }
  return "none";
}

Result<Recompute> ParseRecompute(const std::string& s) {
  if (s == "none") return Recompute::kNone;
  if (s == "gelu") return Recompute::kGelu;
  if (s == "blocks") return Recompute::kBlocks;
  return Status::InvalidArgument(fmt::format("recompute '{}' is not allowed; use none, gelu or blocks", s));
}

size_t GptLogitsRows(size_t N, int logits_chunk) {
  return logits_chunk > 0 ? std::min(N, static_cast<size_t>(logits_chunk)) : N;
}

size_t GptLogitsBytes(const GptConfig& cfg, int B, int T, int logits_chunk, bool bf16) {
  const size_t n = GptLogitsRows(static_cast<size_t>(B) * T, logits_chunk) * cfg.vocab_size;
  return (bf16 ? (n + 1) / 2 : n) * sizeof(float);
}

GptMemory GptMemoryEstimate(const GptConfig& cfg, int B, int T, bool bf16, Recompute recompute,
                            AttentionKind attention, int logits_chunk) {
  const size_t L = cfg.n_layer, C = cfg.n_embd;
  const size_t N = static_cast<size_t>(B) * T;
  const size_t P = GptParamCount(cfg);
  GptMemory m;
  m.params = P * 4;
  m.params_bf16 = bf16 ? P * 2 : 0;
  m.grads = P * 4;
  m.adam_state = P * 8;
  // per layer: attproj, residual2, fcproj, residual3 (4 x C), fch (4C), two layernorm stats pairs (4 per
  // row), attention's state (naive: the probabilities, NH*T floats per row; flash: 2*NH floats per row); qkv
  // (3C), the attention output atty (C), the layer norm outputs ln1, ln2 (C each) and the GELU output (4C, or
  // one layer's for all with recompute=gelu) are bf16 with bf16 compute (half as many floats, each tensor
  // rounded up), as is lnf.
  const AttentionMemory att =
      AttentionStateBytes(attention, B, T, cfg.n_embd, cfg.n_head, bf16 ? Compute::kBF16 : Compute::kF32);
  // recompute=blocks keeps residual3 per layer and everything else for one layer (Lk = 1).
  auto floats = [&](size_t elems) { return bf16 ? (elems + 1) / 2 : elems; };
  const size_t Lk = recompute == Recompute::kBlocks ? 1 : L;
  const size_t gelu = floats(recompute == Recompute::kNone ? L * N * 4 * C : N * 4 * C);
  const size_t ln = 2 * floats(Lk * N * C) + floats(N * C);
  const size_t qkv_atty = floats(Lk * N * 3 * C) + floats(Lk * N * C);
  const size_t per_layer = N * (3 * C + 4 * C + 4) + att.state / 4;
  m.activations = 4 * (N * C /*encoded*/ + Lk * per_layer + L * N * C /*residual3*/ + qkv_atty + ln + gelu +
                       N * 2 /*lnf stats*/ + N /*losses*/) +
                  GptLogitsBytes(cfg, B, T, logits_chunk, bf16) +
                  2 * N * 4 /*input and target token ids (int32)*/ + kGptLossSumBytes;
  // backward scratch: dresidual, dln, datty (C each), dqkv (3C), dfch (4C: the GELU gradient is the
  // fcproj input gradient's epilogue, MatmulDGelu), attention's (naive: datt, NH*T floats per row; flash:
  // none)
  m.scratch = 4 * (N * (3 * C + 3 * C + 4 * C)) + att.scratch;
  return m;
}

const char* ZeroStageName(ZeroStage z) {
  switch (z) {
    case ZeroStage::kOptimizer:
      return "ZeRO-1";
    case ZeroStage::kGradients:
      return "ZeRO-2";
    case ZeroStage::kWeights:
      return "ZeRO-3";
    case ZeroStage::kNone:
      break;
  }
  return "none";
}

size_t ShardElements(size_t n, int world, int rank) {
  const size_t w = static_cast<size_t>(world < 1 ? 1 : world), r = static_cast<size_t>(rank);
  return n / w + (r < n % w ? 1 : 0);
}

GptMemory GptMemoryEstimate(const GptConfig& cfg, int B, int T, bool bf16, Recompute recompute, int world,
                            ZeroStage zero, int rank, AttentionKind attention, int logits_chunk) {
  GptMemory m = GptMemoryEstimate(cfg, B, T, bf16, recompute, attention, logits_chunk);
  if (world <= 1 || zero == ZeroStage::kNone) return m;
  const size_t shard = ShardElements(GptParamCount(cfg), world, rank);
  m.adam_state = shard * 8;
  if (zero >= ZeroStage::kGradients) m.grads = shard * 4;
  if (zero >= ZeroStage::kWeights) {
    m.params = shard * 4;
    m.params_bf16 = bf16 ? shard * 2 : 0;
  }
  return m;
}

}  // namespace tern
