// The training loop: micro-batches with gradient accumulation, global-norm clipping, AdamW with a
// warmup+cosine schedule, periodic validation and samples, metrics.jsonl, and a summary at the end.
// Checkpoints (train_checkpoint.h, ckpt/): periodic asynchronous saves to the configured tiers, resume
// (ckpt.resume), and an emergency save when the machine is about to be preempted.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/loss_scaler.h"
#include "ckpt/manager.h"
#include "ckpt/preemption.h"
#include "core/progress.h"
#include "core/status.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "metrics/nvml_sampler.h"
#include "metrics/run_log.h"
#include "model/gpt.h"
#include "train/lr_schedule.h"
#include "train/train_checkpoint.h"
#include "train/train_config.h"

namespace tern {

struct StepStats {
  int step = 0;  // 1-based, after the update
  double loss = 0, lr = 0, grad_norm = 0;
  double step_s = 0, data_wait_s = 0;
  double tokens_per_s = 0, mfu = 0;
  bool abandoned = false;  // a preemption notice stopped the step before its update (ckpt.on_notice=abandon)
  // fp16: the loss scale this step ran with, and whether its gradients overflowed so that the update was
  // skipped (weights and AdamW moments unchanged; the step still counts: its data is consumed and the LR
  // schedule moves on; AdamW's bias-correction step counts only applied updates).
  double loss_scale = 0;
  bool skipped = false;
  GpuStepMetrics gpu;  // ok only on a GPU run with NVML (or a test's sampler)
};

struct TrainSummary {
  int steps = 0;
  double train_loss = 0, val_loss = 0;
  uint64_t tokens = 0;
  double wall_s = 0, train_s = 0;
  double tokens_per_s = 0, mfu = 0, peak_gflops = 0;
  double cost_usd = 0;
  std::vector<std::string> samples;
  std::string run_dir;
  int resumed_from = -1;   // the step resumed from, or -1
  bool preempted = false;  // stopped early by a preemption notice after an emergency checkpoint: exit 75
  std::string preempt_report;
};

// The outside world the trainer touches, replaceable in tests (leveldb's Env idea).
struct TrainerEnv {
  ckpt::StorageOpener open_storage;  // checkpoint storages; empty = local directories and S3
  bool handle_signals = true;        // SIGTERM/SIGUSR1 start an emergency checkpoint
  // GPU readings for metrics.jsonl (gpu_util, gpu_mem_gb, gpu_power_w, joules_per_token). Null: NVML, polled
  // on a background thread, when the backend is a GPU, and no GPU fields otherwise. Tests pass a fake.
  std::shared_ptr<GpuSampler> gpu_sampler;
  // Test hook: called after the backward of the last micro-batch of each step (step = the 1-based step being
  // made), before the gradient norm. Tests inject an fp16 overflow by writing inf into a gradient.
  std::function<void(int step, Gpt& model)> after_backward;
};

class Trainer {
 public:
  // Opens the data, builds the model on the configured device and prepares the run directory.
  // Resumes from a checkpoint when cfg.ckpt.resume says so.
  static Result<std::unique_ptr<Trainer>> Create(const TrainConfig& cfg, bool quiet = false, TrainerEnv env = {});

  // Runs up to cfg.steps optimizer steps with evaluation, samples, checkpoints, metrics and the final summary.
  // Returns early, with summary.preempted, after a preemption notice and the emergency checkpoint.
  Result<TrainSummary> Run();

  // One optimizer step over grad_accum_steps micro-batches.
  Result<StepStats> Step();
  // Mean loss over eval_batches validation batches, always starting from the start of the val split.
  Result<double> Evaluate();
  Result<std::vector<std::string>> Samples(int count, int tokens);

  Gpt& model() { return *model_; }
  const TrainConfig& config() const { return cfg_; }
  int step() const { return step_; }
  // Applied AdamW updates (= step() unless fp16 skipped some), and the fp16 loss scaler's state.
  int adam_t() const { return adam_t_; }
  const LossScaler& loss_scaler() const { return scaler_; }
  int resumed_from() const { return resumed_from_; }
  ckpt::CheckpointManager& checkpoints() { return *ckpt_; }
  // Saves the current state to the fast tier now (tests, tools); waits for it to be persisted.
  Status SaveCheckpoint(const std::string& kind = "manual");

 private:
  Trainer() = default;
  Status WriteRunFiles(const TrainSummary& summary);
  // fp16: turns the scaled gradient norm into the step's decision (trainer.cpp).
  Status DecideFp16Step(double scaled_norm, StepStats* s, float* unscale);
  // trainer_ckpt.cpp
  Status OpenCheckpoints(nlohmann::json* resume_row);
  Status CaptureSnapshotMeta(ckpt::Snapshot& snap);
  Status CopySnapshotTensors(ckpt::Snapshot& snap);
  Status SaveTo(const std::vector<int>& tiers, const std::string& kind, std::optional<double> val_loss, bool sync);
  DataIdentity data_identity() const;
  Status MaybeCheckpoint(int step, bool last, std::optional<double> val_loss, ProgressBar* bar);
  // Logs finished saves; *failure (if given) receives the first failed save's error.
  Status DrainCheckpointEvents(ProgressBar* bar, Status* failure = nullptr);
  Status EmergencyCheckpoint(TrainSummary* sum, ProgressBar* bar);
  bool AbandonRequested() const;

  TrainConfig cfg_;
  bool quiet_ = false;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Gpt> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<DataLoader> train_loader_, val_loader_;
  LrSchedule schedule_;
  Compute compute_ = Compute::kF32;
  LossScaler scaler_;  // fp16 only: its state is checkpointed (trainer.json "loss_scale")
  int adam_t_ = 0;     // AdamW updates applied so far
  std::shared_ptr<GpuSampler> gpu_;
  std::unique_ptr<GpuStepMeter> gpu_meter_;
  RunLog log_;
  CostMeter cost_;
  double flops_per_token_ = 0, peak_gflops_ = 0;
  int step_ = 0;
  uint64_t tokens_seen_ = 0;
  double train_seconds_ = 0;

  TrainerEnv env_;
  std::unique_ptr<ckpt::CheckpointManager> ckpt_;  // destroyed before the model: it finishes its save first
  std::unique_ptr<ckpt::PreemptionWatcher> watcher_;
  int resumed_from_ = -1;
  int last_saved_step_ = -1;
  bool first_resumed_step_logged_ = false;
};

}  // namespace tern
