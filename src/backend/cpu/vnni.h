// One AVX-512 VNNI helper shared by the int8 and int4 serving matmuls (int8_matmul.cpp, int4_matmul.cpp).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace tern::fast {

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
// acc += the unsigned bytes of w times the 4 signed bytes at a, broadcast: one instruction with an embedded
// broadcast. As an intrinsic, GCC 12 broadcast into a register first and copied every accumulator to another
// register each step (the tied destination of vpdpbusd), ~3 instructions per multiply-add instruction.
inline __m512i DotBroadcast(__m512i acc, __m512i w, const int32_t* a) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*a));
  return acc;
}
#endif

}  // namespace tern::fast
