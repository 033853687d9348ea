// `tern bench`: training steps on synthetic tokens, timed, with the peak FLOP/s of the same device and
// precision measured in the same process, so MFU = achieved / measured peak.
//
// The bench drives the trainer itself: it builds a Trainer through Trainer::Create's stages (the backend from
// run_setup.h, the data loaders, the model), timing each, and calls its Step, Evaluate and Samples. A bench
// step is Trainer::Step with the run's config: grad_accum micro-batches of forward + backward, the gradient
// norm, clipping, fp16 loss scaling, the AdamW update at the schedule's learning rate, a device sync. The
// step time is the median over the timed steps, after `warmup` untimed ones (the first steps fault in every
// buffer and build the oneDNN primitives). Without data the loaders read a shard of random tokens written for
// the purpose.
//
// For `tern plan --config`, the bench also times the rest of a `tern train` run on this device (the "run"
// block of the JSON): start-up, a forward-only pass (Trainer::Evaluate), a generated sample
// (Trainer::Samples), and, with an io_dir, one real checkpoint save, its load back (the resume of a restart)
// and the model.safetensors write.
//
// Memory: the bytes the model allocated (Gpt::memory()), next to tern plan's estimate for the same config
// (filled in by the caller, which links the planner) and what the device measured: the process's peak
// resident set on a CPU, NVML's device memory in use (after the steps, less before the model) on a GPU.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/cpu_info.h"
#include "core/status.h"
#include "model/gpt_config.h"
#include "train/train_config.h"

namespace tern {

struct BenchOptions {
  // The run whose step is timed (`tern bench --config`; the defaults otherwise): its optimizer, clipping, LR
  // schedule, loss scaling, train.attention and seed. The fields below replace its shape, precision and
  // device.
  TrainConfig train;
  GptConfig model;
  int batch = 4, seq = 64, grad_accum = 1;
  TrainPrecision precision = TrainPrecision::kFp32;
  TrainDevice device = TrainDevice::kCpu;
  Recompute recompute = Recompute::kNone;
  int steps = 20, warmup = 3;
  bool measure_peak = true;
  double peak_gflops = 0;      // used when !measure_peak
  bool measure_run = true;     // the "run" block: start-up, forward, sample (and io below)
  std::string data_dir;        // prepared data: train on its tokens, time opening it; empty = random tokens
  bool random_tokens = false;  // random tokens even with a data_dir
  std::string io_dir;          // time a checkpoint save and a safetensors write here; empty = skip
  // One call of Trainer::Samples (n choices decoded together, to full length); needs data_dir's tokenizer.
  int sample_tokens = 64, sample_choices = 3;
  std::string sample_prompt;
};

// The non-step parts of a `tern train` run, measured on this device (seconds / milliseconds / bytes).
struct BenchRunTimes {
  double process_start_s = 0;  // exec + shared libraries + CLI, until the bench began
  double backend_init_s = 0;   // MakeRunSetup (a CUDA context on a GPU)
  double peak_probe_s = 0;     // one ProbeRunPeak (run_setup.h), the trainer's own start-up probe
  double model_init_s = 0;     // Gpt buffers + InitWeights
  double data_open_s = -1;     // tokenizer + train/val shards; -1 = not measured
  double forward_ms = 0;       // one Trainer::Evaluate of one micro-batch (forward only), median
  int sample_tokens = 0, sample_choices = 0;
  double sample_ms = -1;  // one Trainer::Samples call: choices x tokens, to full length; -1 = no tokenizer
  double checkpoint_bytes = 0, checkpoint_copy_ms = -1, checkpoint_persist_ms = -1;  // one tier; -1 = skipped
  // One resume of that checkpoint, as `tern train --resume` does it: the newest valid checkpoint found, its
  // checksums verified, weights and moments restored into the model; its files evicted from the page cache
  // first, so they are read from the disk as on a new instance. -1 = skipped.
  double checkpoint_load_ms = -1;
  double model_bytes = 0, model_save_ms = -1;
  std::string io_dir;
};

// Memory in the planner's split (plan::MemoryBreakdown), bytes; activations include the backward scratch.
struct BenchMemory {
  double weights = 0, grads = 0, optimizer = 0, activations = 0;
  double total() const { return weights + grads + optimizer + activations; }
};

struct BenchResult {
  BenchOptions options;
  double step_ms = 0;            // median over the timed steps
  std::vector<double> steps_ms;  // every timed step, in order
  double tokens_per_s = 0;
  double flops_per_token = 0;
  double achieved_gflops = 0;
  double peak_gflops = 0;
  double mfu = 0;
  int threads = 0;
  CpuInfo cpu;  // the host's, on a GPU run too (JSON "machine")
  std::string backend;
  std::string gpu_name;  // the device's own name ("NVIDIA H200"); empty on a CPU
  std::string gpu;  // the catalog's id for it ("H200"), set by the caller (plan/gpu_specs.h); empty = unknown
  bool has_run = false;
  BenchRunTimes run;
  GptMemory allocated;  // what the model allocated (Gpt::memory())
  std::optional<BenchMemory>
      planned;                    // tern plan's estimate for this config, set by the caller; empty = none
  double peak_rss_bytes = -1;     // CPU: the process's peak resident set (everything); -1 = not measured
  double device_mem_bytes = -1;   // GPU: NVML memory in use after the steps minus before the model; -1 = none
  nlohmann::json ToJson() const;  // the format `tern plan --calibrate` reads
};

Result<BenchResult> RunBench(const BenchOptions& options);

// The device name inside a CUDA backend's name(): "cuda (NVIDIA H200, sm_90, 141 GiB)" -> "NVIDIA H200".
// Empty for a CPU backend or a name of another form.
std::string GpuNameFromBackendName(const std::string& backend_name);

}  // namespace tern
