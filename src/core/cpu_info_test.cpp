// The CPU's name and ISA: /proc/cpuinfo's first processor read into KnownIsaNames() order, and this machine's
// reading is a non-empty name with ISA names tern knows.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/cpu_info.h"

namespace tern {
namespace {

TEST(CpuInfo, ParsesTheFirstProcessorOfProcCpuinfo) {
  const std::string text =
      "processor\t: 0\n"
      "vendor_id\t: GenuineIntel\n"
      "model name\t: Intel(R) Xeon(R) Platinum 8480+\n"
      "flags\t\t: fpu sse2 avx avx2 avx512f avx512_vnni avx512_bf16 avx_vnni amx_bf16 amx_tile amx_int8 "
      "avx512_fp16\n"
      "\n"
      "processor\t: 1\n"
      "model name\t: something else\n"
      "flags\t\t: fpu\n";
  const CpuInfo c = ParseProcCpuinfo(text);
  EXPECT_EQ(c.model, "Intel(R) Xeon(R) Platinum 8480+");
  EXPECT_EQ(c.isa, KnownIsaNames());  // all of them, in the known order whatever the flags' order

  const CpuInfo zen3 = ParseProcCpuinfo("model name\t: AMD EPYC 7B13\nflags\t\t: fpu avx f16c avx2 fma\n");
  EXPECT_EQ(zen3.model, "AMD EPYC 7B13");
  EXPECT_EQ(zen3.isa, std::vector<std::string>{"AVX2"});
  EXPECT_TRUE(ParseProcCpuinfo("").isa.empty());
}

TEST(CpuInfo, ThisMachineHasANameAndKnownIsaNames) {
  const CpuInfo c = ReadCpuInfo();
  EXPECT_FALSE(c.model.empty());
  EXPECT_GE(c.logical_cpus, 1);
  for (const std::string& isa : c.isa) {
    EXPECT_NE(std::find(KnownIsaNames().begin(), KnownIsaNames().end(), isa), KnownIsaNames().end()) << isa;
  }
}

}  // namespace
}  // namespace tern
