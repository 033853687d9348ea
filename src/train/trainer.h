// The training loop: micro-batches with gradient accumulation, global-norm clipping, AdamW with a
// warmup+cosine schedule, periodic validation and samples, metrics.jsonl, and a summary at the end.
// Checkpoints (train_checkpoint.h, ckpt/): periodic asynchronous saves to the configured tiers, resume
// (ckpt.resume), and an emergency save when the machine is about to be preempted.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "ckpt/manager.h"
#include "ckpt/preemption.h"
#include "core/progress.h"
#include "core/status.h"
#include "data/loader.h"
#include "data/tokenizer.h"
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
  std::vector<std::string> Samples(int count, int tokens);

  Gpt& model() { return *model_; }
  const TrainConfig& config() const { return cfg_; }
  int step() const { return step_; }
  int resumed_from() const { return resumed_from_; }
  ckpt::CheckpointManager& checkpoints() { return *ckpt_; }
  // Saves the current state to the fast tier now (tests, tools); waits for it to be persisted.
  Status SaveCheckpoint(const std::string& kind = "manual");

 private:
  Trainer() = default;
  Status WriteRunFiles(const TrainSummary& summary);
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
