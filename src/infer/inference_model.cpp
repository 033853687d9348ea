#include "infer/inference_model.h"

#include <xxhash.h>

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstring>

#include "backend/bf16.h"
#include "infer/quantize.h"

namespace tern {

Result<Quantize> ParseWeights(const std::string& name) {
  if (name == "fp32") return Quantize::kNone;
  if (name == "bf16") return Quantize::kBF16;
  if (name == "int8") return Quantize::kInt8;
  if (name == "int4") return Quantize::kInt4;
  return Status::InvalidArgument("unknown --weights '" + name + "'; use fp32, bf16, int8 or int4");
}

Result<Quantize> ParseQuantize(const std::string& name) {
  if (name == "none") return Quantize::kNone;
  if (name == "int8") return Quantize::kInt8;
  if (name == "bf16") return Quantize::kBF16;
  return Status::InvalidArgument("unknown --quantize '" + name +
                                 "'; use none or int8 (or --weights fp32|bf16|int8)");
}

const char* QuantizeName(Quantize q) {
  return q == Quantize::kInt8   ? "int8"
         : q == Quantize::kBF16 ? "bf16"
         : q == Quantize::kInt4 ? "int4"
                                : "none";
}

const char* WeightsName(Quantize q) {
  return q == Quantize::kNone ? "fp32" : QuantizeName(q);
}

Result<DType> ParseKvDtype(const std::string& name, Quantize weights) {
  if (name == "auto") return weights == Quantize::kNone ? DType::kF32 : DType::kBF16;
  if (name == "fp32") return DType::kF32;
  if (name == "bf16") return DType::kBF16;
  if (name == "int8") return DType::kI8;
  return Status::InvalidArgument("unknown --kv-dtype '" + name + "'; use auto, fp32, bf16 or int8");
}

const char* KvDtypeName(DType t) {
  return t == DType::kBF16 ? "bf16" : t == DType::kI8 ? "int8" : "fp32";
}

void ForwardBatch::Clear() {
  tokens.clear();
  positions.clear();
  slots.clear();
  seqs.clear();
  block_tables.clear();
  logit_rows.clear();
  adapters.clear();
}

// Activation buffers for R rows (S sequences for the head), shapes in the comments.
namespace {
struct Acts {          // S = rows that feed the head
  float *x, *x2;       // [R, C] residual stream (ping-pong: ops never alias their inputs)
  float* ln;           // [R, C]
  float *mean, *rstd;  // [R]
  float* qkv;          // [R, 3C]
  float* atty;         // [R, C]
  float* proj;         // [R, C]
  float *fch, *fcg;    // [R, 4C]
  float* last;         // [S, C] rows that feed the head
  float* logits;       // [S, V]
  size_t total;
  Acts(float* base, size_t R, size_t S, size_t C, size_t V) {
    size_t off = 0;
    auto take = [&](size_t n) {
      float* p = base ? base + off : nullptr;
      off += (n + 15) / 16 * 16;
      return p;
    };
    x = take(R * C);
    x2 = take(R * C);
    ln = take(R * C);
    mean = take(R);
    rstd = take(R);
    qkv = take(R * 3 * C);
    atty = take(R * C);
    proj = take(R * C);
    fch = take(R * 4 * C);
    fcg = take(R * 4 * C);
    last = take(S * C);
    logits = take(S * V);
    total = off;
  }
};
}  // namespace

size_t InferenceModel::KvBytesPerBlock(const GptConfig& cfg, int block_size, DType kv_dtype) {
  return 2ull * cfg.n_layer * KvBlockBytes(kv_dtype, cfg.n_embd, cfg.n_head, block_size);
}

InferenceModel::InferenceModel(Backend* backend, const GptConfig& cfg, const InferenceModelOptions& options)
    : backend_(backend), cfg_(cfg), opt_(options) {}

Result<std::unique_ptr<InferenceModel>> InferenceModel::Create(Backend* backend, const GptConfig& cfg,
                                                               const std::vector<float>& params,
                                                               const InferenceModelOptions& options) {
  TERN_RETURN_IF_ERROR(cfg.Validate());
  if (params.size() != GptParamCount(cfg))
    return Status::InvalidArgument(fmt::format("expected {} parameters for {}, got {}", GptParamCount(cfg),
                                               cfg.ToString(), params.size()));
  if (options.kv_dtype != DType::kF32 && options.kv_dtype != DType::kBF16 && options.kv_dtype != DType::kI8)
    return Status::InvalidArgument("the KV cache holds fp32, bf16 or int8 elements");
  if (!backend->capabilities().HasKvDType(options.kv_dtype))
    return Status::InvalidArgument(
        fmt::format("the {} KV cache does not run on backend {} so far; use "
                    "--kv-dtype bf16",
                    KvDtypeName(options.kv_dtype), backend->name()));
  if (options.kv_dtype == DType::kI8 && cfg.n_embd % 4 != 0)
    return Status::InvalidArgument(
        "an int8 KV cache needs n_embd divisible by 4 (its fp32 scales follow the "
        "int8 elements of a block); use --kv-dtype bf16");
  if (options.block_size < 1 || options.num_blocks < 1 || options.max_rows < 1 || options.max_seqs < 1)
    return Status::InvalidArgument("block size, KV blocks, rows and sequences per batch must be positive");
  if (options.quantize == Quantize::kInt8 && cfg.n_embd % 4 != 0)
    return Status::InvalidArgument("int8 needs n_embd divisible by 4 (int8 dot products take 4 at a time)");
  if (options.quantize == Quantize::kInt4 && cfg.n_embd % 64 != 0)
    return Status::InvalidArgument(
        fmt::format("int4 needs n_embd divisible by 64 (a scale per 64 weights); this model has {}: use "
                    "--weights int8",
                    cfg.n_embd));
  if (options.quantize == Quantize::kInt4 && !backend->capabilities().int4_weights)
    return Status::InvalidArgument(fmt::format(
        "int4 weights do not run on backend {} (they need a CPU with AVX-512 VNNI; the CUDA backend has no "
        "int4 kernel yet); use --weights int8 or bf16",
        backend->name()));
  std::unique_ptr<InferenceModel> m(new InferenceModel(backend, cfg, options));
  m->Init(params);
  return m;
}

void InferenceModel::Init(const std::vector<float>& params) {
  const int L = cfg_.n_layer, C = cfg_.n_embd, V = cfg_.vocab_size, bs = opt_.block_size;
  max_blocks_ = (cfg_.block_size + bs - 1) / bs;
  // fp32 on the device: every tensor with fp32 weights; with bf16 or int8 weights, only what stays fp32
  // (biases, layernorms, positions, and the token table for int8's and int4's fp32 embedding), so that a bf16
  // model does not keep an fp32 copy of the weights it serves (GPT-2 124M: 0.5 GB).
  const std::vector<ParamTensor> host_layout = GptParamLayout(cfg_);
  auto device_f32 = [&](const std::string& name) {
    if (opt_.quantize == Quantize::kNone) return true;
    if (name == "qkvw" || name == "attprojw" || name == "fcw" || name == "fcprojw") return false;
    return name != "wte" || opt_.quantize == Quantize::kInt8 || opt_.quantize == Quantize::kInt4;
  };
  layout_.clear();
  std::vector<float> kept;
  for (const auto& t : host_layout) {
    if (!device_f32(t.name)) continue;
    ParamTensor d = t;
    d.offset = kept.size();
    kept.insert(kept.end(), params.begin() + t.offset, params.begin() + t.offset + t.numel);
    layout_.push_back(d);
  }
  params_ = DeviceBuffer(backend_, kept.size() * sizeof(float));
  backend_->Upload(params_.data(), kept.data(), kept.size() * sizeof(float));

  // Matmul weights: [OC, K] slices of the stacked per-layer tensors, rounded to bf16 or quantised on the host
  // if asked.
  weight_bytes_ = 0;
  auto make = [&](const char* name, int layer, int OC, int K) {
    Linear w;
    const size_t n = static_cast<size_t>(OC) * K;
    if (opt_.quantize == Quantize::kNone) {
      w.f32 = P(name, layer);
      weight_bytes_ += n * sizeof(float);
      return w;
    }
    size_t host_off = 0;
    for (const auto& t : host_layout)
      if (t.name == name) host_off = t.offset + (name == std::string("wte") ? 0 : layer * (t.numel / L));
    if (opt_.quantize == Quantize::kBF16) {
      std::vector<uint16_t> h(n);
      for (size_t i = 0; i < n; i++) h[i] = F32ToBF16(params[host_off + i]);
      weight_buffers_.emplace_back(backend_, n * sizeof(uint16_t));
      backend_->Upload(weight_buffers_.back().data(), h.data(), n * sizeof(uint16_t));
      w.bf16 = weight_buffers_.back().as<uint16_t>();
      weight_bytes_ += n * sizeof(uint16_t);
      return w;
    }
    // int8 or int4: the packed weights and their fp32 scales.
    auto upload = [&](const auto& q) {
      weight_buffers_.emplace_back(backend_, q.packed.size());
      backend_->Upload(weight_buffers_.back().data(), q.packed.data(), q.packed.size());
      const size_t packed = weight_buffers_.size() - 1;
      weight_buffers_.emplace_back(backend_, q.scale.size() * sizeof(float));
      backend_->Upload(weight_buffers_.back().data(), q.scale.data(), q.scale.size() * sizeof(float));
      w.scale = weight_buffers_.back().as<float>();
      weight_bytes_ += q.packed.size() + q.scale.size() * sizeof(float);
      return packed;
    };
    if (opt_.quantize == Quantize::kInt4)
      w.q4 = weight_buffers_[upload(QuantizeInt4(params.data() + host_off, OC, K))].as<uint8_t>();
    else
      w.q = weight_buffers_[upload(QuantizeInt8(params.data() + host_off, OC, K))].as<int8_t>();
    return w;
  };
  weight_buffers_.reserve(2 * (4 * L + 1));  // no reallocation: Linear keeps raw pointers into them
  for (int l = 0; l < L; l++) {
    qkvw_.push_back(make("qkvw", l, 3 * C, C));
    attprojw_.push_back(make("attprojw", l, C, C));
    fcw_.push_back(make("fcw", l, 4 * C, C));
    fcprojw_.push_back(make("fcprojw", l, C, 4 * C));
  }
  head_ = std::make_unique<Linear>(make("wte", 0, V, C));
  for (int l = 0; l < L; l++)
    layer_params_.push_back({P("ln1w", l), P("ln1b", l), P("qkvb", l), P("attprojb", l), P("ln2w", l),
                             P("ln2b", l), P("fcb", l), P("fcprojb", l)});

  const size_t layer_bytes = opt_.num_blocks * KvBlockBytes(opt_.kv_dtype, C, cfg_.n_head, bs);
  k_cache_ = DeviceBuffer(backend_, L * layer_bytes);
  v_cache_ = DeviceBuffer(backend_, L * layer_bytes);
  // Beyond one row per sequence, room for prompt rows being scored (echo with logprobs): 64 per step.
  if (opt_.max_logit_rows <= 0) opt_.max_logit_rows = opt_.max_seqs + std::min(opt_.max_rows, 64);
  acts_ =
      DeviceBuffer(backend_, Acts(nullptr, opt_.max_rows, opt_.max_logit_rows, C, V).total * sizeof(float));
  const size_t ints =
      3 * static_cast<size_t>(opt_.max_rows) + static_cast<size_t>(opt_.max_seqs) * (3 + max_blocks_);
  ints_ = DeviceBuffer(backend_, ints * sizeof(int32_t));
}

size_t InferenceModel::param_bytes() const {
  size_t n = params_.bytes();
  for (const auto& b : weight_buffers_) n += b.bytes();
  for (const auto& a : adapters_) n += a.weights.bytes();
  return n;
}

Result<int> InferenceModel::AddAdapter(const LoraAdapter& adapter) {
  if (adapter.config.ToString() != cfg_.ToString())
    return Status::InvalidArgument(fmt::format("the adapter is for a {} model; this one is {}",
                                               adapter.config.ToString(), cfg_.ToString()));
  TERN_RETURN_IF_ERROR(adapter.spec.Validate(cfg_));
  if (!adapter.spec.enabled() || adapter.params.size() != LoraParamCount(cfg_, adapter.spec))
    return Status::InvalidArgument(fmt::format("the adapter needs {} parameters, it has {}",
                                               LoraParamCount(cfg_, adapter.spec), adapter.params.size()));
  const int L = cfg_.n_layer, r = adapter.spec.rank;
  // B scaled by s on the host, so the forward's second product adds the term as it is.
  std::vector<float> host = adapter.params;
  const std::vector<ParamTensor> layout = LoraParamLayout(cfg_, adapter.spec, 0);
  for (const ParamTensor& t : layout)
    if (t.name.rfind("lora_b.", 0) == 0)
      for (size_t i = 0; i < t.numel; i++) host[t.offset + i] *= adapter.spec.scale();
  Adapter a;
  a.rank = r;
  const std::string spec = adapter.spec.ToString();
  a.fingerprint = XXH3_64bits_withSeed(adapter.params.data(), adapter.params.size() * sizeof(float),
                                       XXH3_64bits(spec.data(), spec.size()));
  if (a.fingerprint == 0) a.fingerprint = 1;  // 0 is the base model's root
  // Beside bf16 or int8 weights the adapters are bf16 too (half their bytes; their products as the bf16
  // weights' are: activations rounded to bf16, fp32 sums); beside fp32 weights, fp32.
  const size_t elem = adapter_bytes_per_param();
  a.bf16 = elem == sizeof(uint16_t);
  a.weights = DeviceBuffer(backend_, host.size() * elem);
  if (a.bf16) {
    std::vector<uint16_t> h(host.size());
    for (size_t i = 0; i < host.size(); i++) h[i] = F32ToBF16(host[i]);
    backend_->Upload(a.weights.data(), h.data(), h.size() * elem);
  } else {
    backend_->Upload(a.weights.data(), host.data(), host.size() * elem);
  }
  a.a.assign(4 * static_cast<size_t>(L), nullptr);
  a.b.assign(4 * static_cast<size_t>(L), nullptr);
  static const char* const kTargets[4] = {"qkvw", "attprojw", "fcw", "fcprojw"};
  for (const ParamTensor& t : layout)
    for (int target = 0; target < 4; target++) {
      const bool is_a = t.name == std::string("lora_a.") + kTargets[target];
      const bool is_b = t.name == std::string("lora_b.") + kTargets[target];
      if (!is_a && !is_b) continue;
      for (int l = 0; l < L; l++) {
        const void* p = a.weights.as<char>() + (t.offset + l * (t.numel / L)) * elem;
        (is_a ? a.a : a.b)[static_cast<size_t>(l) * 4 + target] = p;
      }
    }
  int max_rank = r;
  for (const Adapter& other : adapters_) max_rank = std::max(max_rank, other.rank);
  const size_t mid = static_cast<size_t>(opt_.max_rows) * max_rank;
  if (lora_mid_.bytes() < mid * sizeof(float)) lora_mid_ = DeviceBuffer(backend_, mid * sizeof(float));
  if (lora_out_.bytes() == 0)
    lora_out_ = DeviceBuffer(backend_, static_cast<size_t>(opt_.max_rows) * 4 * cfg_.n_embd * sizeof(float));
  adapters_.push_back(std::move(a));
  return static_cast<int>(adapters_.size());
}

void InferenceModel::RemoveAdapter(int id) {
  assert(has_adapter(id));
  adapters_[id - 1] = Adapter{};
}

void InferenceModel::ApplyAdapters(float* out, const float* inp, int target, int l, const ForwardBatch& batch,
                                   int OC, int K) {
  if (batch.adapters.empty()) return;
  const int S = batch.S();
  assert(static_cast<int>(batch.adapters.size()) == S);
  for (int s = 0; s < S;) {
    const int id = batch.adapters[s];
    int e = s + 1;
    while (e < S && batch.adapters[e] == id) e++;
    if (id > 0) {
      assert(has_adapter(id));
      const Adapter& ad = adapters_[id - 1];
      const size_t m = static_cast<size_t>(l) * 4 + target;
      if (ad.a[m]) {
        // The sequences' rows are consecutive (the engine appends each sequence's rows in order).
        const int row0 = batch.seqs[3 * s];
        const int rows = batch.seqs[3 * (e - 1)] + batch.seqs[3 * (e - 1) + 1] - row0;
        float* o = out + static_cast<size_t>(row0) * OC;
        const float* x = inp + static_cast<size_t>(row0) * K;
        if (ad.bf16) {
          const bool row_independent = opt_.max_seqs > 1;
          backend_->MatmulBF16(lora_mid_.as<float>(), x, static_cast<const uint16_t*>(ad.a[m]), nullptr, rows,
                               ad.rank, K, row_independent);
          backend_->MatmulBF16(lora_out_.as<float>(), lora_mid_.as<float>(),
                               static_cast<const uint16_t*>(ad.b[m]), nullptr, rows, OC, ad.rank,
                               row_independent);
        } else {
          backend_->MatmulF32Weights(lora_mid_.as<float>(), x, static_cast<const float*>(ad.a[m]), nullptr,
                                     rows, ad.rank, K);
          backend_->MatmulF32Weights(lora_out_.as<float>(), lora_mid_.as<float>(),
                                     static_cast<const float*>(ad.b[m]), nullptr, rows, OC, ad.rank);
        }
        backend_->Add(o, o, lora_out_.as<float>(), static_cast<size_t>(rows) * OC);
      }
    }
    s = e;
  }
}

const float* InferenceModel::P(const char* name, int layer) const {
  for (const auto& t : layout_)
    if (t.name == name) return params_.as<float>() + t.offset + layer * (t.numel / t.shape[0]);
  assert(false && "unknown parameter");
  return nullptr;
}

void InferenceModel::RunLinear(float* out, const float* inp, const Linear& w, const float* bias, int N,
                               int OC, int K) {
  if (w.q4) {
    backend_->MatmulInt4(out, inp, w.q4, w.scale, bias, N, OC, K);
  } else if (w.q) {
    backend_->MatmulInt8(out, inp, w.q, w.scale, bias, N, OC, K);
  } else if (w.bf16) {
    // Activations rounded to bf16, bf16 x bf16 products, fp32 sums: CPU vdpbf16ps or FMA tiles
    // (cpu/bf16_matmul.cpp, row independent); GPU the tensor cores through cuBLASLt.
    // An engine of one stream (max_seqs 1) never batches, so the backend may pick its kernel by row count.
    backend_->MatmulBF16(out, inp, w.bf16, bias, N, OC, K, /*row_independent=*/opt_.max_seqs > 1);
  } else {
    // fp32: CPU FMA tiles that read the weights at the memory bound at one row (cpu/f32_matmul.cpp, row
    // independent); the reference and GPU backends their fp32 Matmul.
    backend_->MatmulF32Weights(out, inp, w.f32, bias, N, OC, K);
  }
}

const float* InferenceModel::Forward(const ForwardBatch& batch) {
  const int L = cfg_.n_layer, C = cfg_.n_embd, V = cfg_.vocab_size, NH = cfg_.n_head, bs = opt_.block_size;
  const int N = batch.N(), S = batch.S(), R = static_cast<int>(batch.logit_rows.size());
  assert(N >= 1 && N <= opt_.max_rows && S <= opt_.max_seqs && R <= opt_.max_logit_rows);
  assert(batch.block_tables.size() == static_cast<size_t>(S) * max_blocks_);
  Acts a(acts_.as<float>(), opt_.max_rows, opt_.max_logit_rows, C, V);

  // Batch metadata to the device: tokens, positions, slots [N], seqs [S,3], block tables [S, max_blocks].
  int32_t* d_tokens = ints_.as<int32_t>();
  int32_t* d_positions = d_tokens + N;
  int32_t* d_slots = d_positions + N;
  int32_t* d_seqs = d_slots + N;
  int32_t* d_tables = d_seqs + 3 * S;
  backend_->Upload(d_tokens, batch.tokens.data(), N * sizeof(int32_t));
  backend_->Upload(d_positions, batch.positions.data(), N * sizeof(int32_t));
  backend_->Upload(d_slots, batch.slots.data(), N * sizeof(int32_t));
  backend_->Upload(d_seqs, batch.seqs.data(), 3 * S * sizeof(int32_t));
  backend_->Upload(d_tables, batch.block_tables.data(), batch.block_tables.size() * sizeof(int32_t));

  auto t = std::chrono::steady_clock::now();
  auto lap = [&](const char* op) {
    if (!profile_) return;
    backend_->Synchronize();
    const auto now = std::chrono::steady_clock::now();
    (*profile_)[op] += std::chrono::duration<double>(now - t).count();
    t = now;
  };
  lap("upload");
  const size_t layer_bytes = opt_.num_blocks * KvBlockBytes(opt_.kv_dtype, C, cfg_.n_head, bs);
  if (head_->bf16)
    backend_->EmbedTokensBF16(a.x, d_tokens, d_positions, head_->bf16, P("wpe"), N, C);
  else
    backend_->EmbedTokens(a.x, d_tokens, d_positions, P("wte"), P("wpe"), N, C);
  lap("embed");
  for (int l = 0; l < L; l++) {
    const LayerParams& p = layer_params_[l];
    char* k_cache = k_cache_.as<char>() + l * layer_bytes;
    char* v_cache = v_cache_.as<char>() + l * layer_bytes;
    backend_->LayerNormForward(a.ln, a.mean, a.rstd, a.x, p.ln1w, p.ln1b, N, C);
    lap("layernorm");
    RunLinear(a.qkv, a.ln, qkvw_[l], p.qkvb, N, 3 * C, C);
    ApplyAdapters(a.qkv, a.ln, 0, l, batch, 3 * C, C);
    lap("matmul qkv");
    backend_->KvCacheWrite(k_cache, v_cache, opt_.kv_dtype, a.qkv, d_slots, N, C, NH, bs);
    lap("kv write");
    backend_->PagedAttentionForward(a.atty, a.qkv, k_cache, v_cache, opt_.kv_dtype, d_seqs, d_tables, S,
                                    max_blocks_, N, C, NH, bs);
    lap("attention");
    RunLinear(a.proj, a.atty, attprojw_[l], p.attprojb, N, C, C);
    ApplyAdapters(a.proj, a.atty, 1, l, batch, C, C);
    lap("matmul attproj");
    backend_->Add(a.x2, a.x, a.proj, static_cast<size_t>(N) * C);
    lap("residual");
    backend_->LayerNormForward(a.ln, a.mean, a.rstd, a.x2, p.ln2w, p.ln2b, N, C);
    lap("layernorm");
    RunLinear(a.fch, a.ln, fcw_[l], p.fcb, N, 4 * C, C);
    ApplyAdapters(a.fch, a.ln, 2, l, batch, 4 * C, C);
    lap("matmul fc");
    backend_->GeluForward(a.fcg, a.fch, static_cast<size_t>(N) * 4 * C);
    lap("gelu");
    RunLinear(a.proj, a.fcg, fcprojw_[l], p.fcprojb, N, C, 4 * C);
    ApplyAdapters(a.proj, a.fcg, 3, l, batch, C, 4 * C);
    lap("matmul fcproj");
    backend_->Add(a.x, a.x2, a.proj, static_cast<size_t>(N) * C);
    lap("residual");
  }
  if (R == 0) return nullptr;
  // Only the rows that sample a token go through the head (layernorm is per row, so gathering first is
  // exact).
  for (int r = 0; r < R; r++)
    backend_->Copy(a.last + static_cast<size_t>(r) * C, a.x + static_cast<size_t>(batch.logit_rows[r]) * C,
                   C * sizeof(float));
  backend_->LayerNormForward(a.ln, a.mean, a.rstd, a.last, P("lnfw"), P("lnfb"), R, C);
  lap("layernorm");
  RunLinear(a.logits, a.ln, *head_, nullptr, R, V, C);
  lap("matmul head");
  if (backend_->capabilities().host_addressable_memory) return a.logits;
  host_logits_.resize(static_cast<size_t>(opt_.max_logit_rows) * V);
  backend_->Download(host_logits_.data(), a.logits, static_cast<size_t>(R) * V * sizeof(float));
  lap("logits download");
  return host_logits_.data();
}

void InferenceModel::ZeroKvCache() {
  backend_->Zero(k_cache_.data(), k_cache_.bytes());
  backend_->Zero(v_cache_.data(), v_cache_.bytes());
  backend_->Synchronize();
}

}  // namespace tern
