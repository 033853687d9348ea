// The training loop: micro-batches with gradient accumulation, global-norm clipping, AdamW with a
// warmup+cosine schedule, periodic validation and samples, metrics.jsonl, and a summary at the end.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "metrics/run_log.h"
#include "model/gpt.h"
#include "train/lr_schedule.h"
#include "train/train_config.h"

namespace tern {

struct StepStats {
  int step = 0;  // 1-based, after the update
  double loss = 0, lr = 0, grad_norm = 0;
  double step_s = 0, data_wait_s = 0;
  double tokens_per_s = 0, mfu = 0;
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
};

class Trainer {
 public:
  // Opens the data, builds the model on the configured device and prepares the run directory.
  static Result<std::unique_ptr<Trainer>> Create(const TrainConfig& cfg, bool quiet = false);

  // Runs cfg.steps optimizer steps with evaluation, samples, metrics and the final summary.
  Result<TrainSummary> Run();

  // One optimizer step over grad_accum_steps micro-batches.
  Result<StepStats> Step();
  // Mean loss over eval_batches validation batches, always starting from the start of the val split.
  Result<double> Evaluate();
  std::vector<std::string> Samples(int count, int tokens);

  Gpt& model() { return *model_; }
  const TrainConfig& config() const { return cfg_; }
  int step() const { return step_; }

 private:
  Trainer() = default;
  Status WriteRunFiles(const TrainSummary& summary);

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
};

}  // namespace tern
