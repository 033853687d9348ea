// Int8 and int4 weights for inference: an [OC, K] matrix (the nn.Linear layout) quantised per output channel
// (int8) or per channel and group of 64 k (int4), packed the way Backend::MatmulInt8 / MatmulInt4 read it
// (backend.h). Host-side; the model uploads the result.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tern {

struct Int8Matrix {
  int OC = 0, K = 0;
  std::vector<int8_t> packed;  // RoundUp(OC, 16) * K bytes, MatmulInt8's layout, padding rows zero
  std::vector<float> scale;    // [OC]: W[o,k] ~= q(o,k) * scale[o]
};

// scale[o] = max_k |W[o,k]| / 127, q = nearbyint(W / scale) (so |q| <= 127; a zero row gets scale 0).
// K must be a multiple of 4.
Int8Matrix QuantizeInt8(const float* w, int OC, int K);
// The fp32 matrix the int8 one stands for (tests, error measurements).
std::vector<float> DequantizeInt8(const Int8Matrix& m);
// Byte of q(o, k) in `packed`.
inline size_t PackedIndex(int o, int k, int K) {
  return (static_cast<size_t>(o / 16) * (K / 4) + k / 4) * 64 + (o % 16) * 4 + k % 4;
}

// 4-bit weights: for channel o and each group j of 64 k, d = the group's value of largest magnitude / -8, so
// that it is exactly -8 d, and q = clamp(nearbyint(W / d), -8, 7) (a zero group: d = 0, q = 0). 16 levels,
// the extreme one where the group's largest weight lies; 4.5 bits a weight with the fp32 scale. (A search
// for each group's least-squares scale, as llama.cpp's k-quants, was measured and not kept: it gives up the
// outliers, and the loss rose, +0.19 % vs +0.11 % on infer_bf16_quality_test's model, +0.31 % vs +0.22 % on
// the demo run.)
struct Int4Matrix {
  int OC = 0, K = 0;
  std::vector<uint8_t>
      packed;                // RoundUp(OC, 16) * K / 2 bytes, MatmulInt4's layout, padding channels 8 (w 0)
  std::vector<float> scale;  // RoundUp(OC, 16) * K / 64: d of (o, j) at (o / 16 * K / 64 + j) * 16 + o % 16
};
// K must be a multiple of 64.
Int4Matrix QuantizeInt4(const float* w, int OC, int K);
std::vector<float> DequantizeInt4(const Int4Matrix& m);
// w(o, k) in [-8, 7] as packed.
int Int4At(const Int4Matrix& m, int o, int k);

}  // namespace tern
