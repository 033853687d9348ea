// The plain reference of the inference ops (backend.h, "inference ops"): the oracle for the fast CPU
// versions and any GPU kernel. Written like reference_ops.cpp: loops in the order the math reads.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/bf16.h"
#include "backend/cpu/reference_ops.h"
#include "backend/packing.h"

namespace tern {
namespace {

// One layer's key or value cache (backend.h, "inference ops"): blocks of KvBlockBytes, elements of dtype,
// for kI8 followed by the block's scale[NH, bs].
struct KvCache {
  char* base;
  DType dtype;
  int NH, bs, hs;
  size_t block_bytes;
  KvCache(const void* cache, DType t, int C, int NH_, int bs_)
      : base(static_cast<char*>(const_cast<void*>(cache))),
        dtype(t),
        NH(NH_),
        bs(bs_),
        hs(C / NH_),
        block_bytes(KvBlockBytes(t, C, NH_, bs_)) {}
  char* Block(int block) const { return base + static_cast<size_t>(block) * block_bytes; }
  float* Scale(int block, int h, int slot) const {
    return reinterpret_cast<float*>(Block(block) + static_cast<size_t>(bs) * NH * hs) + h * bs + slot;
  }
  // Element e of the block (keys: e = (h * hs + j) * bs + slot; values: e = (h * bs + slot) * hs + j).
  float Load(int block, size_t e, int h, int slot) const {
    const char* b = Block(block);
    if (dtype == DType::kBF16) return BF16ToF32(reinterpret_cast<const uint16_t*>(b)[e]);
    if (dtype == DType::kI8) return reinterpret_cast<const int8_t*>(b)[e] * *Scale(block, h, slot);
    return reinterpret_cast<const float*>(b)[e];
  }
  float Key(int block, int h, int slot, int j) const {
    return Load(block, (static_cast<size_t>(h) * hs + j) * bs + slot, h, slot);
  }
  float Value(int block, int h, int slot, int j) const {
    return Load(block, (static_cast<size_t>(h) * bs + slot) * hs + j, h, slot);
  }
  // Stores x[hs], one head's key (transposed = true) or value at (block, slot).
  void Store(int block, int h, int slot, const float* x, bool transposed) const {
    float inv = 1.0f;
    if (dtype == DType::kI8) {
      float m = 0.0f;
      for (int j = 0; j < hs; j++) m = std::max(m, std::fabs(x[j]));
      inv = m > 0.0f ? 127.0f / m : 0.0f;
      *Scale(block, h, slot) = m / 127.0f;
    }
    for (int j = 0; j < hs; j++) {
      const size_t e = transposed ? (static_cast<size_t>(h) * hs + j) * bs + slot
                                  : (static_cast<size_t>(h) * bs + slot) * hs + j;
      char* b = Block(block);
      if (dtype == DType::kBF16) {
        reinterpret_cast<uint16_t*>(b)[e] = F32ToBF16(x[j]);
      } else if (dtype == DType::kI8) {
        reinterpret_cast<int8_t*>(b)[e] = static_cast<int8_t>(std::nearbyint(x[j] * inv));
      } else {
        reinterpret_cast<float*>(b)[e] = x[j];
      }
    }
  }
};

// Byte of w(o, k) in the packed int8 layout (backend.h, MatmulInt8).
size_t PackedInt8Index(int o, int k, int K) {
  return (static_cast<size_t>(o / 16) * (K / 4) + k / 4) * 64 + (o % 16) * 4 + k % 4;
}

// w(o, k) in the packed int4 layout (backend.h, MatmulInt4): the nibble of its byte, w + 8, less 8.
int PackedInt4(const uint8_t* w, int o, int k, int K) {
  const Int4Nibble at = Int4NibbleOf(o, k, K);
  return ((w[at.byte] >> at.shift) & 0x0F) - 8;
}

// a(k) = nearbyint(x[k] * 127 / max|x|) (0 when x is all zero): MatmulInt8's and MatmulInt4's activations.
// Returns the row scale max|x| / 127.
float QuantizeActivationRow(const float* x, int K, int32_t* a) {
  float m = 0.0f;
  for (int k = 0; k < K; k++) m = std::max(m, std::fabs(x[k]));
  const float inv = m > 0.0f ? 127.0f / m : 0.0f;
  for (int k = 0; k < K; k++) a[k] = static_cast<int32_t>(std::nearbyint(x[k] * inv));
  return m / 127.0f;
}

}  // namespace

void CpuReferenceBackend::EmbedTokens(float* out, const int32_t* tokens, const int32_t* positions,
                                      const float* wte, const float* wpe, int N, int C) {
  for (int n = 0; n < N; n++) {
    const float* e = wte + static_cast<size_t>(tokens[n]) * C;
    const float* p = wpe + static_cast<size_t>(positions[n]) * C;
    float* o = out + static_cast<size_t>(n) * C;
    for (int i = 0; i < C; i++) o[i] = e[i] + p[i];
  }
}

void CpuReferenceBackend::EmbedTokensBF16(float* out, const int32_t* tokens, const int32_t* positions,
                                          const uint16_t* wte, const float* wpe, int N, int C) {
  for (int n = 0; n < N; n++) {
    const uint16_t* e = wte + static_cast<size_t>(tokens[n]) * C;
    const float* p = wpe + static_cast<size_t>(positions[n]) * C;
    float* o = out + static_cast<size_t>(n) * C;
    for (int i = 0; i < C; i++) o[i] = BF16ToF32(e[i]) + p[i];
  }
}

void CpuReferenceBackend::KvCacheWrite(void* k_cache, void* v_cache, DType kv_dtype, const float* qkv,
                                       const int32_t* slots, int N, int C, int NH, int bs) {
  const int hs = C / NH;
  const KvCache keys(k_cache, kv_dtype, C, NH, bs), values(v_cache, kv_dtype, C, NH, bs);
  for (int n = 0; n < N; n++) {
    const int block = slots[n] / bs, slot = slots[n] % bs;
    const float* k = qkv + static_cast<size_t>(n) * 3 * C + C;
    const float* v = k + C;
    for (int h = 0; h < NH; h++) {
      keys.Store(block, h, slot, k + h * hs, /*transposed=*/true);
      values.Store(block, h, slot, v + h * hs, /*transposed=*/false);
    }
  }
}

// The same three passes as AttentionForward (scores and max, softmax, weighted values), with keys and
// values read through the block table instead of from qkv.
void CpuReferenceBackend::PagedAttentionForward(float* out, const float* qkv, const void* k_cache,
                                                const void* v_cache, DType kv_dtype, const int32_t* seqs,
                                                const int32_t* block_tables, int S, int max_blocks, int N,
                                                int C, int NH, int bs) {
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const KvCache keys(k_cache, kv_dtype, C, NH, bs), values(v_cache, kv_dtype, C, NH, bs);
  std::vector<float> att;
  for (int s = 0; s < S; s++) {
    const int q_start = seqs[3 * s], q_len = seqs[3 * s + 1], ctx_len = seqs[3 * s + 2];
    const int32_t* table = block_tables + static_cast<size_t>(s) * max_blocks;
    att.resize(ctx_len);
    for (int i = 0; i < q_len; i++) {
      const int row = q_start + i, pos = ctx_len - q_len + i;
      for (int h = 0; h < NH; h++) {
        const float* q = qkv + static_cast<size_t>(row) * 3 * C + h * hs;
        float maxval = -INFINITY;
        for (int p = 0; p <= pos; p++) {
          float dot = 0.0f;
          for (int j = 0; j < hs; j++) dot += q[j] * keys.Key(table[p / bs], h, p % bs, j);
          dot *= scale;
          att[p] = dot;
          if (dot > maxval) maxval = dot;
        }
        float expsum = 0.0f;
        for (int p = 0; p <= pos; p++) {
          att[p] = std::exp(att[p] - maxval);
          expsum += att[p];
        }
        const float inv = 1.0f / expsum;
        float* o = out + static_cast<size_t>(row) * C + h * hs;
        for (int j = 0; j < hs; j++) o[j] = 0.0f;
        for (int p = 0; p <= pos; p++) {
          const float a = att[p] * inv;
          for (int j = 0; j < hs; j++) o[j] += a * values.Value(table[p / bs], h, p % bs, j);
        }
      }
    }
  }
}

void CpuReferenceBackend::MatmulInt8(float* out, const float* inp, const int8_t* w, const float* w_scale,
                                     const float* bias, int N, int OC, int K) {
  std::vector<int32_t> a(K);
  for (int n = 0; n < N; n++) {
    const float row_scale = QuantizeActivationRow(inp + static_cast<size_t>(n) * K, K, a.data());
    for (int o = 0; o < OC; o++) {
      int32_t acc = 0;
      for (int k = 0; k < K; k++) acc += a[k] * w[PackedInt8Index(o, k, K)];
      const float y = static_cast<float>(acc) * (row_scale * w_scale[o]);
      out[static_cast<size_t>(n) * OC + o] = bias ? y + bias[o] : y;
    }
  }
}

void CpuReferenceBackend::MatmulInt4(float* out, const float* inp, const uint8_t* w, const float* w_scale,
                                     const float* bias, int N, int OC, int K) {
  assert(K % 64 == 0);
  const int G = K / 64;
  std::vector<int32_t> a(K);
  for (int n = 0; n < N; n++) {
    const float row_scale = QuantizeActivationRow(inp + static_cast<size_t>(n) * K, K, a.data());
    for (int o = 0; o < OC; o++) {
      float acc = 0.0f;
      for (int j = 0; j < G; j++) {
        int32_t sum = 0;
        for (int k = 64 * j; k < 64 * (j + 1); k++) sum += a[k] * PackedInt4(w, o, k, K);
        acc = std::fma(static_cast<float>(sum), w_scale[Int4ScaleIndex(o, j, K)], acc);
      }
      out[static_cast<size_t>(n) * OC + o] = bias ? std::fma(acc, row_scale, bias[o]) : acc * row_scale;
    }
  }
}

}  // namespace tern
