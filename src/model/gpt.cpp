#include "model/gpt.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/bf16.h"
#include "model/init.h"

namespace tern {

namespace {
// Floats that hold `bytes` (the attention state and scratch are carved from the float buffers).
size_t AttentionFloats(size_t bytes) {
  return (bytes + sizeof(float) - 1) / sizeof(float);
}
// An activation the model owns, seen as an operand, written again (Operand points to const).
template <typename T>
T* Mutable(Operand op) {
  return static_cast<T*>(const_cast<void*>(op.ptr));
}
}  // namespace

// Activation pointers for one (B, T): carved out of one buffer sized for (max_B, max_T).
// Per-layer tensors are stacked [L, ...]; shapes in the comments use N = B*T. With Recompute::kGelu,
// fch_gelu is one layer's [N, 4C], written by every layer's forward and recomputed in the backward. With
// Recompute::kBlocks every per-layer tensor but residual3 holds one layer ([1, ...]): the backward re-runs
// each layer's forward from its input (encoded or the previous residual3) before that layer's backward. With
// bf16 compute fch_gelu holds bf16: it is only ever the fcproj matmuls' operand, which bf16 compute rounds to
// bf16 anyway (the same values, half the bytes, and no cast in the forward or the backward). So do the layer
// norms' outputs ln1, ln2 and lnf (matmul operands only: their backward reads the layer norm's input) and
// the attention output atty (the attention projection's operand). q, k, v are bf16 too, as PyTorch autocast
// keeps them: the qkv projection rounds its output (bias added in fp32 first) and attention reads them
// widened, its products in fp32 on the CPU and in bf16 on CUDA (which rounded them to bf16 already).
struct Gpt::Acts {
  float* encoded;    // [N, C]
  void* ln1;         // [L, N, C]: fp32, or bf16 (bf16)
  float* ln1_mean;   // [L, N]
  float* ln1_rstd;   // [L, N]
  void* qkv;         // [L, N, 3C]: fp32, or bf16 (bf16)
  void* atty;        // [L, N, C]: fp32, or bf16 (bf16)
  float* att;        // [L, state]: each layer's attention state (AttentionStateBytes; naive: [B, NH, T, T])
  float* attproj;    // [L, N, C]
  float* residual2;  // [L, N, C]
  void* ln2;         // [L, N, C]: fp32, or bf16 (bf16)
  float* ln2_mean;   // [L, N]
  float* ln2_rstd;   // [L, N]
  float* fch;        // [L, N, 4C]
  void* fch_gelu;    // [L, N, 4C], or [N, 4C] with Recompute::kGelu: fp32, or bf16 (gelu_bf16)
  bool bf16;      // bf16 compute: q, k, v, the attention, GELU and layer norm outputs and the logits in bf16
  bool blocks;    // Recompute::kBlocks: the per-layer tensors but residual3 hold one layer
  float* fcproj;  // [L, N, C]
  float* residual3;  // [L, N, C]: each layer's output, the next one's input (kept with every recompute)
  void* lnf;         // [N, C]: fp32, or bf16 (bf16)
  float* lnf_mean;   // [N]
  float* lnf_rstd;   // [N]
  // [GptLogitsRows(N, logits_chunk), V]: one chunk of rows at a time, then its gradient in place; fp32, or
  // bf16 with bf16 compute (the head's matmul rounds them as it stores them; the loss reads them widened and
  // writes the bf16 gradient that the head's backward matmuls multiply)
  void* logits;
  float* losses;  // [N]
  size_t total;   // floats used

  size_t att_stride;  // floats of one layer's attention state

  Acts(float* base, const GptConfig& c, size_t B, size_t T, Recompute recompute, AttentionKind attention,
       Compute compute, int logits_chunk) {
    const size_t L = c.n_layer, C = c.n_embd, V = c.vocab_size, N = B * T;
    att_stride = AttentionFloats(
        AttentionStateBytes(attention, static_cast<int>(B), static_cast<int>(T), c.n_embd, c.n_head, compute)
            .state);
    size_t off = 0;
    auto take = [&](size_t n) {
      float* p = base ? base + off : nullptr;
      off += n;
      return p;
    };
    bf16 = compute == Compute::kBF16;
    // Floats taken by e elements of an activation stored in bf16 under bf16 compute.
    auto elems = [&](size_t e) { return bf16 ? (e + 1) / 2 : e; };
    // Recompute::kBlocks: one layer's working set, rewritten by every layer and recomputed in the backward.
    blocks = recompute == Recompute::kBlocks;
    const size_t Lk = blocks ? 1 : L;
    encoded = take(N * C);
    ln1 = take(elems(Lk * N * C));
    ln1_mean = take(Lk * N);
    ln1_rstd = take(Lk * N);
    qkv = take(elems(Lk * N * 3 * C));
    atty = take(elems(Lk * N * C));
    att = take(Lk * att_stride);
    attproj = take(Lk * N * C);
    residual2 = take(Lk * N * C);
    ln2 = take(elems(Lk * N * C));
    ln2_mean = take(Lk * N);
    ln2_rstd = take(Lk * N);
    fch = take(Lk * N * 4 * C);
    fch_gelu = take(elems((recompute == Recompute::kNone ? L : 1) * N * 4 * C));
    fcproj = take(Lk * N * C);
    residual3 = take(L * N * C);
    lnf = take(elems(N * C));
    lnf_mean = take(N);
    lnf_rstd = take(N);
    const size_t logit_elems = GptLogitsRows(N, logits_chunk) * V;
    logits = take(elems(logit_elems));
    losses = take(N);
    total = off;
  }
  // Layer l's GELU output as a matmul operand: its own slice, or the shared buffer with recompute.
  Operand gelu(int l, size_t N, size_t C, Recompute recompute) const {
    const size_t off = recompute != Recompute::kNone ? 0 : static_cast<size_t>(l) * N * 4 * C;
    return At(fch_gelu, off);
  }
  // Layer l's slot in the per-layer tensors but residual3: its own, or the one slot with Recompute::kBlocks.
  size_t slot(int l) const { return blocks ? 0 : static_cast<size_t>(l); }
  // An activation kept in bf16 under bf16 compute (ln1, ln2, lnf, the GELU output) from element `off` on, as
  // a matmul operand.
  Operand At(void* base, size_t off) const {
    if (bf16) return BF16(static_cast<uint16_t*>(base) + off);
    return F32(static_cast<float*>(base) + off);
  }
};

// Backward scratch, reused by every layer.
struct BackwardScratch {
  float *dresidual, *dln, *datty, *dqkv, *dfch;
  float* att;  // attention's backward scratch (AttentionStateBytes; naive: datt[B, NH, T, T])
  size_t total;
  BackwardScratch(float* base, const GptConfig& c, size_t B, size_t T, AttentionKind attention,
                  Compute compute) {
    const size_t C = c.n_embd, N = B * T;
    size_t off = 0;
    auto take = [&](size_t n) {
      float* p = base ? base + off : nullptr;
      off += n;
      return p;
    };
    dresidual = take(N * C);
    dln = take(N * C);
    datty = take(N * C);
    dqkv = take(N * 3 * C);
    dfch = take(N * 4 * C);
    att = take(AttentionFloats(
        AttentionStateBytes(attention, static_cast<int>(B), static_cast<int>(T), c.n_embd, c.n_head, compute)
            .scratch));
    total = off;
  }
};

GptMemory Gpt::Allocation(const GptConfig& config, int max_B, int max_T, Compute compute, Recompute recompute,
                          AttentionKind attention, int logits_chunk, const LoraSpec& lora) {
  const size_t P = GptParamCount(config);
  GptMemory m;
  m.params = P * sizeof(float);
  m.params_bf16 = compute == Compute::kBF16 ? P * sizeof(uint16_t) : 0;
  m.grads = P * sizeof(float);
  m.adam_state = 2 * P * sizeof(float);
  m.activations =
      Acts(nullptr, config, max_B, max_T, recompute, attention, compute, logits_chunk).total * sizeof(float) +
      2 * static_cast<size_t>(max_B) * max_T * sizeof(int32_t) + kGptLossSumBytes;  // tokens_, loss sum
  m.scratch = BackwardScratch(nullptr, config, max_B, max_T, attention, compute).total * sizeof(float);
  // LoRA: the adapters join the weights; gradients and moments are theirs only; its scratch.
  return WithLora(m, config, lora, compute == Compute::kBF16, static_cast<size_t>(max_B) * max_T);
}

GptMemory Gpt::memory() const {
  GptMemory m;
  m.params = params_.bytes();
  m.params_bf16 = params_bf16_.bytes();
  m.grads = grads_.bytes();
  m.adam_state = adam_m_.bytes() + adam_v_.bytes();
  m.activations = acts_.bytes() + tokens_.bytes();
  m.scratch = scratch_.bytes() + lora_scratch_.bytes();
  return m;
}

Gpt::Gpt(Backend* backend, const GptConfig& config, int max_B, int max_T, Compute compute,
         Recompute recompute, int logits_chunk, const LoraSpec& lora)
    : backend_(backend),
      config_(config),
      max_B_(max_B),
      max_T_(max_T),
      compute_(compute),
      recompute_(recompute),
      logits_chunk_(logits_chunk),
      attention_(backend->attention_kind()),
      lora_(lora) {
  assert(config.Validate().ok());
  assert(lora.Validate(config).ok());
  assert(max_T <= config.block_size);
  assert(logits_chunk >= 0);
  layout_ = GptParamLayout(config_);
  num_params_ = num_base_params_ = GptParamCount(config_);
  trainable_ = {0, num_params_};
  if (lora_.enabled()) {
    const auto adapters = LoraParamLayout(config_, lora_, num_base_params_);
    layout_.insert(layout_.end(), adapters.begin(), adapters.end());
    num_params_ += LoraParamCount(config_, lora_);
    trainable_ = {num_base_params_, num_params_ - num_base_params_};
    lora_matrices_ = LoraMatrices(config_, lora_);
    lora_scratch_ = DeviceBuffer(backend_, LoraScratchFloats(config_, lora_, compute_ == Compute::kBF16,
                                                             static_cast<size_t>(max_B) * max_T) *
                                               sizeof(float));
    const int r = lora_.rank;
    std::vector<float> eye(static_cast<size_t>(r) * r, 0.0f);
    for (int i = 0; i < r; i++) eye[static_cast<size_t>(i) * r + i] = lora_.scale();
    backend_->Upload(Parts().s_eye, eye.data(), eye.size() * sizeof(float));
  }
  shard_ = trainable_;
  params_ = DeviceBuffer(backend_, num_params_ * sizeof(float));
  if (compute_ == Compute::kBF16) params_bf16_ = DeviceBuffer(backend_, num_params_ * sizeof(uint16_t));
  grads_ = DeviceBuffer(backend_, trainable_.count * sizeof(float));
  adam_m_ = DeviceBuffer(backend_, trainable_.count * sizeof(float));
  adam_v_ = DeviceBuffer(backend_, trainable_.count * sizeof(float));
  acts_ = DeviceBuffer(
      backend_, Acts(nullptr, config_, max_B, max_T, recompute_, attention_, compute_, logits_chunk_).total *
                    sizeof(float));
  scratch_ = DeviceBuffer(
      backend_, BackwardScratch(nullptr, config_, max_B, max_T, attention_, compute_).total * sizeof(float));
  tokens_ =
      DeviceBuffer(backend_, 2 * static_cast<size_t>(max_B) * max_T * sizeof(int32_t) + kGptLossSumBytes);
}

float* Gpt::P(const char* name) const {
  for (const auto& t : layout_)
    if (t.name == name) return params_.as<float>() + t.offset;
  assert(false && "unknown parameter");
  return nullptr;
}

float* Gpt::G(const char* name) const {
  for (const auto& t : layout_)
    if (t.name == name)
      return t.offset < trainable_.offset ? nullptr : grads_.as<float>() + (t.offset - trainable_.offset);
  assert(false && "unknown parameter");
  return nullptr;
}

void Gpt::LayerNorm(Operand out, float* mean, float* rstd, const float* inp, const float* weight,
                    const float* bias, size_t N, int C, const float* add, float* residual) {
  const int n = static_cast<int>(N);
  const bool bf16 = out.dtype == DType::kBF16;
  if (add && bf16) {
    backend_->ResidualLayerNormForwardBF16(residual, Mutable<uint16_t>(out), mean, rstd, inp, add, weight,
                                           bias, n, C);
  } else if (add) {
    backend_->ResidualLayerNormForward(residual, Mutable<float>(out), mean, rstd, inp, add, weight, bias, n,
                                       C);
  } else if (bf16) {
    backend_->LayerNormForwardBF16(Mutable<uint16_t>(out), mean, rstd, inp, weight, bias, n, C);
  } else {
    backend_->LayerNormForward(Mutable<float>(out), mean, rstd, inp, weight, bias, n, C);
  }
}

Operand Gpt::W(const char* name, size_t offset_elems) const {
  for (const auto& t : layout_) {
    if (t.name != name) continue;
    if (compute_ == Compute::kBF16) return BF16(params_bf16_.as<uint16_t>() + t.offset + offset_elems);
    return F32(params_.as<float>() + t.offset + offset_elems);
  }
  assert(false && "unknown parameter");
  return {};
}

void Gpt::SyncBf16Copy() {
  if (compute_ == Compute::kBF16) backend_->CastF32ToBF16(params_bf16_.as<uint16_t>(), params(), num_params_);
}

void Gpt::InitWeights(uint64_t seed) {
  std::vector<float> w = GptInitialWeights(config_, seed);
  if (lora_.enabled()) {
    const std::vector<float> adapters = LoraInitialWeights(config_, lora_, seed);
    w.insert(w.end(), adapters.begin(), adapters.end());
  }
  SetParameters(w);
}

void Gpt::SetParameters(const std::vector<float>& host) {
  assert(host.size() == num_params_);
  backend_->Upload(params(), host.data(), num_params_ * sizeof(float));
  WeightsChanged();
}

void Gpt::SetBaseParameters(const std::vector<float>& host) {
  assert(host.size() == num_base_params_);
  backend_->Upload(params(), host.data(), num_base_params_ * sizeof(float));
  WeightsChanged();
}

std::vector<float> Gpt::GetParameters() const {
  std::vector<float> host(num_params_);
  backend_->Download(host.data(), params(), num_params_ * sizeof(float));
  return host;
}

std::vector<float> Gpt::GetGradients() const {
  assert(!overwrite_head_grad_ && !overwrite_block_grads_ &&
         "GetGradients after ZeroGrad without a Backward");
  std::vector<float> host(trainable_.count);
  backend_->Download(host.data(), grads(), trainable_.count * sizeof(float));
  return host;
}

void Gpt::SetGradients(const std::vector<float>& host) {
  assert(host.size() == trainable_.count);
  backend_->Upload(grads(), host.data(), trainable_.count * sizeof(float));
  overwrite_head_grad_ = overwrite_block_grads_ = false;
}

std::vector<float> Gpt::GetAdamState() const {
  const size_t n = shard_.count;
  std::vector<float> host(2 * n);
  backend_->Download(host.data(), adam_m_.data(), n * sizeof(float));
  backend_->Download(host.data() + n, adam_v_.data(), n * sizeof(float));
  return host;
}

void Gpt::SetAdamState(const std::vector<float>& host) {
  const size_t n = shard_.count;
  assert(host.size() == 2 * n);
  backend_->Upload(adam_m_.data(), host.data(), n * sizeof(float));
  backend_->Upload(adam_v_.data(), host.data() + n, n * sizeof(float));
}

void Gpt::SetOptimizerShard(GradRange shard) {
  assert(shard.offset >= trainable_.offset && shard.offset + shard.count <= num_params_);
  shard_ = shard;
  // At least one element, so that the pointers stay valid for a rank whose shard is empty.
  const size_t n = std::max<size_t>(shard.count, 1);
  adam_m_ = DeviceBuffer(backend_, n * sizeof(float));
  adam_v_ = DeviceBuffer(backend_, n * sizeof(float));
}

float Gpt::Forward(const int32_t* inputs, const int32_t* targets, int B, int T, float dloss) {
  return Run(inputs, targets, B, T, dloss, true);
}

void Gpt::ForwardAccumulate(const int32_t* inputs, const int32_t* targets, int B, int T, float dloss,
                            double loss_divisor) {
  assert(targets && "ForwardAccumulate needs targets");
  accumulate_divisor_ = loss_divisor;
  Run(inputs, targets, B, T, dloss, false);
}

double Gpt::TakeLossSum() {
  double sum = 0;
  backend_->Download(&sum, loss_sum(), sizeof sum);
  ClearLossSum();
  return sum;
}

void Gpt::ClearLossSum() {
  backend_->Zero(loss_sum(), sizeof(double));
}

double* Gpt::loss_sum() const {
  // After the input and target ids of the largest micro-batch (8-byte aligned: 2 * max_B * max_T ints).
  return reinterpret_cast<double*>(tokens_.as<int32_t>() + 2 * static_cast<size_t>(max_B_) * max_T_);
}

// One layer's forward. In the forward pass (recompute false) ln1 is already there (the first layer norm, or
// the previous layer's fused one) and the layer ends with fcproj and the next layer norm, fused with the
// residual add into residual3 (the next ln1, or lnf after the last layer). Recomputed for Recompute::kBlocks
// (recompute true, in the backward), it starts with ln1 from the layer's stored input, by LayerNormForward:
// the fused op's output bit for bit (Backend's contract), so the recomputed activations, and the gradients,
// are the forward's; and it stops at the GELU output, all the backward reads (residual3 is kept).
void Gpt::ForwardLayer(const Acts& a, int l, int B, int T, bool recompute) {
  const int L = config_.n_layer, C = config_.n_embd, NH = config_.n_head;
  const size_t N = static_cast<size_t>(B) * T;
  const size_t lc = static_cast<size_t>(l) * C, nc = N * C, k = a.slot(l);
  const float* residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * nc;
  const Operand ln1 = a.At(a.ln1, k * nc);
  const Operand qkv = a.At(a.qkv, k * 3 * nc);
  const Operand atty = a.At(a.atty, k * nc);
  float* attproj = a.attproj + k * nc;
  float* residual2 = a.residual2 + k * nc;
  const Operand ln2 = a.At(a.ln2, k * nc);
  float* fch = a.fch + k * 4 * nc;
  const Operand fch_gelu = a.gelu(l, N, C, recompute_);
  float* fcproj = a.fcproj + k * nc;
  float* residual3 = a.residual3 + l * nc;

  const size_t CC = static_cast<size_t>(C) * C;
  MergeLayer(l);  // LoRA: this layer's adapted matrices (nothing without)
  if (recompute)
    LayerNorm(ln1, a.ln1_mean + k * N, a.ln1_rstd + k * N, residual, P("ln1w") + lc, P("ln1b") + lc, N, C);
  if (a.bf16) {
    backend_->MatmulToBF16(Mutable<uint16_t>(qkv), ln1, LW("qkvw", l, 3 * CC), P("qkvb") + 3 * lc, N, 3 * C,
                           C, false, true, compute_);
    backend_->AttentionForwardBF16(Mutable<uint16_t>(atty), a.att + k * a.att_stride,
                                   static_cast<const uint16_t*>(qkv.ptr), B, T, C, NH, compute_);
  } else {
    backend_->Matmul(Mutable<float>(qkv), ln1, LW("qkvw", l, 3 * CC), P("qkvb") + 3 * lc, N, 3 * C, C, false,
                     true, 0.0f, compute_);
    backend_->AttentionForward(Mutable<float>(atty), a.att + k * a.att_stride,
                               static_cast<const float*>(qkv.ptr), B, T, C, NH, compute_);
  }
  backend_->Matmul(attproj, atty, LW("attprojw", l, CC), P("attprojb") + lc, N, C, C, false, true, 0.0f,
                   compute_);
  LayerNorm(ln2, a.ln2_mean + k * N, a.ln2_rstd + k * N, residual, P("ln2w") + lc, P("ln2b") + lc, N, C,
            attproj, residual2);
  if (a.bf16) {
    backend_->MatmulGeluBF16(Mutable<uint16_t>(fch_gelu), fch, ln2, LW("fcw", l, 4 * CC), P("fcb") + 4 * lc,
                             N, 4 * C, C, false, true, compute_);
  } else {
    backend_->MatmulGelu(Mutable<float>(fch_gelu), fch, ln2, LW("fcw", l, 4 * CC), P("fcb") + 4 * lc, N,
                         4 * C, C, false, true, compute_);
  }
  if (recompute) return;
  backend_->Matmul(fcproj, fch_gelu, LW("fcprojw", l, 4 * CC), P("fcprojb") + lc, N, C, 4 * C, false, true,
                   0.0f, compute_);
  if (l + 1 < L) {
    const size_t next = static_cast<size_t>(l + 1), nk = a.slot(l + 1);
    LayerNorm(a.At(a.ln1, nk * nc), a.ln1_mean + nk * N, a.ln1_rstd + nk * N, residual2, P("ln1w") + next * C,
              P("ln1b") + next * C, N, C, fcproj, residual3);
  } else {
    LayerNorm(a.At(a.lnf, 0), a.lnf_mean, a.lnf_rstd, residual2, P("lnfw"), P("lnfb"), N, C, fcproj,
              residual3);
  }
}

float Gpt::Run(const int32_t* inputs, const int32_t* targets, int B, int T, float dloss, bool read_loss) {
  assert(B <= max_B_ && T <= max_T_);
  assert(backend_->attention_kind() == attention_ &&
         "the attention kernel changed after the model was sized");
  const int L = config_.n_layer, C = config_.n_embd, V = config_.vocab_size;
  const size_t N = static_cast<size_t>(B) * T;
  Acts a(acts_.as<float>(), config_, B, T, recompute_, attention_, compute_, logits_chunk_);
  int32_t* d_inputs = tokens_.as<int32_t>();
  int32_t* d_targets = d_inputs + N;
  backend_->Upload(d_inputs, inputs, N * sizeof(int32_t));
  host_inputs_.assign(inputs, inputs + N);  // for EncoderBackward (CUDA buckets the ids on the host)
  if (targets) backend_->Upload(d_targets, targets, N * sizeof(int32_t));
  last_B_ = B;
  last_T_ = T;
  have_head_grads_ = false;

  backend_->EncoderForward(a.encoded, d_inputs, P("wte"), P("wpe"), B, T, C);
  // Each residual add runs fused with the layer norm that reads its sum: ln2 within a layer, and the next
  // layer's ln1 (or, after the last layer, lnf) at its end; the first ln1 reads the embeddings.
  LayerNorm(a.At(a.ln1, 0), a.ln1_mean, a.ln1_rstd, a.encoded, P("ln1w"), P("ln1b"), N, C);
  for (int l = 0; l < L; l++) ForwardLayer(a, l, B, T, /*recompute=*/false);
  const size_t rows = GptLogitsRows(N, logits_chunk_);
  if (!targets) {
    assert(N <= rows && "Forward without targets keeps the logits of at most logits_chunk rows");
    if (a.bf16) {
      backend_->MatmulToBF16(static_cast<uint16_t*>(a.logits), a.At(a.lnf, 0), W("wte", 0), nullptr, N, V, C,
                             false, true, compute_);
    } else {
      backend_->Matmul(static_cast<float*>(a.logits), a.At(a.lnf, 0), W("wte", 0), nullptr, N, V, C, false,
                       true, 0.0f, compute_);
    }
    return std::numeric_limits<float>::quiet_NaN();
  }
  // The fused classifier: chunk by chunk of rows, the logits, the loss and (dloss != 0) their gradient in
  // place, then the head's backward from that gradient before the next chunk overwrites it: the input
  // gradient of the final layer norm (dln, which Backward continues from) and the tied embedding's weight
  // gradient (+=).
  BackwardScratch s(scratch_.as<float>(), config_, B, T, attention_, compute_);
  for (size_t r0 = 0; r0 < N; r0 += rows) {
    const int n = static_cast<int>(std::min(rows, N - r0));
    const Operand lnf = a.At(a.lnf, r0 * C);
    // bf16 compute: bf16 logits and gradient (half the bytes; what both matmuls below multiply).
    Operand dlogits;
    if (a.bf16) {
      uint16_t* logits = static_cast<uint16_t*>(a.logits);
      backend_->MatmulToBF16(logits, lnf, W("wte", 0), nullptr, n, V, C, false, true, compute_);
      backend_->CrossEntropyForwardBackwardBF16(a.losses + r0, logits, d_targets + r0, n, V, dloss);
      dlogits = BF16(logits);
    } else {
      float* logits = static_cast<float*>(a.logits);
      backend_->Matmul(logits, lnf, W("wte", 0), nullptr, n, V, C, false, true, 0.0f, compute_);
      backend_->CrossEntropyForwardBackward(a.losses + r0, logits, d_targets + r0, n, V, dloss);
      dlogits = F32(logits);
    }
    if (dloss == 0.0f) continue;
    backend_->Matmul(s.dln + r0 * C, dlogits, W("wte", 0), nullptr, n, C, V, false, false, 0.0f, compute_);
    if (float* dwte = G("wte")) {  // frozen under LoRA
      backend_->Matmul(dwte, dlogits, lnf, nullptr, V, C, n, true, false, overwrite_head_grad_ ? 0.0f : 1.0f,
                       compute_);
      overwrite_head_grad_ = false;
    }
  }
  have_head_grads_ = dloss != 0.0f;
  if (!read_loss) {
    backend_->AccumulateMean(loss_sum(), a.losses, N,
                             accumulate_divisor_ > 0 ? accumulate_divisor_ : static_cast<double>(N));
    return std::numeric_limits<float>::quiet_NaN();
  }
  return static_cast<float>(backend_->Sum(a.losses, N) / N);
}

void Gpt::Backward(const GradsReady& on_ready) {
  assert(have_head_grads_ && "Backward() needs a Forward() with targets and dloss != 0");
  const int B = last_B_, T = last_T_;
  const int L = config_.n_layer, C = config_.n_embd, NH = config_.n_head;
  const size_t N = static_cast<size_t>(B) * T, nc = N * C;
  Acts a(acts_.as<float>(), config_, B, T, recompute_, attention_, compute_, logits_chunk_);
  BackwardScratch s(scratch_.as<float>(), config_, B, T, attention_, compute_);
  const int32_t* d_inputs = tokens_.as<int32_t>();
  have_head_grads_ = false;
  // The first backward after ZeroGrad writes the weight matrices' gradients (beta 0) instead of adding.
  const float dw_beta = overwrite_block_grads_ ? 0.0f : 1.0f;
  overwrite_block_grads_ = false;
  // LoRA: the layer norms' and biases' gradients are not kept (frozen); the layer norms write theirs to a
  // sink.
  const bool frozen = lora_.enabled();
  float* sink = frozen ? Parts().ln_sink : nullptr;
  auto dweight = [&](const char* name, size_t off) { return frozen ? sink : G(name) + off; };
  auto dbias = [&](const char* name, size_t off) { return frozen ? sink + C : G(name) + off; };
  auto bias_backward = [&](const char* name, size_t off, const float* dout, int OC) {
    if (!frozen) backend_->BiasBackward(G(name) + off, dout, static_cast<int>(N), OC);
  };

  backend_->Zero(s.dresidual, nc * sizeof(float));
  // Head: Forward's fused classifier left the final layer norm's output gradient in s.dln (and added the
  // head's share of wte's gradient).
  const float* last = a.residual3 + (L - 1) * nc;
  backend_->LayerNormBackward(s.dresidual, dweight("lnfw", 0), dbias("lnfb", 0), s.dln, last, P("lnfw"),
                              a.lnf_mean, a.lnf_rstd, N, C);
  // The gradient ranges of one tensor (all of it, or layer l's slice of a stacked one), in the buffer's order
  // (offsets into grads()).
  std::vector<GradRange> ready;
  auto whole = [&](const std::string& name) {
    for (const auto& t : layout_)
      if (t.name == name) ready.push_back({t.offset - trainable_.offset, t.numel});
  };
  auto slice = [&](const std::string& name, int l) {
    for (const auto& t : layout_)
      if (t.name == name) ready.push_back({t.offset - trainable_.offset + l * (t.numel / L), t.numel / L});
  };
  auto announce = [&] {
    if (on_ready) on_ready(ready);
    ready.clear();
  };
  if (on_ready && !frozen) {
    whole("lnfw");
    whole("lnfb");
    announce();
  }

  for (int l = L - 1; l >= 0; l--) {
    const size_t lc = static_cast<size_t>(l) * C, k = a.slot(l), CC = static_cast<size_t>(C) * C;
    const int n = static_cast<int>(N);
    // Recompute::kBlocks: the layer's activations again, from its input; the last layer's are still there.
    if (a.blocks && l != L - 1) ForwardLayer(a, l, B, T, /*recompute=*/true);
    MergeLayer(l);  // LoRA: the layer's merged matrices again (the forward's last layer's are still there)
    const float* residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * nc;
    const Operand ln1 = a.At(a.ln1, k * nc);
    const Operand qkv = a.At(a.qkv, k * 3 * nc);
    const Operand atty = a.At(a.atty, k * nc);
    const float* att = a.att + k * a.att_stride;
    const float* residual2 = a.residual2 + k * nc;
    const Operand ln2 = a.At(a.ln2, k * nc);
    const float* fch = a.fch + k * 4 * nc;
    const Operand fch_gelu = a.gelu(l, N, C, recompute_);

    // residual3 = residual2 + fcproj: the gradient of fcproj is dresidual itself. Its input gradient goes
    // straight through GELU's gradient (the epilogue) to dfch, the fc output's gradient.
    backend_->MatmulDGelu(s.dfch, fch, F32(s.dresidual), LW("fcprojw", l, 4 * CC), N, 4 * C, C, false, false,
                          compute_);
    // Recompute: the shared buffer still holds the last layer's GELU output from the forward; every other
    // layer's is recomputed from fch by the same op, so the values (and the gradients) are the forward's.
    if (recompute_ == Recompute::kGelu && l != L - 1) {
      if (a.bf16) {
        backend_->GeluForwardBF16(Mutable<uint16_t>(fch_gelu), fch, 4 * nc);
      } else {
        backend_->GeluForward(Mutable<float>(fch_gelu), fch, 4 * nc);
      }
    }
    WeightGrad("fcprojw", l, F32(s.dresidual), fch_gelu, C, 4 * C, n, dw_beta);
    bias_backward("fcprojb", lc, s.dresidual, C);
    backend_->Matmul(s.dln, F32(s.dfch), LW("fcw", l, 4 * CC), nullptr, N, C, 4 * C, false, false, 0.0f,
                     compute_);
    WeightGrad("fcw", l, F32(s.dfch), ln2, 4 * C, C, n, dw_beta);
    bias_backward("fcb", 4 * lc, s.dfch, 4 * C);
    backend_->LayerNormBackward(s.dresidual, dweight("ln2w", lc), dbias("ln2b", lc), s.dln, residual2,
                                P("ln2w") + lc, a.ln2_mean + k * N, a.ln2_rstd + k * N, N, C);

    // residual2 = residual + attproj
    backend_->Matmul(s.datty, F32(s.dresidual), LW("attprojw", l, CC), nullptr, N, C, C, false, false, 0.0f,
                     compute_);
    WeightGrad("attprojw", l, F32(s.dresidual), atty, C, C, n, dw_beta);
    bias_backward("attprojb", lc, s.dresidual, C);
    if (a.bf16) {
      backend_->AttentionBackwardBF16(s.dqkv, s.att, s.datty, static_cast<const uint16_t*>(qkv.ptr),
                                      static_cast<const uint16_t*>(atty.ptr), att, B, T, C, NH, compute_);
    } else {
      backend_->AttentionBackward(s.dqkv, s.att, s.datty, static_cast<const float*>(qkv.ptr),
                                  static_cast<const float*>(atty.ptr), att, B, T, C, NH, compute_);
    }
    backend_->Matmul(s.dln, F32(s.dqkv), LW("qkvw", l, 3 * CC), nullptr, N, C, 3 * C, false, false, 0.0f,
                     compute_);
    WeightGrad("qkvw", l, F32(s.dqkv), ln1, 3 * C, C, n, dw_beta);
    bias_backward("qkvb", 3 * lc, s.dqkv, 3 * C);
    backend_->LayerNormBackward(s.dresidual, dweight("ln1w", lc), dbias("ln1b", lc), s.dln, residual,
                                P("ln1w") + lc, a.ln1_mean + k * N, a.ln1_rstd + k * N, N, C);
    if (on_ready && frozen) {
      for (const auto& m : lora_matrices_) {
        slice("lora_a." + m.base, l);
        slice("lora_b." + m.base, l);
      }
      announce();
    } else if (on_ready) {
      for (const char* name : {"ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b", "fcw",
                               "fcb", "fcprojw", "fcprojb"})
        slice(name, l);
      announce();
    }
  }
  if (frozen) return;
  backend_->EncoderBackward(G("wte"), G("wpe"), s.dresidual, d_inputs, host_inputs_.data(), B, T, C);
  if (on_ready) {
    whole("wte");
    whole("wpe");
    announce();
  }
}

void Gpt::ZeroGrad() {
  if (lora_.enabled()) {  // the adapters' gradients only: small, and every product adds to them
    backend_->Zero(grads(), trainable_.count * sizeof(float));
    overwrite_head_grad_ = overwrite_block_grads_ = false;
    return;
  }
  // Zero every tensor but the weight matrices, adjacent tensors in one call.
  auto matrix = [](const std::string& name) {
    return name == "wte" || name == "qkvw" || name == "attprojw" || name == "fcw" || name == "fcprojw";
  };
  size_t begin = 0, end = 0;
  for (const auto& t : layout_) {
    if (matrix(t.name)) continue;
    if (t.offset != end) {
      if (end > begin) backend_->Zero(grads() + begin, (end - begin) * sizeof(float));
      begin = t.offset;
    }
    end = t.offset + t.numel;
  }
  if (end > begin) backend_->Zero(grads() + begin, (end - begin) * sizeof(float));
  overwrite_head_grad_ = overwrite_block_grads_ = true;
}

void Gpt::GetLogits(int b, int t, float* host_out) const {
  Acts a(acts_.as<float>(), config_, last_B_, last_T_, recompute_, attention_, compute_, logits_chunk_);
  const size_t V = config_.vocab_size, row = static_cast<size_t>(b) * last_T_ + t;
  if (!a.bf16) {
    backend_->Download(host_out, static_cast<float*>(a.logits) + row * V, V * sizeof(float));
    return;
  }
  std::vector<uint16_t> h(V);
  backend_->Download(h.data(), static_cast<uint16_t*>(a.logits) + row * V, V * sizeof(uint16_t));
  for (size_t i = 0; i < V; i++) host_out[i] = BF16ToF32(h[i]);
}

double Gpt::GradNorm() {
  assert(!overwrite_head_grad_ && !overwrite_block_grads_ && "GradNorm after ZeroGrad without a Backward");
  return std::sqrt(backend_->SumSquares(grads(), trainable_.count));
}

void Gpt::AdamWStep(float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                    int t) {
  assert(!overwrite_head_grad_ && !overwrite_block_grads_ && "AdamWStep after ZeroGrad without a Backward");
  uint16_t* bf16 = compute_ == Compute::kBF16 ? params_bf16_.as<uint16_t>() : nullptr;
  const size_t lo = shard_.offset, hi = shard_.offset + shard_.count;
  for (const auto& p : layout_) {
    // The part of this tensor inside the shard (all of it without ZeRO).
    const size_t begin = std::max(lo, p.offset), end = std::min(hi, p.offset + p.numel);
    if (begin >= end) continue;
    backend_->AdamW(params() + begin, bf16 ? bf16 + begin : nullptr, grads() + (begin - trainable_.offset),
                    adam_m_.as<float>() + (begin - lo), adam_v_.as<float>() + (begin - lo), end - begin, lr,
                    beta1, beta2, eps, p.decay ? weight_decay : 0.0f, grad_scale, t);
  }
  merged_layer_ = -1;  // LoRA: the adapters moved
}

}  // namespace tern
