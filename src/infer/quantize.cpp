#include "infer/quantize.h"

#include <algorithm>
#include <cassert>
#include <cmath>

#include "backend/packing.h"

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

Int4Matrix QuantizeInt4(const float* w, int OC, int K) {
  assert(K % 64 == 0);
  Int4Matrix m;
  m.OC = OC;
  m.K = K;
  const int padded = (OC + 15) / 16 * 16;
  m.packed.assign(static_cast<size_t>(padded) * K / 2, 0x88);  // w = 0 in both nibbles
  m.scale.assign(static_cast<size_t>(padded) * (K / 64), 0.0f);
  for (int o = 0; o < OC; o++) {
    const float* row = w + static_cast<size_t>(o) * K;
    for (int j = 0; j < K / 64; j++) {
      float extreme = 0.0f;
      for (int k = 64 * j; k < 64 * (j + 1); k++)
        if (std::fabs(row[k]) > std::fabs(extreme)) extreme = row[k];
      const float d = extreme / -8.0f;
      m.scale[Int4ScaleIndex(o, j, K)] = d;
      const float inv = d != 0.0f ? 1.0f / d : 0.0f;
      for (int k = 64 * j; k < 64 * (j + 1); k++) {
        const int q = static_cast<int>(std::clamp(std::nearbyint(row[k] * inv), -8.0f, 7.0f));
        const Int4Nibble at = Int4NibbleOf(o, k, K);
        uint8_t& byte = m.packed[at.byte];
        byte = static_cast<uint8_t>((byte & ~(0x0F << at.shift)) | ((q + 8) << at.shift));
      }
    }
  }
  return m;
}

int Int4At(const Int4Matrix& m, int o, int k) {
  // (The shift was an out-parameter read in the expression of the call that set it: the ASan build's code
  // read it first, and every high nibble came back as the low one.)
  const Int4Nibble at = Int4NibbleOf(o, k, m.K);
  return ((m.packed[at.byte] >> at.shift) & 0x0F) - 8;
}

std::vector<float> DequantizeInt4(const Int4Matrix& m) {
  std::vector<float> w(static_cast<size_t>(m.OC) * m.K);
  for (int o = 0; o < m.OC; o++)
    for (int k = 0; k < m.K; k++)
      w[static_cast<size_t>(o) * m.K + k] = Int4At(m, o, k) * m.scale[Int4ScaleIndex(o, k / 64, m.K)];
  return w;
}

}  // namespace tern
