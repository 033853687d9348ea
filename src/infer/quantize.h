// Int8 weights for inference: per-output-channel symmetric quantisation of an [OC, K] matrix (the nn.Linear
// layout), packed the way Backend::MatmulInt8 reads it (backend.h). Host-side; the model uploads the result.
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

}  // namespace tern
