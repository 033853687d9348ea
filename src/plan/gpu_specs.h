// GPU datasheet figures (gpus.csv) and what tern derives from them: the peak FLOP/s for a precision,
// whether bf16 exists, and the generation that picks a default MFU.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "plan/csv.h"

namespace tern::plan {

enum class Precision { kFp32, kBf16 };
const char* PrecisionName(Precision p);  // "fp32", "bf16"

enum class GpuGeneration { kVolta, kTuring, kAmpere, kAda, kHopper, kBlackwell, kCdna3, kCpu, kUnknown };
const char* GenerationName(GpuGeneration g);
// By name, from a fixed table (gpus.csv has no generation column). Unknown names -> kUnknown.
GpuGeneration GenerationOf(const std::string& gpu);

// The catalog's id (gpus.csv) for a device name as CUDA reports it (cudaDeviceProp::name, nvidia-smi):
// "NVIDIA H100 80GB HBM3" -> "H100", "NVIDIA A100-SXM4-80GB" -> "A100-80GB", "Tesla T4" -> "T4".
// Empty when no catalog GPU matches (e.g. "NVIDIA H200 NVL", a PCIe card with a lower peak than "H200"):
// a wrong match would calibrate the wrong GPU's MFU.
std::string CatalogGpuId(const std::string& device_name);

struct GpuSpec {
  std::string name;  // "H100", as in gpu_instances.csv's gpu column
  std::string vendor, form_factor, interconnect, source;
  std::optional<double> fp32_tflops, tf32_tflops, bf16_tflops;  // dense
  double mem_gib = 0;
  std::optional<double> mem_bw_gbps;
  std::optional<double> interconnect_gbps;  // GPU-GPU, bidirectional as vendors quote it
  GpuGeneration generation = GpuGeneration::kUnknown;
  std::string where;  // "gpus.csv:9: " for messages

  // TF32 and BF16 tensor cores arrived together (Ampere); the bf16_fp16 column of older GPUs is FP16
  // only, which tern's trainer does not use. So: bf16 exists iff the TF32 figure does.
  bool SupportsBf16() const { return tf32_tflops.has_value() && bf16_tflops.has_value(); }
  // Dense peak for the precision tern would train in; fp32 means plain FP32 (CUDA cores), not TF32.
  std::optional<double> PeakTflops(Precision p) const {
    return p == Precision::kBf16 ? bf16_tflops : fp32_tflops;
  }
};

// Columns required in a GPU catalog; the others are optional.
inline constexpr const char* kGpuRequiredColumns[] = {"gpu", "mem_gib"};
bool LooksLikeGpuTable(const CsvTable& t);

Result<std::vector<GpuSpec>> ParseGpuSpecs(const CsvTable& t);

}  // namespace tern::plan
