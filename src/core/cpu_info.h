// What CPU this is: its model name and the instruction-set extensions tern's CPU kernels care about, for
// `tern bench --json` (the "machine" block) and its text output.
#pragma once

#include <string>
#include <vector>

namespace tern {

// Every name CpuInfo::isa may hold, in this order: AVX2 (the fast path's floor), AVX-512F, its bf16 dot
// products and int8 VNNI (bf16 and int8 matmuls), the 256-bit AVX-VNNI, AVX512-FP16, and Intel's AMX tiles.
inline const std::vector<std::string>& KnownIsaNames() {
  static const std::vector<std::string> names = {"AVX2",     "AVX-512F",    "AVX512-BF16", "AVX512-VNNI",
                                                 "AVX-VNNI", "AVX512-FP16", "AMX-BF16",    "AMX-INT8"};
  return names;
}

struct CpuInfo {
  std::string model;             // "AMD EPYC 9R45 96-Core Processor"; "unknown" when neither source names it
  std::vector<std::string> isa;  // the KnownIsaNames() this CPU (and its kernel) offers, in that order
  int logical_cpus = 0;          // online CPUs the process may run on
};

// Reads /proc/cpuinfo (model name and flags, which the kernel only lists when it enables them); where that
// file says nothing, x86's cpuid (brand string, feature bits).
CpuInfo ReadCpuInfo();

// The model name and ISA of a /proc/cpuinfo text (its first processor); empty fields when absent.
CpuInfo ParseProcCpuinfo(const std::string& text);

}  // namespace tern
