// Calibrating `tern plan --serve` from a measurement: `tern bench --serve --json` times tern serve's forward
// (the same InferenceModel the server runs) on one device: a prompt's prefill, and decode steps of 1, 4, 16,
// 64 ... sequences over a cache of `context` tokens each. FitServeBench finds the replica model's constants
// (serve_plan.h: memory-bandwidth efficiency, compute-bound decode MFU, prefill MFU and the per-step
// overhead) that reproduce those steps, so a plan for that GPU (or, with --instance local, for this machine)
// rests on a measurement instead of the serve_* assumptions. docs/serving-plan.md.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "model/gpt_config.h"
#include "plan/catalog.h"
#include "plan/serve_plan.h"

namespace tern::plan {

struct ServeBenchProfile {
  std::string file;
  std::string device;    // "cpu" | "cuda"
  std::string gpu;       // the catalog GPU ("H100"); empty on a CPU
  std::string gpu_name;  // as the device reports it
  GptConfig model;
  std::string weights, kv_dtype;  // tern serve --weights / --kv-dtype
  int threads = 0;
  int context = 0;         // tokens in each sequence's cache during the decode steps; the prompt's length
  double read_gbps = 0;    // the device's measured memory read bandwidth (0: not measured; a GPU's datasheet)
  double peak_tflops = 0;  // the device's measured matmul peak at the weights' precision
  double prefill_ms = 0;   // one prompt of `context` tokens
  struct Step {
    int batch = 0;
    double ms = 0;
  };
  std::vector<Step> decode;  // ascending batch

  // The catalog GPU name this measurement speaks for ("cpu" on a CPU run).
  std::string DeviceName() const { return device == "cpu" ? "cpu" : gpu; }
};

// Parses `tern bench --serve --json` output; a training bench (`tern bench --json`) is refused by name.
Result<ServeBenchProfile> ParseServeBenchJson(const std::string& text, const std::string& file);
Result<ServeBenchProfile> LoadServeBenchJson(const std::string& path);

// The replica model's constants that best reproduce the measured steps, as fractions of `bandwidth_gbps`
// and `peak_tflops` (a GPU's datasheet figures, so they carry to every offer of that GPU; on the local
// machine the bench's measured read bandwidth and matmul peak). The overhead is searched; for each candidate
// the bandwidth efficiency makes the one-sequence step exact, the decode MFU the largest batch's, and the
// candidate with the smallest largest relative error over all measured batches wins.
Result<ServeCalibration> FitServeBench(const ServeBenchProfile& b, double bandwidth_gbps, double peak_tflops);

// The calibration for `cat`: against the datasheet of the bench's GPU, or (a CPU bench, or a GPU the catalog
// lacks) against the bench's own figures, after AddLocalServeInstance.
Result<ServeCalibration> CalibrateServe(const ServeBenchProfile& b, const Catalog& cat);

// Adds the pseudo-instance "local/-/local" with the measured device: a GPU spec named b.DeviceName() (a CPU:
// "cpu") with the bench's read bandwidth, peak and `mem_gib` (host RAM for a CPU), priced `price_per_hour`.
Status AddLocalServeInstance(const ServeBenchProfile& b, double price_per_hour, double mem_gib, Catalog* cat);

}  // namespace tern::plan
