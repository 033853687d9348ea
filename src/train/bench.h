// `tern bench`: training steps on synthetic tokens, timed, with the peak FLOP/s of the same device and
// precision measured in the same process, so MFU = achieved / measured peak.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "model/gpt_config.h"

namespace tern {

struct BenchOptions {
  GptConfig model;
  int batch = 4, seq = 64;
  std::string precision = "fp32";
  std::string device = "cpu";
  int steps = 10, warmup = 2;
  bool measure_peak = true;
  double peak_gflops = 0;  // used when !measure_peak
};

struct BenchResult {
  BenchOptions options;
  double step_ms = 0;         // median over the timed steps
  double tokens_per_s = 0;
  double flops_per_token = 0;
  double achieved_gflops = 0;
  double peak_gflops = 0;
  double mfu = 0;
  int threads = 0;
  std::string backend;
  nlohmann::json ToJson() const;  // the format `tern plan --calibrate` reads
};

Result<BenchResult> RunBench(const BenchOptions& options);

}  // namespace tern
