// AMX (Intel's tile registers, Sapphire Rapids on) for the serving matmuls: whether this process may use the
// tiles, and the tile configuration. bf16_matmul.cpp (tdpbf16ps) and int8_matmul.cpp (tdpbssd) use them.
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace tern::amx {

// Linux hands out the AMX tile state only on request (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, once
// per process); a kernel or hypervisor that refuses it leaves the vector kernels in use, as does
// TERN_CPU_AMX=0 (for A/B measurements).
inline bool Granted() {
  static const bool granted = [] {
    const char* env = std::getenv("TERN_CPU_AMX");
    if (env && std::string_view(env) == "0") return false;
    constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return granted;
}

// ldtilecfg's 64-byte layout, palette 1: tile t has rows[t] rows of colsb[t] bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

}  // namespace tern::amx
