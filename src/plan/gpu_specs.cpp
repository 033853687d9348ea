#include "plan/gpu_specs.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include <fmt/format.h>

namespace tern::plan {

const char* PrecisionName(Precision p) {
  return p == Precision::kBf16 ? "bf16" : "fp32";
}

const char* GenerationName(GpuGeneration g) {
  switch (g) {
    case GpuGeneration::kVolta:
      return "volta";
    case GpuGeneration::kTuring:
      return "turing";
    case GpuGeneration::kAmpere:
      return "ampere";
    case GpuGeneration::kAda:
      return "ada";
    case GpuGeneration::kHopper:
      return "hopper";
    case GpuGeneration::kBlackwell:
      return "blackwell";
    case GpuGeneration::kCdna3:
      return "cdna3";
    case GpuGeneration::kCpu:
      return "cpu";
    case GpuGeneration::kUnknown:
      return "unknown";
  }
  return "unknown";
}

GpuGeneration GenerationOf(const std::string& gpu) {
  struct Entry {
    const char* prefix;
    GpuGeneration gen;
  };
  // Longest-prefix matters only for "H100..." vs "H200"; prefixes here are unambiguous.
  static const Entry kTable[] = {
      {"V100", GpuGeneration::kVolta},     {"T4", GpuGeneration::kTuring},
      {"A100", GpuGeneration::kAmpere},    {"A10", GpuGeneration::kAmpere},
      {"A6000", GpuGeneration::kAmpere},   {"L40", GpuGeneration::kAda},
      {"L4", GpuGeneration::kAda},         {"H100", GpuGeneration::kHopper},
      {"H200", GpuGeneration::kHopper},    {"GH200", GpuGeneration::kHopper},
      {"B200", GpuGeneration::kBlackwell}, {"GB200", GpuGeneration::kBlackwell},
      {"MI300", GpuGeneration::kCdna3},    {"cpu", GpuGeneration::kCpu},
  };
  for (const auto& e : kTable) {
    if (gpu.rfind(e.prefix, 0) == 0) return e.gen;
  }
  return GpuGeneration::kUnknown;
}

std::string CatalogGpuId(const std::string& device_name) {
  // Words of the upper-cased name, split at spaces and dashes: "A100-SXM4-80GB" -> A100 SXM4 80GB.
  std::vector<std::string> words;
  std::string w;
  for (char c : device_name + " ") {
    if (c == ' ' || c == '-' || c == '_') {
      if (!w.empty()) words.push_back(w);
      w.clear();
    } else {
      w += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
  }
  auto has = [&](const char* word) { return std::find(words.begin(), words.end(), word) != words.end(); };
  const bool pcie = has("PCIE"), nvl = has("NVL");
  if (has("GH200")) return "GH200";
  if (has("H200")) return nvl ? "" : "H200";  // H200 NVL: PCIe card, not in the catalog
  if (has("H100")) return nvl ? "H100-NVL" : pcie ? "H100-PCIe" : "H100";
  if (has("A100")) return has("80GB") ? "A100-80GB" : "A100";  // PCIe variants: same dense peak
  if (has("V100")) return has("32GB") ? "V100-32GB" : "V100";
  if (has("B200")) return "B200";
  if (has("L40S")) return "L40S";
  if (has("L4")) return "L4";
  if (has("A10G")) return "A10G";
  if (has("A10")) return "A10";
  if (has("T4")) return "T4";
  if (has("A6000")) return has("ADA") ? "" : "A6000";  // RTX 6000 Ada is another card
  if (has("MI300X")) return "MI300X";
  return "";
}

bool LooksLikeGpuTable(const CsvTable& t) {
  return t.Has("gpu") && t.Has("mem_gib") && !t.Has("instance_type");
}

Result<std::vector<GpuSpec>> ParseGpuSpecs(const CsvTable& t) {
  for (const char* col : kGpuRequiredColumns) {
    if (!t.Has(col)) return Status::InvalidArgument(fmt::format("{}:1: missing column '{}'", t.file, col));
  }
  const int c_gpu = t.Column("gpu"), c_vendor = t.Column("vendor"), c_ff = t.Column("form_factor");
  const int c_fp32 = t.Column("fp32_tflops"), c_tf32 = t.Column("tf32_tflops_dense");
  const int c_bf16 = t.Column("bf16_fp16_tflops_dense"), c_mem = t.Column("mem_gib");
  const int c_bw = t.Column("mem_bw_gbps"), c_ic = t.Column("interconnect"),
            c_icbw = t.Column("interconnect_gbps");
  const int c_src = t.Column("source");
  std::vector<GpuSpec> out;
  for (const CsvRow& row : t.rows) {
    GpuSpec g;
    TERN_ASSIGN_OR_RETURN(g.name, RequiredText(t, row, c_gpu));
    for (const auto& prev : out) {
      if (prev.name == g.name) {
        return Status::InvalidArgument(
            fmt::format("{}GPU '{}' is listed twice (first at {})", t.Where(row), g.name, prev.where));
      }
    }
    g.vendor = Field(row, c_vendor);
    g.form_factor = Field(row, c_ff);
    g.interconnect = Field(row, c_ic);
    g.source = Field(row, c_src);
    TERN_ASSIGN_OR_RETURN(g.fp32_tflops, OptionalNumber(t, row, c_fp32));
    TERN_ASSIGN_OR_RETURN(g.tf32_tflops, OptionalNumber(t, row, c_tf32));
    TERN_ASSIGN_OR_RETURN(g.bf16_tflops, OptionalNumber(t, row, c_bf16));
    TERN_ASSIGN_OR_RETURN(std::optional<double> mem, OptionalNumber(t, row, c_mem));
    if (!mem || *mem <= 0) {
      return Status::InvalidArgument(
          fmt::format("{}column 'mem_gib' must be a positive number", t.Where(row)));
    }
    g.mem_gib = *mem;
    TERN_ASSIGN_OR_RETURN(g.mem_bw_gbps, OptionalNumber(t, row, c_bw));
    TERN_ASSIGN_OR_RETURN(g.interconnect_gbps, OptionalNumber(t, row, c_icbw));
    g.generation = GenerationOf(g.name);
    g.where = t.Where(row);
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace tern::plan
