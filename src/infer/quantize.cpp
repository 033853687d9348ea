#include "infer/quantize.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace tern {

Int8Matrix QuantizeInt8(const float* w, int OC, int K) {
  assert(K % 4 == 0);
  Int8Matrix m;
  m.OC = OC;
  m.K = K;
  m.packed.assign(static_cast<size_t>((OC + 15) / 16) * 16 * K, 0);
  m.scale.resize(OC);
  for (int o = 0; o < OC; o++) {
    const float* row = w + static_cast<size_t>(o) * K;
    float amax = 0.0f;
    for (int k = 0; k < K; k++) amax = std::max(amax, std::fabs(row[k]));
    m.scale[o] = amax / 127.0f;
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int k = 0; k < K; k++) {
      float q = std::nearbyint(row[k] * inv);
      m.packed[PackedIndex(o, k, K)] = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
    }
  }
  return m;
}

std::vector<float> DequantizeInt8(const Int8Matrix& m) {
  std::vector<float> w(static_cast<size_t>(m.OC) * m.K);
  for (int o = 0; o < m.OC; o++)
    for (int k = 0; k < m.K; k++)
      w[static_cast<size_t>(o) * m.K + k] = m.packed[PackedIndex(o, k, m.K)] * m.scale[o];
  return w;
}

}  // namespace tern
