// Everything `tern train` needs to know, loaded from YAML with `--set section.key=value` overrides.
// Every key lives in one registry (train_config.cpp) with its type, allowed values and help text, so an
// unknown key or a bad value is an error that names the key and what is allowed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/gpt_config.h"
#include "model/lora.h"
#include "train/lr_schedule.h"

namespace tern {

// The keys whose value is one of a fixed set of names are parsed into these enums once, by the registry
// (train_config.cpp); a bad value is an error naming the key and the allowed names. Code downstream compares
// enums, never names.
enum class TrainPrecision { kFp32, kBf16, kFp16 };       // train.precision: fp32 | bf16 | fp16
enum class TrainDevice { kCpu, kCpuRef, kCuda, kAuto };  // train.device: cpu | cpu-ref | cuda | auto
enum class WhenBusy { kWait, kSkip };                    // ckpt.when_busy: wait | skip
enum class OnSaveError { kContinue, kStop };             // ckpt.on_error: continue | stop
enum class OnNotice { kFinish, kAbandon };               // ckpt.on_notice: finish | abandon
enum class NoticeKind { kAws, kGcp };                    // ckpt.notice_kind: aws | gcp
enum class DistBackend { kAuto, kNone, kMpi, kNccl };    // dist.backend: auto | none | mpi | nccl
// train.recompute is the model layer's Recompute (model/gpt_config.h): none | gelu; train.attention the
// backend's AttentionKind (backend/backend.h): naive | flash | cudnn; train.schedule LrScheduleKind
// (train/lr_schedule.h): cosine | constant | linear | wsd.

// The name a config writes for each value ("bf16", "cpu-ref", ...), as TrainConfigToYaml and the logs print
// it.
const char* PrecisionName(TrainPrecision v);
const char* DeviceName(TrainDevice v);
const char* LrScheduleName(LrScheduleKind v);
const char* NoticeKindName(NoticeKind v);
const char* DistBackendName(DistBackend v);
// The registry's parsers, for flags that take the same values (`tern bench --precision`, `--device`): the
// error names the key, "train.precision: 'bf61' is not one of fp32, bf16, fp16".
Result<TrainPrecision> ParsePrecision(const std::string& text);
Result<TrainDevice> ParseDevice(const std::string& text);
Result<AttentionKind> ParseAttention(const std::string& text);

// ckpt.resume: auto (the newest valid checkpoint across tiers, else a fresh start), none, or a path.
struct ResumeFrom {
  enum class Mode { kNone, kAuto, kPath };
  Mode mode = Mode::kNone;
  std::string path;  // kPath: a step directory or a tier root, local or s3://
  static ResumeFrom None() { return {}; }
  static ResumeFrom Auto() { return {Mode::kAuto, ""}; }
  static ResumeFrom Path(std::string p) { return {Mode::kPath, std::move(p)}; }
  std::string ToString() const;  // "none", "auto" or the path
};
// "auto", "none" or a path; an empty value is an error (`tern train --resume` takes the same values).
Result<ResumeFrom> ParseResume(const std::string& text);

// Checkpoints (docs/checkpoints.md): tiers, cadence, retention, resume and preemption. Keys ckpt.*.
struct CheckpointConfig {
  ResumeFrom resume;  // ckpt.resume: auto | none | PATH
  // fast tier: frequent, local (instance NVMe). Also where emergency saves go unless fast_survives=false.
  std::string dir;     // empty = RUN_DIR/checkpoints
  int every = 0;       // steps between saves; 0 = no periodic saves
  int keep_last = 2;   // newest N kept; 0 = all
  int keep_every = 0;  // also keep every step that is a multiple of this (milestones); 0 = none

  // ckpt.every=auto: the interval tuned at run time from the measured saves and M (ckpt/interval.h); `every`
  // is then 0 and the trainer's tuner decides.
  bool every_auto = false;
  int every_max = 0;        // auto: the longest interval, steps; 0 = train.steps
  double mtbf_s = 0;        // auto: mean time between interruptions (ckpt.mtbf); 0 = the default, 6 h
  std::string mtbf_source;  // auto: where ckpt.mtbf came from, for the log (`tern run` sets both)
  // durable tier: less frequent, to a shared filesystem or an S3-compatible store.
  std::string durable;    // a directory or s3://bucket/prefix; empty = off
  int durable_every = 0;  // steps between durable saves; 0 = none
  int durable_keep_last = 2;
  // best tier: the K best by validation loss, for deployment and rollback (checked at each evaluation).
  int best_k = 0;        // 0 = off
  std::string best_dir;  // empty = RUN_DIR/best
  // how saves run
  bool async = true;                              // snapshot to host memory, persist on a writer thread
  WhenBusy when_busy = WhenBusy::kWait;           // a save due while one is in flight
  OnSaveError on_error = OnSaveError::kContinue;  // a failed save (disk full, store down)
  // preemption
  OnNotice on_notice = OnNotice::kFinish;  // finish the current step, or abandon it (keeps the last update)
  bool fast_survives = true;  // false: the instance's disk dies with it; emergency saves go durable
  std::string notice_url;     // cloud metadata base URL polled for a spot notice; empty = off
  NoticeKind notice_kind = NoticeKind::kAws;
  double notice_poll_s = 5;
  double notice_window_s = 30;  // assumed warning time for SIGTERM/SIGUSR1 and GCP
  // S3-compatible stores (credentials come from the AWS environment variables or ~/.aws, never here)
  std::string s3_endpoint;  // e.g. http://127.0.0.1:9000; empty = $AWS_ENDPOINT_URL_S3 or AWS
  std::string s3_region;    // empty = $AWS_REGION / $AWS_DEFAULT_REGION / us-east-1
  int s3_part_mb = 64;      // multipart part size (and threshold), MiB
};

// Data parallel (docs/distributed.md): the launcher (mpirun, srun) sets rank and world; these keys say how
// the ranks talk. Keys dist.*.
struct DistConfig {
  DistBackend backend = DistBackend::kAuto;  // auto: one rank -> none, CPU -> mpi, GPU -> nccl
  int zero = 0;                              // 1: ZeRO-1, AdamW moments sharded across ranks
  double bucket_mb = 25;   // gradients all-reduced in buckets of this size during the backward; 0 = after it
  double timeout_s = 300;  // a collective unfinished after this long fails naming the missing rank
  // With data on S3: the ranks' set-up and a first barrier wait this long for every rank to have fetched its
  // data (a relaunch may put a machine with the copy beside one without), then timeout_s applies.
  double start_timeout_s = 3600;
  std::string nccl_id_file;  // nccl without MPI: a shared file that hands rank 0's NCCL id to the others
};

// One dataset mixed into data.dir's (data.mix): a directory written by `tern prepare` with data.dir's
// tokenizer, and its share of the training windows.
struct DataMixEntry {
  std::string dir;
  double share = 0;
  bool operator==(const DataMixEntry&) const = default;
};

// "DIR:SHARE[,DIR:SHARE...]" (the share after the last ':'); each share in (0, 1), together below 1, data.dir
// keeping the rest (at least 1/1000); no directory twice. Empty text = no mixture.
Result<std::vector<DataMixEntry>> ParseDataMix(std::string_view text, const std::string& data_dir);

struct TrainConfig {
  GptConfig model;  // model.vocab_size = 0 means "take it from the tokenizer"

  // data
  std::string data_dir;  // the output directory of `tern prepare`
  // Other prepared datasets mixed into the training windows (ParseDataMix); data.dir keeps the rest of the
  // windows and is the validation loss's data; each source's own validation loss is reported beside it.
  std::string data_mix;
  std::string data_cache_dir;  // where s3:// datasets are copied (train/remote_data.h); empty = the default

  // optimisation
  int batch_size = 8;              // micro-batch B (sequences)
  int seq_len = 128;               // T
  int64_t total_batch_tokens = 0;  // tokens per optimizer step; 0 = one micro-batch (B*T)
  int steps = 1000;
  double lr = 6e-4;
  double min_lr_ratio = 0.1;  // the decay's floor = lr * min_lr_ratio
  int warmup_steps = 100;
  LrScheduleKind schedule = LrScheduleKind::kCosine;
  double decay_fraction = 0.2;  // wsd: the last share of the steps, over which lr decays
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double grad_clip = 1.0;  // global norm; 0 disables
  uint64_t seed = 1337;
  // Fine-tuning (docs/finetune.md): the weights a fresh run starts from instead of InitWeights(seed): a run
  // directory, a checkpoint (a step directory or tier root, local or s3://) or, resolved by `tern train`,
  // models:/NAME@REF. The model section must describe that model (block_size may be smaller: the position
  // table is cropped), and data.dir must use its tokenizer. A run that resumes from its own checkpoint
  // ignores it. Empty = random initialisation.
  std::string init_from;
  // LoRA (model/lora.h, docs/finetune.md): train low-rank adapters of the block matrices of the model that
  // train.init_from names, every base weight frozen; the run exports the merged model. Keys train.lora.rank
  // (0 = off), train.lora.alpha, train.lora.targets.
  LoraSpec lora;
  TrainPrecision precision = TrainPrecision::kFp32;
  TrainDevice device = TrainDevice::kCpu;
  Recompute recompute = Recompute::kNone;  // recompute the GELU outputs in the backward (gpt_config.h)
  // fp16 dynamic loss scaling (precision fp16 only; backend/loss_scaler.h, docs/gpu.md). Keys fp16.*.
  double loss_scale_init = 65536;         // the first scale (2^16); a resumed run continues its saved scale
  int loss_scale_growth_interval = 2000;  // good steps in a row before the scale doubles
  // attention's kernel family: naive saves the probabilities, flash only softmax statistics (less memory,
  // one more Q.K^T in the backward). Key train.attention; cuda.attention, its older name, still reads.
  AttentionKind attention = AttentionKind::kNaive;
  // the fused classifier: rows of [rows, V] logits the LM head holds at once (model/gpt_config.h); 0 = all
  // B*T rows. Key train.logits_chunk.
  int logits_chunk = kDefaultLogitsChunk;

  // evaluation and samples
  int eval_every = 100;  // steps; 0 = only at the end
  int eval_batches = 20;
  std::string eval_choices;    // a multiple-choice set (infer/choices.h) scored at each evaluation; "" = none
  int eval_choices_items = 0;  // its first N items; 0 = all
  int sample_every = 0;        // steps; 0 = only at the end
  int sample_tokens = 64;
  std::string sample_prompt;
  int num_samples = 3;

  // run
  std::string run_dir = "runs/run";
  double price_per_hour = 0;  // USD per hour of this machine; > 0 adds cost_usd and usd_per_mtok
  // Set by `tern run` for each attempt (docs/jobs.md), so that cost_usd is the job's: the cost of its earlier
  // attempts, and when this attempt was launched (UTC seconds; 0 = bill from the trainer's own start).
  double cost_offset_usd = 0;
  double billing_start_unix = 0;
  double peak_gflops = 0;  // peak FLOP/s of this machine for the precision; 0 = measure at start
  int log_every = 1;

  // live metrics (metrics/metrics_server.h, docs/report.md): Prometheus text at /metrics; port 0 = off
  int metrics_port = 0;
  std::string metrics_bind = "127.0.0.1";

  CheckpointConfig ckpt;
  DistConfig dist;

  // Micro-batches per optimizer step, over all ranks (each of W ranks runs grad_accum_steps() / W of them).
  int grad_accum_steps() const;
  LrSchedule lr_schedule() const;  // train.lr, min_lr_ratio, warmup_steps, steps, schedule, decay_fraction
  Status Validate() const;
};

// Loads a YAML file (nested sections) into cfg. Unknown keys and bad values are errors naming them. A
// top-level `job:` section belongs to `tern run` (run/job_spec.h) and is skipped here.
Status LoadTrainConfigFile(const std::string& path, TrainConfig* cfg);
// The parsing half of LoadTrainConfigFile: YAML text (named `name` in messages) into cfg. Malformed YAML,
// lists and unknown keys are InvalidArgument errors.
Status ParseTrainConfigYaml(std::string_view text, const std::string& name, TrainConfig* cfg);
// Applies one "section.key=value" override.
Status ApplyOverride(const std::string& assignment, TrainConfig* cfg);
// The whole config as YAML (written into the run directory; loading it back gives the same config).
std::string TrainConfigToYaml(const TrainConfig& cfg);
// Every key with its value as text, in registry order (what a checkpoint records to compare on resume).
std::vector<std::pair<std::string, std::string>> TrainConfigValues(const TrainConfig& cfg);
// Every key with its current value and help, for `tern train --list-keys`.
std::string DescribeTrainConfigKeys(const TrainConfig& cfg);

}  // namespace tern
