// Host-side bf16 conversion (round-to-nearest-even), shared by the CPU backends and tests.
#pragma once

#include <cstdint>
#include <cstring>

namespace tern {

inline uint16_t F32ToBF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float BF16ToF32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Rounds an fp32 value to the nearest bf16 and back: what a bf16 operand holds.
inline float RoundToBF16(float f) {
  return BF16ToF32(F32ToBF16(f));
}

}  // namespace tern
