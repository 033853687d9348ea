// Where a weight lies in the packed int4 layout of Backend::MatmulInt4 (backend.h states it): one spelling
// for the quantiser that writes it (infer/quantize.cpp) and the reference backend that reads it. The fast
// kernel reads the same layout with vector loads (cpu/int4_matmul.cpp); the tests hold the three together.
#pragma once

#include <cstddef>

namespace tern {

struct Int4Nibble {
  size_t byte;  // in the packed weights
  int shift;    // 0: the low nibble, 4: the high one
};

// w(o, k) of an [OC, K] matrix, K % 64 == 0.
inline Int4Nibble Int4NibbleOf(int o, int k, int K) {
  const int r = k % 64;
  return {(static_cast<size_t>(o / 16) * (K / 64) + k / 64) * 512 + (r / 8) * 64 + (o % 16) * 4 + r % 4,
          r % 8 < 4 ? 0 : 4};
}

// The float of w_scale(o, j), the scale of channel o's group j of 64 k.
inline size_t Int4ScaleIndex(int o, int j, int K) {
  return (static_cast<size_t>(o / 16) * (K / 64) + j) * 16 + o % 16;
}

}  // namespace tern
