#include "core/cpu_info.h"

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace tern {
namespace {

// /proc/cpuinfo's flag for each of KnownIsaNames(), in the same order.
constexpr const char* kProcFlags[] = {"avx2",     "avx512f",     "avx512_bf16", "avx512_vnni",
                                      "avx_vnni", "avx512_fp16", "amx_bf16",    "amx_int8"};

std::string Trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t");
  const size_t b = s.find_last_not_of(" \t\r");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// cpuid's view, for where /proc/cpuinfo has no flags line (it lists none on some virtual kernels).
CpuInfo FromCpuid() {
  CpuInfo c;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, cx = 0, d = 0;
  if (__get_cpuid(0x80000000, &a, &b, &cx, &d) && a >= 0x80000004) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; i++) {
      __get_cpuid(0x80000002 + i, &a, &b, &cx, &d);
      std::memcpy(brand + 16 * i, &a, 4);
      std::memcpy(brand + 16 * i + 4, &b, 4);
      std::memcpy(brand + 16 * i + 8, &cx, 4);
      std::memcpy(brand + 16 * i + 12, &d, 4);
    }
    c.model = Trim(brand);
  }
  unsigned max_leaf = 0;
  if (!__get_cpuid(0, &max_leaf, &b, &cx, &d) || max_leaf < 7) return c;
  // The OS must save the registers too (XCR0): AVX state for AVX2, opmask + ZMM for AVX-512, tiles for AMX.
  __get_cpuid(1, &a, &b, &cx, &d);
  unsigned long long xcr0 = 0;
  if (cx & (1u << 27)) {  // OSXSAVE
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (static_cast<unsigned long long>(hi) << 32) | lo;
  }
  const bool avx_os = (xcr0 & 0x6) == 0x6, avx512_os = (xcr0 & 0xe6) == 0xe6,
             amx_os = (xcr0 & 0x60000) == 0x60000;
  unsigned b7 = 0, c7 = 0, d7 = 0, a71 = 0;
  __cpuid_count(7, 0, a, b7, c7, d7);
  __cpuid_count(7, 1, a71, b, cx, d);
  const bool has[] = {avx_os && (b7 & (1u << 5)),     avx512_os && (b7 & (1u << 16)),
                      avx512_os && (a71 & (1u << 5)), avx512_os && (c7 & (1u << 11)),
                      avx_os && (a71 & (1u << 4)),    avx512_os && (d7 & (1u << 23)),
                      amx_os && (d7 & (1u << 22)),    amx_os && (d7 & (1u << 25))};
  for (size_t i = 0; i < KnownIsaNames().size(); i++)
    if (has[i]) c.isa.push_back(KnownIsaNames()[i]);
#endif
  return c;
}

// The first processor's model name and flags; *has_flags says whether it had a flags line.
CpuInfo ParseProc(const std::string& text, bool* has_flags) {
  CpuInfo c;
  std::istringstream in(text);
  std::string line;
  bool have_flags = false;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) {
      if (!c.model.empty() && have_flags) break;  // the end of the first processor's block
      continue;
    }
    const std::string key = Trim(line.substr(0, colon)), value = Trim(line.substr(colon + 1));
    if (key == "model name" && c.model.empty()) c.model = value;
    if (key == "flags" && !have_flags) {
      have_flags = true;
      std::istringstream words(value);
      const std::vector<std::string> flags{std::istream_iterator<std::string>(words), {}};
      for (size_t i = 0; i < KnownIsaNames().size(); i++)
        if (std::find(flags.begin(), flags.end(), kProcFlags[i]) != flags.end())
          c.isa.push_back(KnownIsaNames()[i]);
    }
  }
  *has_flags = have_flags;
  return c;
}

}  // namespace

CpuInfo ParseProcCpuinfo(const std::string& text) {
  bool has_flags = false;
  return ParseProc(text, &has_flags);
}

CpuInfo ReadCpuInfo() {
  std::ifstream f("/proc/cpuinfo");
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  bool has_flags = false;
  CpuInfo c = ParseProc(text, &has_flags);
  if (c.model.empty() || !has_flags) {
    CpuInfo id = FromCpuid();
    if (c.model.empty()) c.model = id.model;
    if (!has_flags) c.isa = id.isa;
  }
  if (c.model.empty()) c.model = "unknown";
  cpu_set_t set;
  CPU_ZERO(&set);
  c.logical_cpus = sched_getaffinity(0, sizeof(set), &set) == 0
                       ? CPU_COUNT(&set)
                       : static_cast<int>(std::thread::hardware_concurrency());
  return c;
}

}  // namespace tern
