// Host-side IEEE fp16 conversion (round-to-nearest-even), shared by the CPU backends and tests. Plain C++
// (the reference is the oracle); cpu/f16_emulation.cpp has the vectorised (F16C / AVX-512) equivalent and a
// test checks the two agree bit for bit.
#pragma once

#include <cstdint>
#include <cstring>

namespace tern {

// fp32 -> fp16 bits. Values at or above 65520 (half-way past the largest fp16, 65504) become inf, as the
// hardware conversions do; NaN stays NaN (quiet); fp16 subnormals are kept (no flush to zero).
inline uint16_t F32ToF16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow (or inf) -> inf
  if (ax < 0x38800000u) {
    // Below the smallest normal fp16 (2^-14): adding 0.5f makes the fp32 adder round the value to a
    // multiple of 2^-24 (the fp16 subnormal step) with round-to-nearest-even; the low bits are the result.
    float v;
    std::memcpy(&v, &ax, 4);
    v += 0.5f;
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return static_cast<uint16_t>(sign | (u - 0x3f000000u));
  }
  // Normal: rebias the exponent (127 -> 15) and round the 23-bit mantissa to 10 bits, ties to even.
  const uint32_t odd = (ax >> 13) & 1u;
  ax += 0xc8000000u + 0xfffu + odd;  // 0xc8000000 = (15 - 127) << 23 modulo 2^32
  return static_cast<uint16_t>(sign | (ax >> 13));
}

inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  uint32_t u;
  if (e == 0) {
    float f = static_cast<float>(m) * 5.9604644775390625e-8f;  // m * 2^-24, exact
    std::memcpy(&u, &f, 4);
    u |= sign;
  } else if (e == 31) {
    u = sign | 0x7f800000u | (m << 13);
  } else {
    u = sign | ((e + 112u) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Rounds an fp32 value to the nearest fp16 and back: what an fp16 operand holds.
inline float RoundToF16(float f) {
  return F16ToF32(F32ToF16(f));
}

}  // namespace tern
