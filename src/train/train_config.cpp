#include "train/train_config.h"

#include <charconv>
#include <filesystem>
#include <functional>
#include <sstream>

#include <fmt/ranges.h>

#include <yaml-cpp/yaml.h>

#include "ckpt/interval.h"
#include "core/file_util.h"

namespace tern {
namespace {

// One configuration key: how to read it, write it, and what it means.
struct Key {
  std::string name;  // "section.key"
  std::string help;
  std::vector<std::string> allowed;  // for string enums; empty = free
  std::function<Status(TrainConfig&, const std::string&)> set;
  std::function<std::string(const TrainConfig&)> get;
};

template <typename T>
Status ParseNumber(const std::string& key, const std::string& text, T* out, T min_value) {
  T v{};
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end) {
    return Status::InvalidArgument(
        fmt::format("{}: '{}' is not a valid {}", key, text, std::is_integral_v<T> ? "integer" : "number"));
  }
  if (v < min_value)
    return Status::InvalidArgument(fmt::format("{}: {} is below the minimum {}", key, text, min_value));
  *out = v;
  return Status::Ok();
}

template <typename T>
Key Number(std::string name, T TrainConfig::*field, T min_value, std::string help) {
  return {name,
          std::move(help),
          {},
          [name, field, min_value](TrainConfig& c, const std::string& s) {
            return ParseNumber(name, s, &(c.*field), min_value);
          },
          [field](const TrainConfig& c) { return fmt::format("{}", c.*field); }};
}

template <typename T>
Key ModelNumber(std::string name, T GptConfig::*field, T min_value, std::string help) {
  return {name,
          std::move(help),
          {},
          [name, field, min_value](TrainConfig& c, const std::string& s) {
            return ParseNumber(name, s, &(c.model.*field), min_value);
          },
          [field](const TrainConfig& c) { return fmt::format("{}", c.model.*field); }};
}

template <typename T>
Key CkptNumber(std::string name, T CheckpointConfig::*field, T min_value, std::string help) {
  return {name,
          std::move(help),
          {},
          [name, field, min_value](TrainConfig& c, const std::string& s) {
            return ParseNumber(name, s, &(c.ckpt.*field), min_value);
          },
          [field](const TrainConfig& c) { return fmt::format("{}", c.ckpt.*field); }};
}

Key CkptString(std::string name, std::string CheckpointConfig::*field, std::string help) {
  return {name,
          std::move(help),
          {},
          [field](TrainConfig& c, const std::string& s) {
            c.ckpt.*field = s;
            return Status::Ok();
          },
          [field](const TrainConfig& c) { return c.ckpt.*field; }};
}

Key CkptBool(std::string name, bool CheckpointConfig::*field, std::string help) {
  return {
      name,
      std::move(help),
      {"true", "false"},
      [name, field](TrainConfig& c, const std::string& s) {
        if (s != "true" && s != "false")
          return Status::InvalidArgument(fmt::format("{}: '{}' is not allowed; use true or false", name, s));
        c.ckpt.*field = s == "true";
        return Status::Ok();
      },
      [field](const TrainConfig& c) { return std::string(c.ckpt.*field ? "true" : "false"); }};
}

Key String(std::string name, std::string TrainConfig::*field, std::string help) {
  return {name,
          std::move(help),
          {},
          [field](TrainConfig& c, const std::string& s) {
            c.*field = s;
            return Status::Ok();
          },
          [field](const TrainConfig& c) { return c.*field; }};
}

// The names of an enum-valued key, in the enum's order.
template <typename E>
struct Choice {
  E value;
  const char* name;
};

template <typename E, size_t N>
std::vector<std::string> NamesOf(const Choice<E> (&choices)[N]) {
  std::vector<std::string> names;
  for (const auto& c : choices) names.emplace_back(c.name);
  return names;
}

template <typename E, size_t N>
const char* NameOf(const Choice<E> (&choices)[N], E v) {
  for (const auto& c : choices)
    if (c.value == v) return c.name;
  return "?";  // unreachable: every enumerator has a name
}

template <typename E, size_t N>
Result<E> ParseChoice(const std::string& key, const Choice<E> (&choices)[N], const std::string& text) {
  for (const auto& c : choices)
    if (text == c.name) return c.value;
  return Status::InvalidArgument(
      fmt::format("{}: '{}' is not one of {}", key, text, fmt::join(NamesOf(choices), ", ")));
}

const Choice<TrainPrecision> kPrecisions[] = {
    {TrainPrecision::kFp32, "fp32"}, {TrainPrecision::kBf16, "bf16"}, {TrainPrecision::kFp16, "fp16"}};
const Choice<TrainDevice> kDevices[] = {{TrainDevice::kCpu, "cpu"},
                                        {TrainDevice::kCpuRef, "cpu-ref"},
                                        {TrainDevice::kCuda, "cuda"},
                                        {TrainDevice::kAuto, "auto"}};
const Choice<Recompute> kRecomputes[] = {{Recompute::kNone, RecomputeName(Recompute::kNone)},
                                         {Recompute::kGelu, RecomputeName(Recompute::kGelu)},
                                         {Recompute::kBlocks, RecomputeName(Recompute::kBlocks)}};
const Choice<LrScheduleKind> kSchedules[] = {{LrScheduleKind::kCosine, "cosine"},
                                             {LrScheduleKind::kConstant, "constant"},
                                             {LrScheduleKind::kLinear, "linear"},
                                             {LrScheduleKind::kWsd, "wsd"}};
const Choice<AttentionKind> kAttentions[] = {
    {AttentionKind::kNaive, AttentionKindName(AttentionKind::kNaive)},
    {AttentionKind::kFlash, AttentionKindName(AttentionKind::kFlash)},
    {AttentionKind::kCudnn, AttentionKindName(AttentionKind::kCudnn)}};
const Choice<WhenBusy> kWhenBusy[] = {{WhenBusy::kWait, "wait"}, {WhenBusy::kSkip, "skip"}};
const Choice<OnSaveError> kOnError[] = {{OnSaveError::kContinue, "continue"}, {OnSaveError::kStop, "stop"}};
const Choice<OnNotice> kOnNotice[] = {{OnNotice::kFinish, "finish"}, {OnNotice::kAbandon, "abandon"}};
const Choice<NoticeKind> kNoticeKinds[] = {{NoticeKind::kAws, "aws"}, {NoticeKind::kGcp, "gcp"}};
const Choice<DistBackend> kDistBackends[] = {{DistBackend::kAuto, "auto"},
                                             {DistBackend::kNone, "none"},
                                             {DistBackend::kMpi, "mpi"},
                                             {DistBackend::kNccl, "nccl"}};

// A dist.* key: `field` picks the member of DistConfig, `parse` reads it.
template <typename T>
Key DistNumber(std::string name, T DistConfig::*field, T min_value, T max_value, std::string help) {
  return {
      name,
      std::move(help),
      {},
      [name, field, min_value, max_value](TrainConfig& c, const std::string& s) -> Status {
        T v{};
        TERN_RETURN_IF_ERROR(ParseNumber(name, s, &v, min_value));
        if (v > max_value)
          return Status::InvalidArgument(fmt::format("{}: {} is above the maximum {}", name, s, max_value));
        c.dist.*field = v;
        return Status::Ok();
      },
      [field](const TrainConfig& c) { return fmt::format("{}", c.dist.*field); }};
}

// A key whose value is one of `choices`, parsed into the enum when it is set.
template <typename E, size_t N>
Key Enum(std::string name, E TrainConfig::*field, const Choice<E> (&choices)[N], std::string help) {
  return {name, std::move(help), NamesOf(choices),
          [name, field, &choices](TrainConfig& c, const std::string& s) -> Status {
            TERN_ASSIGN_OR_RETURN(c.*field, ParseChoice(name, choices, s));
            return Status::Ok();
          },
          [field, &choices](const TrainConfig& c) { return std::string(NameOf(choices, c.*field)); }};
}

template <typename E, size_t N>
Key CkptEnum(std::string name, E CheckpointConfig::*field, const Choice<E> (&choices)[N], std::string help) {
  return {name, std::move(help), NamesOf(choices),
          [name, field, &choices](TrainConfig& c, const std::string& s) -> Status {
            TERN_ASSIGN_OR_RETURN(c.ckpt.*field, ParseChoice(name, choices, s));
            return Status::Ok();
          },
          [field, &choices](const TrainConfig& c) { return std::string(NameOf(choices, c.ckpt.*field)); }};
}

Key Resume(std::string help) {
  return {"ckpt.resume",
          std::move(help),
          {},
          [](TrainConfig& c, const std::string& s) -> Status {
            TERN_ASSIGN_OR_RETURN(c.ckpt.resume, ParseResume(s));
            return Status::Ok();
          },
          [](const TrainConfig& c) { return c.ckpt.resume.ToString(); }};
}

const std::vector<Key>& Registry() {
  using C = TrainConfig;
  static const std::vector<Key> keys = {
      ModelNumber("model.n_layer", &GptConfig::n_layer, 1, "transformer blocks"),
      ModelNumber("model.n_head", &GptConfig::n_head, 1, "attention heads (must divide n_embd)"),
      ModelNumber("model.n_embd", &GptConfig::n_embd, 1, "channels"),
      ModelNumber("model.vocab_size", &GptConfig::vocab_size, 0, "vocabulary; 0 = the tokenizer's"),
      ModelNumber("model.block_size", &GptConfig::block_size, 1, "maximum sequence length (positions)"),
      String(
          "data.dir", &C::data_dir,
          "directory written by `tern prepare` (tokenizer.model, *_NNN.bin), or s3://BUCKET/PREFIX where "
          "`tern prepare --out` published one: fetched, verified and cached on this machine before the first "
          "step (S3 settings: ckpt.s3_endpoint, ckpt.s3_region; docs/formats.md)"),
      String("data.cache_dir", &C::data_cache_dir,
             "where s3:// datasets are copied; empty = $TERN_DATA_CACHE, else ~/.cache/tern/data"),
      String(
          "data.mix", &C::data_mix,
          "other prepared datasets mixed in, DIR:SHARE[,DIR:SHARE...] (e.g. data/web:0.3): each gives that "
          "share of the training windows, data.dir the rest; same tokenizer; each one's val loss is "
          "reported (val_loss_mix); a DIR may be s3:// as data.dir; empty = data.dir alone"),
      Number("train.batch_size", &C::batch_size, 1, "micro-batch size B in sequences"),
      Number("train.seq_len", &C::seq_len, 1, "sequence length T (<= model.block_size)"),
      Number<int64_t>("train.total_batch_tokens", &C::total_batch_tokens, 0,
                      "tokens per optimizer step, a multiple of B*T (gradient accumulation); 0 = B*T"),
      Number("train.steps", &C::steps, 1, "optimizer steps"),
      Number("train.lr", &C::lr, 0.0, "peak learning rate"),
      Number("train.min_lr_ratio", &C::min_lr_ratio, 0.0,
             "the floor the schedule decays to at the last step, as a fraction of lr"),
      Number("train.warmup_steps", &C::warmup_steps, 0, "linear warmup steps"),
      Enum("train.schedule", &C::schedule, kSchedules,
           "learning-rate schedule after warmup: cosine to the floor; linear to the floor; wsd "
           "(warmup-stable-decay) holds lr, then decays linearly to the floor over the last "
           "train.decay_fraction of the steps; constant"),
      Number("train.decay_fraction", &C::decay_fraction, 0.0,
             "train.schedule=wsd: the share of train.steps at the end over which lr decays (0.2 = the last "
             "20 %)"),
      Number("train.weight_decay", &C::weight_decay, 0.0, "AdamW decoupled weight decay (matrices only)"),
      Number("train.beta1", &C::beta1, 0.0, "AdamW beta1"),
      Number("train.beta2", &C::beta2, 0.0, "AdamW beta2"),
      Number("train.eps", &C::eps, 0.0, "AdamW epsilon"),
      Number("train.grad_clip", &C::grad_clip, 0.0, "clip the global gradient norm to this; 0 = off"),
      Number<uint64_t>("train.seed", &C::seed, 0, "seed for weights, data order and sampling"),
      String("train.init_from", &C::init_from,
             "fine-tune: start from these weights instead of random ones: a run directory, a checkpoint "
             "(step_N), models:/NAME@REF; empty = random (docs/finetune.md)"),
      {"train.lora.rank",
       "LoRA: the adapters' rank r; > 0 freezes the model of train.init_from and trains r x (in + out) "
       "parameters per adapted matrix and layer instead (docs/finetune.md); 0 = off",
       {},
       [](C& c, const std::string& s) { return ParseNumber("train.lora.rank", s, &c.lora.rank, 0); },
       [](const C& c) { return fmt::format("{}", c.lora.rank); }},
      {"train.lora.alpha",
       "LoRA: the adapters' output is scaled by alpha / rank (PEFT's lora_alpha)",
       {},
       [](C& c, const std::string& s) { return ParseNumber("train.lora.alpha", s, &c.lora.alpha, 0.0f); },
       [](const C& c) { return fmt::format("{}", c.lora.alpha); }},
      {"train.lora.targets",
       "LoRA: the block matrices adapted in every layer, comma-separated: qkv (attention's input "
       "projection), attproj (its output projection), fc, fcproj (the MLP's), or all",
       {},
       [](C& c, const std::string& s) -> Status {
         TERN_ASSIGN_OR_RETURN(c.lora.targets, ParseLoraTargets(s));
         return Status::Ok();
       },
       [](const C& c) { return LoraTargetNames(c.lora.targets); }},
      Enum(
          "train.precision", &C::precision, kPrecisions,
          "fp32, or bf16/fp16 mixed precision (16-bit matmul operands, fp32 master weights and accumulation; "
          "fp16 adds dynamic loss scaling)"),
      Enum("train.device", &C::device, kDevices,
           "cpu (fast path), cpu-ref (plain reference ops), cuda, auto"),
      Enum("train.recompute", &C::recompute, kRecomputes,
           "activation recomputation: gelu keeps one layer's GELU output instead of all L and recomputes it "
           "in the backward (saves (L-1) x B*T x 4C floats for L-1 extra GELU forwards); blocks keeps each "
           "layer's input and re-runs its forward in the backward (about a third more compute, most "
           "activations gone); same gradients"),
      Enum("train.attention", &C::attention, kAttentions,
           "attention kernels: naive saves the probabilities [B,NH,T,T] per layer; flash only two floats per "
           "score row and recomputes the rest in the backward (less memory, one more Q.K^T); CPU and CUDA; "
           "cudnn: "
           "cuDNN's fused flash attention at bf16 (CUDA with cuDNN 9; flash kernels where cuDNN declines)"),
      Number("train.logits_chunk", &C::logits_chunk, 0,
             "fused classifier: the LM head's logits, loss and backward run this many rows at a time, so "
             "[rows, V] fp32 logits are held instead of [B*T, V]; 0 = all B*T rows at once"),
      Number("fp16.initial_scale", &C::loss_scale_init, 1.0,
             "fp16: first loss scale (halved on overflow, doubled after growth_interval good steps)"),
      Number("fp16.growth_interval", &C::loss_scale_growth_interval, 1,
             "fp16: good steps in a row before the loss scale doubles"),
      Number("eval.every", &C::eval_every, 0, "validate every N steps; 0 = only at the end"),
      Number("eval.batches", &C::eval_batches, 1, "validation micro-batches per evaluation"),
      String("eval.choices", &C::eval_choices,
             "a multiple-choice set (JSON Lines, HellaSwag's format) scored at each evaluation: choice_acc "
             "in metrics.jsonl (docs/mlops.md); empty = none"),
      Number("eval.choices_items", &C::eval_choices_items, 0,
             "score only the first N items of eval.choices at each evaluation; 0 = all"),
      Number("sample.every", &C::sample_every, 0, "print samples every N steps; 0 = only at the end"),
      Number("sample.tokens", &C::sample_tokens, 0, "tokens per sample"),
      String("sample.prompt", &C::sample_prompt, "prompt for the samples (empty = start of text)"),
      Number("sample.count", &C::num_samples, 0, "samples printed at the end"),
      String("run.dir", &C::run_dir, "run directory (metrics.jsonl, config.yaml, model.safetensors)"),
      Number("run.price_per_hour", &C::price_per_hour, 0.0, "USD per hour of this machine, for cost metrics"),
      Number("run.cost_offset_usd", &C::cost_offset_usd, 0.0,
             "USD the job spent before this process (set by `tern run`); added to cost_usd"),
      Number("run.billing_start_unix", &C::billing_start_unix, 0.0,
             "UTC seconds when this attempt was launched (set by `tern run`); 0 = bill from the trainer's "
             "start"),
      Number("run.peak_gflops", &C::peak_gflops, 0.0,
             "peak GFLOP/s for MFU; 0 = measure with a matmul probe"),
      Number("run.log_every", &C::log_every, 1, "write a console line every N steps"),
      Number("metrics.port", &C::metrics_port, 0,
             "serve live Prometheus metrics at http://metrics.bind:PORT/metrics (rank 0); 0 = off"),
      String("metrics.bind", &C::metrics_bind,
             "address the live metrics listen on (0.0.0.0 = every interface)"),
      Resume(
          "auto (newest valid checkpoint across tiers, else start fresh) | none | PATH (step dir or tier)"),
      CkptString("ckpt.dir", &CheckpointConfig::dir, "fast tier directory; empty = RUN_DIR/checkpoints"),
      {"ckpt.every",
       "fast-tier save every N steps; 0 = off; auto = Young/Daly from measured saves and ckpt.mtbf",
       {},
       [](TrainConfig& c, const std::string& s) -> Status {
         c.ckpt.every_auto = s == "auto";
         c.ckpt.every = 0;
         if (c.ckpt.every_auto || ParseNumber("ckpt.every", s, &c.ckpt.every, 0).ok()) return Status::Ok();
         return Status::InvalidArgument(fmt::format(
             "ckpt.every: '{}' is not a step count; write e.g. ckpt.every=100, 0 for none, or auto", s));
       },
       [](const TrainConfig& c) { return c.ckpt.every_auto ? "auto" : std::to_string(c.ckpt.every); }},
      CkptNumber("ckpt.every_max", &CheckpointConfig::every_max, 0,
                 "ckpt.every=auto: the longest interval, steps; 0 = train.steps"),
      {"ckpt.mtbf",
       "ckpt.every=auto: mean time between interruptions (seconds, or 90m, 6h, 2d); 0 = the default 6 h",
       {},
       [](TrainConfig& c, const std::string& s) -> Status {
         c.ckpt.mtbf_s = 0;
         if (s == "0") return Status::Ok();
         TERN_ASSIGN_OR_RETURN(c.ckpt.mtbf_s, ckpt::ParseDurationSeconds(s, "ckpt.mtbf"));
         return Status::Ok();
       },
       [](const TrainConfig& c) { return fmt::format("{}", c.ckpt.mtbf_s); }},
      CkptString("ckpt.mtbf_source", &CheckpointConfig::mtbf_source,
                 "where ckpt.mtbf came from (free text for the log; `tern run` sets it)"),
      CkptNumber("ckpt.keep_last", &CheckpointConfig::keep_last, 0, "fast tier keeps the newest N; 0 = all"),
      CkptNumber("ckpt.keep_every", &CheckpointConfig::keep_every, 0,
                 "fast and durable tiers also keep steps that are multiples of N (milestones); 0 = none"),
      CkptString("ckpt.durable", &CheckpointConfig::durable,
                 "durable tier: a directory (shared FS) or s3://bucket/prefix; empty = off"),
      CkptNumber("ckpt.durable_every", &CheckpointConfig::durable_every, 0,
                 "durable-tier save every N steps; 0 = off"),
      CkptNumber("ckpt.durable_keep_last", &CheckpointConfig::durable_keep_last, 0,
                 "durable tier keeps the newest N; 0 = all"),
      CkptNumber("ckpt.best_k", &CheckpointConfig::best_k, 0,
                 "best tier keeps the K lowest validation losses; 0 = off"),
      CkptString("ckpt.best_dir", &CheckpointConfig::best_dir,
                 "best tier directory or s3:// URI; empty = RUN_DIR/best"),
      CkptBool("ckpt.async", &CheckpointConfig::async, "persist on a writer thread while training goes on"),
      CkptEnum("ckpt.when_busy", &CheckpointConfig::when_busy, kWhenBusy,
               "a save due while the previous one is still being written"),
      CkptEnum("ckpt.on_error", &CheckpointConfig::on_error, kOnError,
               "after a failed save (disk full, store unreachable)"),
      CkptEnum("ckpt.on_notice", &CheckpointConfig::on_notice, kOnNotice,
               "on a preemption notice: finish the current step or abandon it, then save and exit 75"),
      CkptBool("ckpt.fast_survives", &CheckpointConfig::fast_survives,
               "the fast tier outlives the instance; false sends emergency saves to the durable tier"),
      CkptString("ckpt.notice_url", &CheckpointConfig::notice_url,
                 "metadata base URL to poll for spot notices, e.g. http://169.254.169.254; empty = off"),
      CkptEnum("ckpt.notice_kind", &CheckpointConfig::notice_kind, kNoticeKinds, "metadata protocol"),
      CkptNumber("ckpt.notice_poll_s", &CheckpointConfig::notice_poll_s, 0.05, "seconds between polls"),
      CkptNumber("ckpt.notice_window_s", &CheckpointConfig::notice_window_s, 0.0,
                 "warning time assumed for SIGTERM/SIGUSR1 and GCP notices"),
      CkptString("ckpt.s3_endpoint", &CheckpointConfig::s3_endpoint,
                 "S3-compatible endpoint URL; empty = $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL or AWS"),
      CkptString("ckpt.s3_region", &CheckpointConfig::s3_region,
                 "S3 region; empty = $AWS_REGION or us-east-1"),
      CkptNumber("ckpt.s3_part_mb", &CheckpointConfig::s3_part_mb, 5,
                 "S3 multipart part size and threshold, MiB"),
      {"dist.backend",
       "data parallel over mpi (CPU) or nccl (GPU); auto picks from the launch (mpirun/srun) and device",
       NamesOf(kDistBackends),
       [](TrainConfig& c, const std::string& s) -> Status {
         TERN_ASSIGN_OR_RETURN(c.dist.backend, ParseChoice("dist.backend", kDistBackends, s));
         return Status::Ok();
       },
       [](const TrainConfig& c) { return std::string(NameOf(kDistBackends, c.dist.backend)); }},
      DistNumber("dist.zero", &DistConfig::zero, 0, 1,
                 "1 = ZeRO-1: each rank keeps and updates 1/W of the AdamW moments, then the weights are "
                 "all-gathered"),
      DistNumber("dist.bucket_mb", &DistConfig::bucket_mb, 0.0, 1e6,
                 "gradient all-reduce bucket (MiB), started during the backward; 0 = one after it"),
      DistNumber("dist.timeout_s", &DistConfig::timeout_s, 0.001, 1e7,
                 "seconds a collective may wait for a rank before the job fails naming it"),
      DistNumber("dist.start_timeout_s", &DistConfig::start_timeout_s, 0.001, 1e7,
                 "with data.dir on S3: seconds the ranks wait at start for each other to fetch their data "
                 "(one machine may have a copy, another fetch it), before dist.timeout_s applies"),
      {"dist.nccl_id_file",
       "nccl launched without MPI: a file on a shared filesystem through which rank 0 hands out its NCCL id",
       {},
       [](TrainConfig& c, const std::string& s) {
         c.dist.nccl_id_file = s;
         return Status::Ok();
       },
       [](const TrainConfig& c) { return c.dist.nccl_id_file; }},
  };
  return keys;
}

const Key* FindKey(const std::string& name_in) {
  // Older names that still read: cuda.attention became train.attention when the CPU got a flash kernel.
  const std::string_view name = name_in == "cuda.attention" ? "train.attention" : std::string_view(name_in);
  for (const auto& k : Registry())
    if (k.name == name) return &k;
  return nullptr;
}

Status UnknownKey(const std::string& name) {
  std::string section = name.substr(0, name.find('.'));
  std::vector<std::string> same_section, all_sections;
  for (const auto& k : Registry()) {
    if (k.name.rfind(section + ".", 0) == 0) same_section.push_back(k.name);
    std::string s = k.name.substr(0, k.name.find('.'));
    if (std::find(all_sections.begin(), all_sections.end(), s) == all_sections.end())
      all_sections.push_back(s);
  }
  if (same_section.empty()) {
    return Status::InvalidArgument(
        fmt::format("unknown config key '{}'; sections are: {} (see `tern train --list-keys`)", name,
                    fmt::join(all_sections, ", ")));
  }
  return Status::InvalidArgument(
      fmt::format("unknown config key '{}'; allowed keys: {}", name, fmt::join(same_section, ", ")));
}

// The offset of the first byte of `s` that is a control character (other than tab and newline) or not part
// of valid UTF-8, or npos.
// Config values are names, paths and numbers: printable text, which config.yaml then writes so that it
// reads back the same (the emitter cannot round-trip other bytes).
size_t FirstBadTextByte(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const unsigned c = p[i];
    if (c < 0x80) {
      if ((c < 0x20 && c != '\t' && c != '\n') || c == 0x7F) return i;
      i++;
      continue;
    }
    const size_t len = c >= 0xC2 && c <= 0xDF   ? 2
                       : c >= 0xE0 && c <= 0xEF ? 3
                       : c >= 0xF0 && c <= 0xF4 ? 4
                                                : 0;
    if (len == 0 || i + len > s.size()) return i;
    unsigned cp = c & (0xFF >> (len + 1));
    for (size_t k = 1; k < len; k++) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
      return i;
    if (cp >= 0x80 && cp < 0xA0) return i;  // C1 control characters
    i += len;
  }
  return std::string::npos;
}

Status SetKey(TrainConfig* cfg, const std::string& name, const std::string& value) {
  const Key* k = FindKey(name);
  if (!k) return UnknownKey(name);
  if (const size_t at = FirstBadTextByte(value); at != std::string::npos)
    return Status::InvalidArgument(fmt::format(
        "config key '{}': byte {} of its value (0x{:02x}) is a control character or not UTF-8 text; config "
        "values must be UTF-8 text (check the file's encoding and quoting)",
        name, at, static_cast<unsigned char>(value[at])));
  return k->set(*cfg, value);
}

Status WalkYaml(const YAML::Node& node, const std::string& prefix, TrainConfig* cfg) {
  if (node.IsMap()) {
    for (const auto& kv : node) {
      std::string key = kv.first.as<std::string>();
      TERN_RETURN_IF_ERROR(WalkYaml(kv.second, prefix.empty() ? key : prefix + "." + key, cfg));
    }
    return Status::Ok();
  }
  if (node.IsScalar()) return SetKey(cfg, prefix, node.Scalar());
  if (node.IsSequence() && prefix == "train.lora.targets") {  // [qkv, fc] as well as "qkv,fc"
    std::string joined;
    for (const auto& item : node) joined += (joined.empty() ? "" : ",") + item.as<std::string>();
    return SetKey(cfg, prefix, joined);
  }
  if (node.IsNull()) return SetKey(cfg, prefix, "");
  return Status::InvalidArgument(fmt::format("{}: expected a single value, got a list", prefix));
}

}  // namespace

const char* PrecisionName(TrainPrecision v) {
  return NameOf(kPrecisions, v);
}
const char* DeviceName(TrainDevice v) {
  return NameOf(kDevices, v);
}
const char* LrScheduleName(LrScheduleKind v) {
  return NameOf(kSchedules, v);
}
const char* DistBackendName(DistBackend v) {
  return NameOf(kDistBackends, v);
}

const char* NoticeKindName(NoticeKind v) {
  return NameOf(kNoticeKinds, v);
}
Result<TrainPrecision> ParsePrecision(const std::string& text) {
  return ParseChoice("train.precision", kPrecisions, text);
}
Result<TrainDevice> ParseDevice(const std::string& text) {
  return ParseChoice("train.device", kDevices, text);
}
Result<AttentionKind> ParseAttention(const std::string& text) {
  return ParseChoice("train.attention", kAttentions, text);
}

std::string ResumeFrom::ToString() const {
  return mode == Mode::kAuto ? "auto" : mode == Mode::kNone ? "none" : path;
}

Result<ResumeFrom> ParseResume(const std::string& text) {
  if (text == "auto") return ResumeFrom::Auto();
  if (text == "none") return ResumeFrom::None();
  if (text.empty()) return Status::InvalidArgument("ckpt.resume is empty: use auto, none or a path");
  return ResumeFrom::Path(text);
}

int TrainConfig::grad_accum_steps() const {
  int64_t micro = static_cast<int64_t>(batch_size) * seq_len;
  return total_batch_tokens == 0 ? 1 : static_cast<int>(total_batch_tokens / micro);
}

LrSchedule TrainConfig::lr_schedule() const {
  return LrSchedule{lr, min_lr_ratio, warmup_steps, steps, schedule, decay_fraction};
}

Result<std::vector<DataMixEntry>> ParseDataMix(std::string_view text, const std::string& data_dir) {
  std::vector<DataMixEntry> out;
  if (text.find_first_not_of(" \t") == std::string_view::npos) return out;
  const auto trim = [](std::string_view v) {
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
    return v;
  };
  const auto norm = [](const std::string& d) {
    std::string n = std::filesystem::path(d).lexically_normal().string();
    while (n.size() > 1 && n.back() == '/') n.pop_back();
    return n;
  };
  double sum = 0;
  for (size_t start = 0; start <= text.size();) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    const std::string_view item = trim(text.substr(start, comma - start));
    start = comma + 1;
    const size_t colon = item.rfind(':');
    double share = 0;
    const std::string_view num = colon == std::string_view::npos ? "" : trim(item.substr(colon + 1));
    const auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), share);
    if (colon == std::string_view::npos || colon == 0 || num.empty() || ec != std::errc() ||
        end != num.data() + num.size())
      return Status::InvalidArgument(fmt::format(
          "data.mix item \"{}\" is not DIR:SHARE: write each prepared directory with its share of the "
          "training windows, e.g. data.mix=data/web:0.3,data/code:0.1 (data.dir keeps the rest)",
          item));
    const std::string dir(trim(item.substr(0, colon)));
    if (!(share > 0 && share < 1))
      return Status::InvalidArgument(fmt::format(
          "data.mix: the share of {} is {}; give a share of the training windows between 0 and 1, "
          "e.g. {}:0.2",
          dir, num, dir));
    if (norm(dir) == norm(data_dir))
      return Status::InvalidArgument(fmt::format(
          "data.mix names data.dir ({}) itself: data.dir takes the windows the mixture leaves; list only the "
          "other datasets",
          dir));
    for (const DataMixEntry& e : out)
      if (norm(e.dir) == norm(dir))
        return Status::InvalidArgument(fmt::format("data.mix names {} twice: give each dataset once", dir));
    out.push_back({dir, share});
    sum += share;
  }
  if (1 - sum < 1.0 / 1000)
    return Status::InvalidArgument(fmt::format(
        "data.mix shares add up to {:g}, leaving data.dir {} no windows: the shares must add up to less than "
        "1 (data.dir keeps the rest, at least 0.001)",
        sum, data_dir));
  return out;
}

Status TrainConfig::Validate() const {
  int64_t micro = static_cast<int64_t>(batch_size) * seq_len;
  if (total_batch_tokens % micro != 0) {
    return Status::InvalidArgument(fmt::format(
        "train.total_batch_tokens ({}) must be a multiple of batch_size*seq_len ({}*{}={}); try {}",
        total_batch_tokens, batch_size, seq_len, micro,
        std::max<int64_t>(1, total_batch_tokens / micro) * micro));
  }
  if (seq_len > model.block_size) {
    return Status::InvalidArgument(
        fmt::format("train.seq_len ({}) exceeds model.block_size ({}); raise block_size or lower seq_len",
                    seq_len, model.block_size));
  }
  if (data_dir.empty()) {
    return Status::InvalidArgument("data.dir is not set: point it at the output of `tern prepare`");
  }
  TERN_RETURN_IF_ERROR(ParseDataMix(data_mix, data_dir).status());
  if (metrics_port > 65535)
    return Status::InvalidArgument(
        fmt::format("metrics.port {} is not a TCP port: give 1 to 65535, or 0 for off", metrics_port));
  if (beta1 >= 1 || beta2 >= 1) return Status::InvalidArgument("train.beta1 and train.beta2 must be below 1");
  if (decay_fraction > 1)
    return Status::InvalidArgument(
        fmt::format("train.decay_fraction {} is more than all the steps: give a share in [0, 1], e.g. 0.2",
                    decay_fraction));
  if (ckpt.durable_every > 0 && ckpt.durable.empty()) {
    return Status::InvalidArgument(
        "ckpt.durable_every is set but ckpt.durable is empty: give a directory or "
        "s3://bucket/prefix");
  }
  TERN_RETURN_IF_ERROR(lora.Validate(model));
  if (ckpt.resume.mode == ResumeFrom::Mode::kPath && ckpt.resume.path.empty()) {
    return Status::InvalidArgument("ckpt.resume is empty: use auto, none or a path");
  }
  return Status::Ok();
}

Status LoadTrainConfigFile(const std::string& path, TrainConfig* cfg) {
  auto text = ReadFileToString(path);
  if (!text.ok())
    return Status::NotFound(fmt::format("config file {} does not exist or cannot be read", path));
  return ParseTrainConfigYaml(*text, path, cfg);
}

Status ParseTrainConfigYaml(std::string_view text, const std::string& name, TrainConfig* cfg) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(
        fmt::format("{}: YAML syntax error at line {}: {}", name, e.mark.line + 1, e.msg));
  }
  if (!root.IsMap()) return Status::InvalidArgument(fmt::format("{}: expected a mapping of sections", name));
  try {
    for (const auto& kv : root) {
      const std::string section = kv.first.as<std::string>();
      if (section == "job") continue;  // `tern run`'s options (docs/jobs.md), not the trainer's
      TERN_RETURN_IF_ERROR(WalkYaml(kv.second, section, cfg).WithContext(name));
    }
  } catch (const YAML::Exception& e) {  // a key that is a list or a mapping: as<std::string>() throws
    return Status::InvalidArgument(
        fmt::format("{}: line {}: a key that is not a word ({}); keys must be plain "
                    "words (section: {{key: value}})",
                    name, e.mark.line + 1, e.msg));
  }
  return Status::Ok();
}

Status ApplyOverride(const std::string& assignment, TrainConfig* cfg) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    return Status::InvalidArgument(
        fmt::format("--set '{}': expected section.key=value, e.g. --set train.steps=200", assignment));
  }
  return SetKey(cfg, assignment.substr(0, eq), assignment.substr(eq + 1)).WithContext("--set");
}

std::string TrainConfigToYaml(const TrainConfig& cfg) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  std::string section;
  for (const auto& k : Registry()) {
    std::string s = k.name.substr(0, k.name.find('.'));
    if (s != section) {
      if (!section.empty()) out << YAML::EndMap;
      section = s;
      out << YAML::Key << s << YAML::Value << YAML::BeginMap;
    }
    out << YAML::Key << k.name.substr(k.name.find('.') + 1) << YAML::Value << k.get(cfg);
  }
  if (!section.empty()) out << YAML::EndMap;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::vector<std::pair<std::string, std::string>> TrainConfigValues(const TrainConfig& cfg) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& k : Registry()) out.emplace_back(k.name, k.get(cfg));
  return out;
}

std::string DescribeTrainConfigKeys(const TrainConfig& cfg) {
  std::ostringstream os;
  for (const auto& k : Registry()) {
    os << fmt::format("  {:<26} = {:<12} {}", k.name, k.get(cfg), k.help);
    if (!k.allowed.empty()) os << fmt::format(" [{}]", fmt::join(k.allowed, " | "));
    os << "\n";
  }
  return os.str();
}

}  // namespace tern
