// A `tern train` run is more than its optimizer steps. With `tern plan --config X.yaml` the plan models
// the whole run the way trainer.cpp executes it:
//
//   wall = start-up + steps x step + evaluations + samples + checkpoint stalls + the final save
//
//   start-up     process start, backend, model allocation + init, data open, and the trainer's 0.5 s
//                peak-FLOP probe (skipped when train.peak_gflops is set)
//   evaluations  at every eval_every-th step and the last: eval_batches forward-only micro-batches each
//   samples      a call at every sample_every-th step (not the last; not with --quiet) for one sample,
//                and one at the end for num_samples; a call decodes its samples together on the serving
//                engine (infer/generate.h), so it costs about sample_tokens decode steps whatever n is
//   checkpoints  a save at step s goes to every tier with every > 0 and s % every == 0 or s = last, and
//                to the best tier at each evaluation (assumed a new best: an upper bound). Async saves
//                stall training for the state copy, plus any persist time not hidden before the next
//                save; the last save is waited for in full (trainer: WaitIdle), as is every sync save
//   final save   model.safetensors (fp32 weights), written and fsynced after the samples
//
// The counts depend only on the config (RunSchedule, computed once per plan); the seconds depend on the
// device (RunOverheads: measured by `tern bench` for the device it ran on, documented defaults else).
#pragma once

#include <string>
#include <vector>

#include "plan/defaults.h"

namespace tern::plan {

// The parts of a training config that cost time beyond optimizer steps. The CLI fills it from
// TrainConfig (train/), so that plan/ does not depend on the trainer.
struct TrainRunSpec {
  std::string config_file;
  int steps = 0;
  int micro_batch = 0, seq = 0, grad_accum = 1;
  int eval_every = 0, eval_batches = 0;  // eval_every 0: only at the end
  int sample_every = 0, sample_tokens = 0, num_samples = 0;
  int ckpt_every = 0;     // fast tier; 0 = no periodic saves
  int durable_every = 0;  // durable tier (configured and > 0)
  int best_k = 0;         // best tier
  bool ckpt_async = true;
  bool probe_peak = true;  // train.peak_gflops == 0: the trainer measures its peak at start
};

// What one run does, counted from the config alone.
struct RunSchedule {
  int steps = 0;
  int evals = 0;           // evaluation passes
  int eval_batches = 0;    // per pass
  int samples_during = 0;  // samples printed during training, one per call
  int samples_end = 0;     // samples in the summary, one call
  int sample_tokens = 0;   // per sample, capped by the context
  int sample_calls() const { return samples_during + (samples_end > 0 ? 1 : 0); }
  struct Save {
    int step = 0, tiers = 0;
  };
  std::vector<Save> saves;  // in step order
  int tier_writes() const;  // sum of tiers over saves
};
RunSchedule ScheduleRun(const TrainRunSpec& spec);

// Seconds and bandwidths of the non-step work on one device.
struct RunOverheads {
  std::string source;               // "measured: bench.json" or "defaults"
  double startup_s = 0;             // process start to the first step, without the peak probe
  double peak_probe_s = 0;          // the trainer's peak-FLOP probe
  double forward_fraction = 0;      // forward-only pass / training step for the same tokens
  double sample_token_s = 0;        // one decode step of a samples call (its set-up spread over the steps)
  double state_copy_gb_per_s = 0;   // checkpoint state into host memory
  double ckpt_write_gb_per_s = 0;   // one tier: checksums + write + fsync
  double model_write_gb_per_s = 0;  // model.safetensors
};
// The documented defaults, for devices no bench has measured.
RunOverheads DefaultRunOverheads(const PlanDefaults& d);

struct RunBreakdown {
  RunSchedule schedule;
  std::string source;
  double step_s = 0, steps_s = 0;
  double startup_s = 0, probe_s = 0;
  double eval_s = 0, sample_s = 0;
  double ckpt_copy_s = 0, ckpt_stall_s = 0, ckpt_final_s = 0;  // stalls of the async saves / the last save
  double model_save_s = 0;
  double data_fetch_s = 0;  // data.dir on S3: the first instance fetches the dataset (docs/formats.md)
  double checkpoint_s() const { return ckpt_copy_s + ckpt_stall_s + ckpt_final_s; }
  double overhead_s() const {
    return data_fetch_s + startup_s + probe_s + eval_s + sample_s + checkpoint_s() + model_save_s;
  }
  double total_s() const { return steps_s + overhead_s(); }
};

// `steps_s` is the modelled time of all optimizer steps (tokens / tokens per second), `step_s` and
// `tokens_per_step` one step's; `state_bytes` the checkpoint (fp32 weights + AdamW moments),
// `model_bytes` the fp32 weights.
RunBreakdown ModelRun(const TrainRunSpec& spec, const RunSchedule& schedule, const RunOverheads& o,
                      double steps_s, double step_s, double tokens_per_step, double state_bytes,
                      double model_bytes);

}  // namespace tern::plan
