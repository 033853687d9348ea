// The training loop: micro-batches with gradient accumulation, global-norm clipping, AdamW with a
// warmup+cosine schedule, periodic validation and samples, metrics.jsonl, and a summary at the end.
// Checkpoints (train_checkpoint.h, ckpt/): periodic asynchronous saves to the configured tiers, resume
// (ckpt.resume), and an emergency save when the machine is about to be preempted.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/loss_scaler.h"
#include "ckpt/interval.h"
#include "ckpt/manager.h"
#include "ckpt/preemption.h"
#include "core/progress.h"
#include "core/status.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "dist/communicator.h"
#include "dist/launch.h"
#include "infer/evaluate.h"
#include "infer/generate.h"
#include "metrics/live_metrics.h"
#include "metrics/metrics_server.h"
#include "metrics/nvml_sampler.h"
#include "metrics/run_log.h"
#include "model/gpt.h"
#include "train/grad_sync.h"
#include "train/init_from.h"
#include "train/lr_schedule.h"
#include "train/run_setup.h"
#include "train/train_checkpoint.h"
#include "train/train_config.h"

namespace tern {

struct BenchOptions;
struct BenchResult;

struct StepStats {
  int step = 0;  // 1-based, after the update
  double loss = 0, lr = 0, grad_norm = 0;
  double step_s = 0, data_wait_s = 0;
  double tokens_per_s = 0, mfu = 0;  // of the whole job (every rank)
  // Data parallel: communication this rank waited for (gradients, ZeRO's weights, the loss), and the slowest
  // and fastest rank's step and data-wait times (= this rank's with one rank). notice: some rank got a
  // preemption notice; every rank saves this step and stops.
  double comm_s = 0;
  double step_s_min = 0, step_s_max = 0, data_wait_s_min = 0, data_wait_s_max = 0;
  bool notice = false;
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
  std::optional<double> choice_acc, choice_acc_norm;  // eval.choices: the last evaluation's
  // data.mix: each mixed-in dataset's validation loss at the last evaluation (val_loss is data.dir's)
  std::vector<std::pair<std::string, double>> val_loss_mix;
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
  // train.init_from's models:/NAME@REF -> a local directory (the registry sits above the trainer; `tern
  // train` passes registry::ResolveModelUri). Empty: the path is used as given.
  std::function<Result<std::string>(const std::string&)> resolve_model;
};

class Trainer {
 public:
  // Opens the data, builds the model on the configured device and prepares the run directory.
  // Resumes from a checkpoint when cfg.ckpt.resume says so.
  static Result<std::unique_ptr<Trainer>> Create(const TrainConfig& cfg, bool quiet = false,
                                                 TrainerEnv env = {});

  // Runs up to cfg.steps optimizer steps with evaluation, samples, checkpoints, metrics and the final
  // summary. Returns early, with summary.preempted, after a preemption notice and the emergency checkpoint.
  Result<TrainSummary> Run();

  // One optimizer step over grad_accum_steps micro-batches.
  Result<StepStats> Step();
  // Mean loss over eval_batches validation batches, always starting from the start of data.dir's val split.
  Result<double> Evaluate();
  // data.mix: the same for each mixed-in dataset's val split, {dir, loss} in data.mix's order; empty without.
  Result<std::vector<std::pair<std::string, double>>> EvaluateMix();
  // eval.choices: the accuracy (acc, acc_norm) on the multiple-choice set, each rank scoring its share of the
  // items on the CPU through the serving forward (as the samples), over a host copy of the live weights.
  // nullopt without eval.choices.
  Result<std::optional<std::pair<double, double>>> EvaluateChoices();
  // `count` samples of up to `tokens` tokens, decoded together; full_length: past end-of-text too, so that
  // every call decodes all of them (tern bench times one).
  Result<std::vector<std::string>> Samples(int count, int tokens, bool full_length = false);

  Gpt& model() { return *model_; }
  const TrainConfig& config() const { return cfg_; }
  int step() const { return step_; }
  // Applied AdamW updates (= step() unless fp16 skipped some), and the fp16 loss scaler's state.
  int adam_t() const { return adam_t_; }
  const LossScaler& loss_scaler() const { return scaler_; }
  int resumed_from() const { return resumed_from_; }
  // Data parallel (docs/distributed.md): this process's rank and the job's world size (1 without a launcher);
  // rank 0 alone writes metrics.jsonl, summary.json, samples, exports and checkpoints.
  int rank() const { return comm_ ? comm_->rank() : 0; }
  int world() const { return comm_ ? comm_->world() : 1; }
  bool writer() const { return rank() == 0; }
  ckpt::CheckpointManager& checkpoints() { return *ckpt_; }
  // Saves the current state to the fast tier now (tests, tools); waits for it to be persisted.
  Status SaveCheckpoint(const std::string& kind = "manual");
  // The port live metrics are served on (metrics.port; rank 0 only), or -1 when they are off.
  int metrics_port() const { return metrics_server_ ? metrics_server_->port() : -1; }

 private:
  Trainer() = default;
  // Create's stages. `tern bench` (train/bench.h) runs them one at a time, timing each, and then this
  // trainer's own Step, Evaluate and Samples; it opens no run directory, metrics log, checkpoints or
  // preemption watcher.
  friend Result<BenchResult> RunBench(const BenchOptions& options);
  // data.dir and data.mix entries on object storage (s3://): a verified local copy of each
  // (train/remote_data.h), made before anything reads them; LocalData(dir) is where to read `dir` (itself
  // when it is local).
  Status MirrorRemoteData();
  const std::string& LocalData(const std::string& dir) const;
  Status OpenTokenizer();                 // cfg_.data_dir's; model.vocab_size 0 becomes its size
  Status LoadInitFrom(bool vocab_unset);  // train.init_from's weights into init_ (checked, not applied)
  bool ShapeFromEarlierAttempt(bool vocab_unset);  // a relaunch: the model's shape from run_dir's config.yaml
  Status LoadChoices();  // eval.choices: this rank's share of the items (after OpenComm)
  // trainer_data.cpp: dir's train and val shards, and data.mix's datasets mixed into the training windows
  // (each checked to share the tokenizer); this rank's slice of them.
  Status OpenLoaders(const std::string& dir);
  Result<double> EvaluateOn(DataLoader* loader);  // Evaluate's mean loss over one val loader
  std::string DescribeMix() const;                // the start-up lines of a mixture: shares, tokens, epochs
  static std::string MixText(const std::vector<std::pair<std::string, double>>& losses);  // " | dir 3.21"
  Status OpenDevice();  // MakeRunSetup (run_setup.h) and the loss scaler
  Status OpenComm();    // the communicator of this launch (dist/setup.h)
  void BuildModel();    // the model's buffers (weights not initialised), LR schedule
  GenerationRequest SampleRequest(int count, int tokens, bool full_length) const;  // Samples' decode
  Status WriteRunFiles(const TrainSummary& summary);
  // trainer_rows.cpp: the typed rows of metrics.jsonl (metrics/run_record.h) and the live metrics server.
  StartRecord StartRow() const;
  StepRecord StepRow(const StepStats& s, double elapsed_s) const;
  EndRecord EndRow(const TrainSummary& s) const;
  Status StartMetricsServer();  // metrics.port > 0, rank 0: serve GET /metrics
  // fp16: turns the scaled gradient norm into the step's decision (trainer.cpp).
  Status DecideFp16Step(double scaled_norm, StepStats* s, float* unscale);
  // trainer_ckpt.cpp
  Status OpenCheckpoints(nlohmann::json* resume_row);
  Status CaptureSnapshotMeta(ckpt::Snapshot& snap);
  Status CopySnapshotTensors(ckpt::Snapshot& snap);
  Status SaveTo(const std::vector<int>& tiers, const std::string& kind, std::optional<double> val_loss,
                bool sync);
  DataIdentity data_identity() const;
  Status MaybeCheckpoint(int step, bool last, std::optional<double> val_loss, ProgressBar* bar);
  // Logs finished saves; *failure (if given) receives the first failed save's error.
  Status DrainCheckpointEvents(ProgressBar* bar, Status* failure = nullptr);
  Status EmergencyCheckpoint(TrainSummary* sum, ProgressBar* bar);
  bool AbandonRequested() const;
  // trainer_shards.cpp. ZeRO-1 at world > 1: every rank writes its optimizer shard file into the checkpoint.
  bool sharded_saves() const { return world() > 1 && cfg_.dist.zero > 0; }
  // Data parallel, before a save, on every rank with its own idea of `tiers`: rank 0's is the one that
  // counts. Without sharded saves the other ranks just clear theirs (rank 0 alone writes). With them, every
  // rank gets rank 0's tiers (an integer all-reduce); the other ranks write their shard into each and take
  // part in its manifest exchange, then clear `tiers`; rank 0 goes on to SaveTo, whose manifest lists their
  // files.
  Status JoinSave(std::vector<int>* tiers);
  // One tier's exchange (every rank, in the same order): each rank's shard file (or its failure) to every
  // rank. The returned Status is the communicator's (fatal); *files, on rank 0, the other ranks' manifest
  // entries, or which ranks failed (the checkpoint then stays unpublished).
  Status ExchangeShardFiles(const Result<ckpt::ManifestFile>& mine,
                            Result<std::vector<ckpt::ManifestFile>>* files);
  Status ReduceStepStats(StepStats* s);  // the per-step int all-reduce: notice vote, slowest/fastest rank
  // trainer_interval.cpp: ckpt.every=auto. Rank 0 alone tunes (it alone saves and measures the saves); the
  // other ranks follow its decisions through JoinSave (ZeRO-1) or take no part in saves.
  void OpenIntervalTuner();
  int Cadence(int tier) const;                 // the tier's interval now (the tuned one for auto's fast tier)
  bool PeriodicDue(int tier, int step) const;  // a periodic save of the tier falls on this step
  Status TuneInterval(double step_s, ProgressBar* bar);  // after each step: observe, retune, log a change
  void IntervalSaveStarted(int step, const std::vector<int>& tiers);
  void ObserveIntervalSave(const ckpt::SaveEvent& e);

  TrainConfig cfg_;
  bool quiet_ = false;
  RunSetup setup_;  // the backend and compute types (run_setup.h)
  dist::LaunchInfo launch_;
  std::unique_ptr<dist::Communicator> comm_;  // null until OpenComm (tern bench: one process)
  std::unique_ptr<Gpt> model_;
  std::unique_ptr<GradSync> grad_sync_;                  // world > 1
  std::unique_ptr<ckpt::SafetensorsImage> shard_image_;  // ZeRO-1, ranks > 0: their optimizer shard file
  size_t shard_exchanges_ = 0;                           // rank 0: exchanges done by the save in progress
  Status shard_comm_failure_;                            // rank 0: a collective of theirs failed
  std::unique_ptr<Tokenizer> tokenizer_;
  std::map<std::string, std::string> local_data_;  // MirrorRemoteData: s3:// URI -> its verified local copy
  double data_fetch_s_ = 0;
  uint64_t data_fetch_bytes_ = 0;
  std::unique_ptr<DataLoader> train_loader_, val_loader_;
  std::vector<std::pair<std::string, std::unique_ptr<DataLoader>>> mix_val_;  // data.mix: {dir, val loader}
  std::vector<ChoiceItem> choices_;  // eval.choices: this rank's share of the items
  int64_t choices_total_ = 0;        // the items scored over all ranks
  LrSchedule schedule_;
  LossScaler scaler_;  // fp16 only: its state is checkpointed (trainer.json "loss_scale")
  int adam_t_ = 0;     // AdamW updates applied so far
  std::shared_ptr<GpuSampler> gpu_;
  std::unique_ptr<GpuStepMeter> gpu_meter_;
  RunLog log_;
  CostMeter cost_;
  double flops_per_token_ = 0, peak_gflops_ = 0;
  InitWeights init_;       // train.init_from's weights until the model takes them (Create)
  std::string init_from_;  // what this run's weights started from; empty = random, or resumed
  int step_ = 0;
  uint64_t tokens_seen_ = 0;
  double train_seconds_ = 0;

  TrainerEnv env_;
  std::unique_ptr<ckpt::CheckpointManager> ckpt_;  // destroyed before the model: it finishes its save first
  std::unique_ptr<ckpt::PreemptionWatcher> watcher_;
  int resumed_from_ = -1;
  int last_saved_step_ = -1;
  bool first_resumed_step_logged_ = false;
  std::unique_ptr<ckpt::IntervalTuner> interval_;  // ckpt.every=auto, rank 0
  int interval_last_ = 0;                          // the step of the last periodic fast-tier save
  // Live metrics (metrics.port): fed by log_'s rows; the server is declared last so it stops first.
  std::shared_ptr<LiveRunState> live_;
  std::unique_ptr<MetricsServer> metrics_server_;
};

}  // namespace tern
