// The plain reference of the inference ops (backend.h, "inference ops"): the oracle for the fast CPU
// versions and any GPU kernel. Written like reference_ops.cpp: loops in the order the math reads.
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/bf16.h"
#include "backend/cpu/reference_ops.h"

namespace tern {
namespace {

// Element i of a layer's cache of kv_dtype elements, as fp32 (bf16 widens exactly).
float KvLoad(const void* cache, DType kv_dtype, size_t i) {
  if (kv_dtype == DType::kBF16) return BF16ToF32(static_cast<const uint16_t*>(cache)[i]);
  return static_cast<const float*>(cache)[i];
}
void KvStore(void* cache, DType kv_dtype, size_t i, float x) {
  if (kv_dtype == DType::kBF16) {
    static_cast<uint16_t*>(cache)[i] = F32ToBF16(x);
  } else {
    static_cast<float*>(cache)[i] = x;
  }
}
// Where element j of the key / value of (block, head, slot) lives (backend.h: keys [.., NH, hs, bs],
// values [.., NH, bs, hs]).
size_t KeyIndex(int block, int h, int slot, int j, int NH, int bs, int hs) {
  return ((static_cast<size_t>(block) * NH + h) * hs + j) * bs + slot;
}
size_t ValueIndex(int block, int h, int slot, int j, int NH, int bs, int hs) {
  return ((static_cast<size_t>(block) * NH + h) * bs + slot) * hs + j;
}

// Byte of w(o, k) in the packed int8 layout (backend.h, MatmulInt8).
size_t PackedInt8Index(int o, int k, int K) {
  return (static_cast<size_t>(o / 16) * (K / 4) + k / 4) * 64 + (o % 16) * 4 + k % 4;
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

void CpuReferenceBackend::KvCacheWrite(void* k_cache, void* v_cache, DType kv_dtype, const float* qkv,
                                       const int32_t* slots, int N, int C, int NH, int bs) {
  const int hs = C / NH;
  for (int n = 0; n < N; n++) {
    const int block = slots[n] / bs, slot = slots[n] % bs;
    const float* k = qkv + static_cast<size_t>(n) * 3 * C + C;
    const float* v = k + C;
    for (int h = 0; h < NH; h++) {
      for (int j = 0; j < hs; j++) {
        KvStore(k_cache, kv_dtype, KeyIndex(block, h, slot, j, NH, bs, hs), k[h * hs + j]);
        KvStore(v_cache, kv_dtype, ValueIndex(block, h, slot, j, NH, bs, hs), v[h * hs + j]);
      }
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
          for (int j = 0; j < hs; j++)
            dot += q[j] * KvLoad(k_cache, kv_dtype, KeyIndex(table[p / bs], h, p % bs, j, NH, bs, hs));
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
          for (int j = 0; j < hs; j++)
            o[j] += a * KvLoad(v_cache, kv_dtype, ValueIndex(table[p / bs], h, p % bs, j, NH, bs, hs));
        }
      }
    }
  }
}

void CpuReferenceBackend::MatmulInt8(float* out, const float* inp, const int8_t* w, const float* w_scale,
                                     const float* bias, int N, int OC, int K) {
  std::vector<int32_t> a(K);
  for (int n = 0; n < N; n++) {
    const float* x = inp + static_cast<size_t>(n) * K;
    float m = 0.0f;
    for (int k = 0; k < K; k++) m = std::max(m, std::fabs(x[k]));
    const float inv = m > 0.0f ? 127.0f / m : 0.0f;
    for (int k = 0; k < K; k++) a[k] = static_cast<int32_t>(std::nearbyint(x[k] * inv));
    const float row_scale = m / 127.0f;
    for (int o = 0; o < OC; o++) {
      int32_t acc = 0;
      for (int k = 0; k < K; k++) acc += a[k] * w[PackedInt8Index(o, k, K)];
      const float y = static_cast<float>(acc) * (row_scale * w_scale[o]);
      out[static_cast<size_t>(n) * OC + o] = bias ? y + bias[o] : y;
    }
  }
}

}  // namespace tern
