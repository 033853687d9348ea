// Calibration from a measurement: `tern bench --json > bench.json` records the achieved MFU on a real
// device; `tern plan --calibrate bench.json` uses it instead of the default MFU for that GPU, and with
// `--instance local` plans the run on the benchmarked machine itself (a pseudo-instance "local" with
// the bench's peak, one device, and --price-per-hour).
#pragma once

#include <optional>
#include <string>

#include "core/status.h"
#include "model/gpt_config.h"
#include "plan/catalog.h"
#include "plan/gpu_specs.h"
#include "plan/run_model.h"

namespace tern::plan {

// The bench's "run" block: the non-step work of a `tern train` run, timed on the benchmarked device.
// Negative = not measured (the plan uses its default for that part).
struct BenchRunTimes {
  double process_start_s = 0, backend_init_s = 0, peak_probe_s = 0, model_init_s = 0, data_open_s = -1;
  double forward_ms = 0;
  int sample_tokens = 0;
  double sample_ms = -1;  // one samples call
  double checkpoint_bytes = 0, checkpoint_copy_ms = -1, checkpoint_persist_ms = -1;
  double checkpoint_load_ms = -1;  // one resume of that checkpoint, from the disk (benches before it: -1)
  double model_bytes = 0, model_save_ms = -1;
};

struct BenchProfile {
  std::string file;
  GptConfig model;
  int batch = 0, seq = 0, grad_accum = 1, threads = 0;
  Precision precision = Precision::kFp32;
  std::string device;    // "cpu" | "cuda"
  std::string gpu;       // "H100"; empty on CPU or when the bench could not name the GPU
  std::string gpu_name;  // as the device reports it ("NVIDIA H100 80GB HBM3")
  double step_ms = 0, tokens_per_s = 0, flops_per_token = 0, achieved_tflops = 0, peak_tflops = 0, mfu = 0;
  // The bench's train.recompute ("memory": {"recompute"}; none in benches from before it): its achieved
  // FLOP/s count the model's FLOPs only, not the recomputed ones, so with recompute they read low by the
  // mode's time factor, which the planner takes back out (planner.cpp).
  Recompute recompute = Recompute::kNone;
  std::optional<BenchRunTimes> run;  // absent in benches from before it existed, or run with --no-run

  // The catalog GPU this measurement speaks for ("cpu" on a CPU run, empty if unknown).
  std::string DeviceName() const { return device == "cpu" ? "cpu" : gpu; }
  // MFU to use with a catalog GPU's datasheet peak: the bench's own peak is a matmul probe, so its
  // `mfu` is relative to that; achieved FLOP/s over the datasheet peak is the comparable figure.
  double MfuAgainst(double datasheet_peak_tflops) const { return achieved_tflops / datasheet_peak_tflops; }
  // The run overheads this bench measured, for a run of `run_model` (scaled from the bench's model by
  // parameters, FLOPs per token and bytes); defaults fill what it did not measure.
  RunOverheads Overheads(const GptConfig& run_model, int run_batch, int run_seq, const PlanDefaults& d) const;
};

// The restart overhead of a spot job: what a new instance spends before it trains again after a preemption.
// Measured (a bench with a run block and a timed save that speaks for the device): the start-up of a new
// `tern train` process as BenchProfile::Overheads scales it to the run (+ the peak probe when the run probes)
// plus reading its checkpoint back: the bench's timed load (read from the disk, verified, restored) scaled
// to the run's checkpoint bytes; a bench from before tern bench timed a load has the load taken as one
// measured save (state copy + persist). Acquiring and booting the instance is in neither. Else the default
// restart_minutes.
struct RestartOverhead {
  bool measured = false;
  double startup_s = 0, resume_s = 0;  // measured parts
  double seconds = 0;                  // startup + resume, or the default
  std::string
      source;  // "measured: bench.json (start-up 1.2 s + resume 0.3 s, a timed load)" | "default: ..."
};
// `bench` speaks for the device when `applies`; the run is `run_model` at `run_batch` x `run_seq` with a
// checkpoint of `state_bytes`.
RestartOverhead RestartFor(const BenchProfile* bench, bool applies, const GptConfig& run_model, int run_batch,
                           int run_seq, bool probe_peak, double state_bytes, const PlanDefaults& d);

// Parses `tern bench --json` output. Missing or mistyped keys are errors naming the key.
Result<BenchProfile> ParseBenchJson(const std::string& text, const std::string& file);
Result<BenchProfile> LoadBenchJson(const std::string& path);

// Adds the pseudo-instance "local/-/local" with one device of `spec` (its name and figures; vendor, source
// and memory are set here), priced `price_per_hour` on demand. Refused without the device memory.
Status AddLocalDevice(GpuSpec spec, const std::string& file, double price_per_hour, double mem_gib,
                      Catalog* cat);

// Adds the pseudo-instance "local/-/local" (and, for a CPU bench, a GPU spec "cpu" with the bench's
// peak for its precision) to the catalog. `mem_gib` is the device memory (host RAM for a CPU).
Status AddLocalInstance(const BenchProfile& b, double price_per_hour, double mem_gib, Catalog* cat);

// The memory the local machine offers: MemTotal from /proc/meminfo in GiB (0 if unreadable).
double HostMemoryGib();

}  // namespace tern::plan
