#include "train/trainer.h"

#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/file_util.h"
#include "core/progress.h"
#include "dist/setup.h"
#include "infer/adapter.h"
#include "infer/generate.h"
#include "metrics/gpu_sampler_thread.h"
#include "model/safetensors.h"

namespace tern {
namespace {

// A process killed mid-write can leave a torn last line; end it, so the next row starts on a line of its own
// (readers skip the torn one).
Status EndWithNewline(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb+");
  if (!f) return Status::Ok();  // no log yet
  int last = std::fseek(f, -1, SEEK_END) == 0 ? std::fgetc(f) : '\n';
  if (last != '\n' && last != EOF) {
    std::fseek(f, 0, SEEK_END);
    std::fputc('\n', f);
  }
  return std::fclose(f) == 0 ? Status::Ok() : Status::IoError("cannot repair the end of " + path);
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

Status Trainer::OpenTokenizer() {
  const std::string tok_path = LocalData(cfg_.data_dir) + "/tokenizer.model";
  TERN_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::Load(tok_path));
  tokenizer_ = std::make_unique<Tokenizer>(std::move(tok));
  if (cfg_.model.vocab_size == 0) cfg_.model.vocab_size = tokenizer_->vocab_size();
  if (cfg_.model.vocab_size < tokenizer_->vocab_size()) {
    return Status::InvalidArgument(
        fmt::format("model.vocab_size ({}) is smaller than the tokenizer's ({}) in {}", cfg_.model.vocab_size,
                    tokenizer_->vocab_size(), tok_path));
  }
  return Status::Ok();
}

// train.init_from: loaded and checked now, before the slow part of Create (a wrong shape or tokenizer fails
// at once), and handed to the model once Create knows no checkpoint of this run replaces them. A vocab_size
// the config left to the tokenizer is the source's (it may be padded past the tokenizer's).
Status Trainer::LoadInitFrom(bool vocab_unset) {
  GptConfig model = cfg_.model;
  if (vocab_unset) model.vocab_size = 0;
  std::string path = cfg_.init_from;
  if (env_.resolve_model) {
    TERN_ASSIGN_OR_RETURN(path, env_.resolve_model(path));
  }
  TERN_ASSIGN_OR_RETURN(init_, LoadInitWeights(path, *tokenizer_, cfg_.data_dir, &model));
  if (path != cfg_.init_from) init_.source = cfg_.init_from + " (" + path + ")";
  cfg_.model = model;
  if (cfg_.model.vocab_size < tokenizer_->vocab_size())
    return Status::InvalidArgument(
        fmt::format("train.init_from {}: its vocabulary ({}) is smaller than the "
                    "tokenizer's of data.dir ({}); prepare the data with its tokenizer",
                    cfg_.init_from, cfg_.model.vocab_size, tokenizer_->vocab_size()));
  return Status::Ok();
}

// A relaunch of a fine-tune (ckpt.resume set, the run directory's config.yaml written by an earlier attempt
// from the same train.init_from with the same model) takes the model's shape from that config.yaml, and the
// source's weights are read only if no checkpoint of the run replaces them: a relaunch reads no
// source it does not use (gigabytes at 1.5B), and needs none that has gone. A vocab_size left to the
// tokenizer is the earlier attempt's (the source's, which may be padded past the tokenizer's).
bool Trainer::ShapeFromEarlierAttempt(bool vocab_unset) {
  if (cfg_.ckpt.resume.mode == ResumeFrom::Mode::kNone) return false;
  const std::string path = cfg_.run_dir + "/config.yaml";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return false;
  TrainConfig earlier;
  if (!LoadTrainConfigFile(path, &earlier).ok() || earlier.init_from != cfg_.init_from) return false;
  const GptConfig &a = earlier.model, &b = cfg_.model;
  if (a.n_layer != b.n_layer || a.n_head != b.n_head || a.n_embd != b.n_embd ||
      a.block_size != b.block_size || a.vocab_size < tokenizer_->vocab_size() ||
      (!vocab_unset && a.vocab_size != b.vocab_size))
    return false;
  cfg_.model.vocab_size = a.vocab_size;
  return true;
}

// eval.choices, read at the start so that a bad file fails before any step; each rank keeps a contiguous
// share of the items.
Status Trainer::LoadChoices() {
  if (cfg_.eval_choices.empty()) return Status::Ok();
  auto items = LoadChoiceItems(cfg_.eval_choices);
  if (!items.ok()) return items.status().WithContext("eval.choices");
  if (cfg_.eval_choices_items > 0 && static_cast<int64_t>(items->size()) > cfg_.eval_choices_items)
    items->resize(cfg_.eval_choices_items);
  choices_total_ = static_cast<int64_t>(items->size());
  const int64_t W = world(), r = rank();
  choices_.assign(items->begin() + choices_total_ * r / W, items->begin() + choices_total_ * (r + 1) / W);
  return Status::Ok();
}

Status Trainer::OpenComm() {
  dist::CommSetup cs;
  TERN_ASSIGN_OR_RETURN(cs.backend,
                        dist::ParseCommBackend(DistBackendName(cfg_.dist.backend)));  // same names
  // Data on S3: a rank that found its copy on the machine starts long before one that fetches it, so the
  // set-up and a first barrier wait dist.start_timeout_s for the others; then dist.timeout_s.
  const auto ms = [](double s) { return std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); };
  const bool fetching = !local_data_.empty() && launch_.world > 1;
  cs.timeout = ms(fetching ? std::max(cfg_.dist.timeout_s, cfg_.dist.start_timeout_s) : cfg_.dist.timeout_s);
  cs.compute = setup_.backend.get();
  cs.cuda_stream = setup_.backend->native_stream();
  cs.nccl_id_file = cfg_.dist.nccl_id_file;
  TERN_ASSIGN_OR_RETURN(comm_, dist::MakeCommunicator(cs, launch_));
  if (fetching) {
    TERN_RETURN_IF_ERROR(comm_->Barrier().WithContext(
        fmt::format("waiting {:g} s (dist.start_timeout_s) for every rank to have data.dir's copy",
                    cfg_.dist.start_timeout_s)));
    comm_->set_timeout(ms(cfg_.dist.timeout_s));
  }
  const int W = comm_->world(), accum = cfg_.grad_accum_steps();
  if (accum % W != 0) {
    const int64_t micro = static_cast<int64_t>(cfg_.batch_size) * cfg_.seq_len;
    return Status::InvalidArgument(fmt::format(
        "{} ranks cannot share {} micro-batches per step (train.total_batch_tokens {} / B*T {}): each rank "
        "runs an equal part. Set train.total_batch_tokens to a multiple of {} (e.g. {}) or launch a divisor "
        "of "
        "{} ranks",
        W, accum, cfg_.total_batch_tokens, micro, micro * W, micro * W * std::max(1, (accum + W - 1) / W),
        accum));
  }
  if (cfg_.dist.zero > 0 && W == 1 && !quiet_)
    std::fprintf(stderr, "tern train: dist.zero=1 with one rank shards nothing\n");
  return Status::Ok();
}

Status Trainer::OpenDevice() {
  TERN_ASSIGN_OR_RETURN(setup_, MakeRunSetup(cfg_));
  LossScaler::Options scaling;
  scaling.initial_scale = cfg_.loss_scale_init;
  scaling.growth_interval = cfg_.loss_scale_growth_interval;
  scaler_ = LossScaler(scaling);
  return Status::Ok();
}

void Trainer::BuildModel() {
  model_ = std::make_unique<Gpt>(setup_.backend.get(), cfg_.model, cfg_.batch_size, cfg_.seq_len,
                                 setup_.compute, cfg_.recompute, cfg_.logits_chunk, cfg_.lora);
  // Any real communicator (even a world of one: `mpirun -np 1`, the GPU check's one-GPU NCCL run) takes the
  // data-parallel path; only the single-process one skips it.
  if (comm_ && comm_->name() != "single") {
    if (cfg_.dist.zero > 0) {
      model_->SetOptimizerShard(TrainableShard(model_->trainable(), world(), rank()));
    }
    grad_sync_ = std::make_unique<GradSync>(comm_.get(), model_->grads(), model_->trainable().count,
                                            static_cast<size_t>(cfg_.dist.bucket_mb * (1 << 20)),
                                            /*sharded=*/cfg_.dist.zero > 0);
  }
  schedule_ = cfg_.lr_schedule();
  flops_per_token_ = LoraFlopsPerToken(cfg_.model, cfg_.lora, cfg_.seq_len);  // GptFlopsPerToken without LoRA
}

Result<std::unique_ptr<Trainer>> Trainer::Create(const TrainConfig& config, bool quiet, TrainerEnv env) {
  std::unique_ptr<Trainer> t(new Trainer());
  t->cfg_ = config;
  t->quiet_ = quiet;
  t->env_ = std::move(env);
  const TrainConfig& cfg = t->cfg_;

  const bool vocab_unset = cfg.model.vocab_size == 0;
  TERN_RETURN_IF_ERROR(t->MirrorRemoteData());
  TERN_RETURN_IF_ERROR(t->OpenTokenizer());
  // A source that cannot be read is an error only for a run that does not resume (below): a relaunch that
  // resumes from its own checkpoint no longer needs it.
  Status init_failure;
  const bool init_deferred = !cfg.init_from.empty() && t->ShapeFromEarlierAttempt(vocab_unset);
  if (!cfg.init_from.empty() && !init_deferred) {
    init_failure = t->LoadInitFrom(vocab_unset);
    if (!init_failure.ok() && (cfg.ckpt.resume.mode == ResumeFrom::Mode::kNone ||
                               init_failure.code() == Status::Code::kInvalidArgument))
      return init_failure;
  }
  TERN_RETURN_IF_ERROR(cfg.model.Validate());
  TERN_RETURN_IF_ERROR(cfg.Validate());
  // (`tern bench` times a LoRA step on random weights; a training run adapts a trained model.)
  if (cfg.lora.enabled() && cfg.init_from.empty())
    return Status::InvalidArgument(
        "train.lora.rank is set but train.init_from is empty: LoRA adapts a trained model; set "
        "train.init_from "
        "to it (a run directory, a checkpoint, or models:/NAME@REF), or set train.lora.rank=0 to train every "
        "weight");
  // The launcher (mpirun, srun) says which rank this is; on GPUs each rank of a machine takes its own GPU.
  TERN_ASSIGN_OR_RETURN(t->launch_, dist::DetectLaunch());
  if (t->launch_.world != 1 && !std::getenv("TERN_CUDA_DEVICE"))
    setenv("TERN_CUDA_DEVICE", std::to_string(t->launch_.local_rank).c_str(), 0);
  TERN_RETURN_IF_ERROR(t->OpenDevice());
  TERN_RETURN_IF_ERROR(t->OpenComm());
  if (!t->writer()) t->quiet_ = true;             // rank 0 speaks for the job
  TERN_RETURN_IF_ERROR(t->StartMetricsServer());  // before the slow part: a port in use fails at once
  TERN_RETURN_IF_ERROR(t->LoadChoices());
  TERN_RETURN_IF_ERROR(t->OpenLoaders(cfg.data_dir));
  // The model's buffers; InitWeights waits until we know whether a checkpoint replaces the weights
  // (OpenCheckpoints below): initialising 124M parameters only to overwrite them is a second of the time to
  // the first resumed step.
  t->BuildModel();
  t->cost_.price_per_hour = cfg.price_per_hour;
  t->cost_.offset_usd = cfg.cost_offset_usd;  // `tern run`: the job's earlier attempts (docs/jobs.md)
  t->peak_gflops_ = cfg.peak_gflops > 0 ? cfg.peak_gflops : ProbeRunPeak(t->setup_);
  Backend* backend = t->setup_.backend.get();
  if (t->env_.gpu_sampler) {
    t->gpu_ = t->env_.gpu_sampler;
  } else if (backend->capabilities().is_gpu) {
    t->gpu_ = std::make_shared<BackgroundGpuSampler>(std::make_unique<NvmlSampler>(backend->PciBusId()));
  }
  if (t->gpu_ && t->gpu_->available()) t->gpu_meter_ = std::make_unique<GpuStepMeter>(t->gpu_.get());

  const std::string tok_path = t->LocalData(cfg.data_dir) + "/tokenizer.model";
  TERN_RETURN_IF_ERROR(MakeDirs(cfg.run_dir));
  if (t->writer()) {
    TERN_RETURN_IF_ERROR(WriteFileAtomic(cfg.run_dir + "/config.yaml", TrainConfigToYaml(cfg)));
    std::error_code ec;
    std::filesystem::copy_file(tok_path, cfg.run_dir + "/tokenizer.model",
                               std::filesystem::copy_options::overwrite_existing, ec);
    if (ec)
      return Status::IoError(fmt::format("copying {} into {}: {}", tok_path, cfg.run_dir, ec.message()));
  }
  nlohmann::json resume_row;
  TERN_RETURN_IF_ERROR(t->OpenCheckpoints(&resume_row));
  if (t->world() > 1) {  // every rank must continue from the same step
    int64_t v[2] = {t->resumed_from_, -t->resumed_from_};
    TERN_RETURN_IF_ERROR(
        t->comm_->AllReduceInt(v, 2, dist::IntOp::kMax).WithContext("comparing resumed steps"));
    if (v[0] != -v[1]) {
      return Status::InvalidArgument(fmt::format(
          "the ranks found different checkpoints (steps {} to {}; -1 = none): every rank reads its own. Put "
          "ckpt.dir on a filesystem every machine shares, or resume from the durable tier (ckpt.resume=PATH)",
          -v[1], v[0]));
    }
  }
  if (t->resumed_from_ < 0 && !init_failure.ok()) return init_failure;
  // The model's shape is already the source's (the earlier attempt's), so the load checks, not changes, it.
  if (t->resumed_from_ < 0 && init_deferred) TERN_RETURN_IF_ERROR(t->LoadInitFrom(/*vocab_unset=*/false));
  if (t->resumed_from_ < 0 && !t->init_.params.empty()) {
    if (cfg.lora.enabled()) {
      t->model_->InitWeights(cfg.seed);  // the adapters' start (B = 0: step 0 is the source model)
      t->model_->SetBaseParameters(t->init_.params);
    } else {
      t->model_->SetParameters(t->init_.params);
    }
    t->init_from_ = t->init_.source;
    if (!t->quiet_)
      std::fprintf(stderr, "tern train: weights from %s (train.init_from)%s%s\n", t->init_from_.c_str(),
                   t->init_.note.empty() ? "" : "; ", t->init_.note.c_str());
  } else if (t->resumed_from_ < 0) {
    t->model_->InitWeights(cfg.seed);
  }
  t->init_ = {};  // a resumed run's own checkpoint replaced them
  // A resumed run appends: the rows of the steps it repeats follow a "resume" row (the last row wins). Ranks
  // other than 0 keep no log (their RunLog stays closed and discards rows).
  const std::string metrics = cfg.run_dir + "/metrics.jsonl";
  if (t->writer()) {
    if (t->resumed_from_ >= 0) TERN_RETURN_IF_ERROR(EndWithNewline(metrics));
    TERN_RETURN_IF_ERROR(t->log_.Open(metrics, /*append=*/t->resumed_from_ >= 0));
  }
  TERN_RETURN_IF_ERROR(t->log_.Write(t->StartRow()));
  if (!resume_row.is_null()) TERN_RETURN_IF_ERROR(t->log_.Write(resume_row));
  return t;
}

Result<StepStats> Trainer::Step() {
  auto start = std::chrono::steady_clock::now();
  const int accum = cfg_.grad_accum_steps(), W = world();
  const int local = accum / W;  // this rank's micro-batches (OpenComm checked that W divides accum)
  const int B = cfg_.batch_size, T = cfg_.seq_len;
  // Over the global batch: the ranks' gradients are summed, so each rank scales by all accum micro-batches.
  const float dloss = 1.0f / (static_cast<float>(B) * T * accum);
  const bool fp16 = setup_.compute == Compute::kF16;
  // fp16: the loss (so every gradient) is multiplied by the scale, keeping small gradients above fp16's
  // underflow; AdamW divides it out again (with the clipping factor) through grad_scale.
  const float seed = fp16 ? static_cast<float>(dloss * scaler_.scale()) : dloss;
  StepStats s;
  if (gpu_meter_) gpu_meter_->StepBegin();
  model_->ZeroGrad();
  Batch batch;
  const int64_t N = static_cast<int64_t>(B) * T;
  // Loss masks (tern prepare --chat): the step's loss is the mean over every target learned in the global
  // batch, all micro-batches of all ranks (PyTorch's ignore_index over the whole batch; Hugging Face fixed
  // its gradient accumulation the same way, num_items_in_batch): so the micro-batch size, the accumulation
  // and the world size do not change the optimisation. The step's micro-batches are fetched first to count
  // them.
  std::vector<Batch> masked;
  double step_learned = 0;
  const LoaderPosition start_pos = train_loader_->position();
  if (train_loader_->has_masks()) {
    masked.resize(local);
    for (Batch& b : masked) {
      TERN_RETURN_IF_ERROR(train_loader_->Next(&b));
      step_learned += static_cast<double>(LearnedTargets(b.targets));
    }
    if (W > 1) {
      const auto t0 = std::chrono::steady_clock::now();
      Result<double> all = comm_->SumInRankOrder(step_learned);
      if (!all.ok()) return all.status().WithContext("summing the step's learned tokens");
      step_learned = all.value();
      s.comm_s += Seconds(t0);
    }
  }
  // A step learning every token (or none) keeps the plain B*T mean.
  const double all_targets = static_cast<double>(N) * accum;
  const bool partial = step_learned > 0 && step_learned < all_targets;
  const float micro_seed = partial ? static_cast<float>(seed * (all_targets / step_learned)) : seed;
  const double divisor = partial ? step_learned / accum : 0.0;
  // Each micro-batch's loss is added on the device; the sum is read once, after the last backward.
  model_->ClearLossSum();
  for (int micro = 0; micro < local; micro++) {
    // With several ranks the notice is voted on once per step (ReduceStepStats): a rank cannot leave alone.
    if (micro > 0 && W == 1 && AbandonRequested()) {
      // Rewind the data so the emergency checkpoint resumes with this step's first micro-batch.
      TERN_RETURN_IF_ERROR(train_loader_->Restore(start_pos));
      s.abandoned = true;
      return s;
    }
    if (masked.empty()) TERN_RETURN_IF_ERROR(train_loader_->Next(&batch));
    const Batch& cur = masked.empty() ? batch : masked[micro];
    model_->ForwardAccumulate(cur.inputs.data(), cur.targets.data(), B, T, micro_seed, divisor);
    // The last micro-batch's backward starts the gradient all-reduce bucket by bucket.
    if (grad_sync_ && micro == local - 1) {
      model_->Backward(grad_sync_->Hook());
    } else {
      model_->Backward();
    }
  }
  double loss_sum = model_->TakeLossSum();
  if (grad_sync_) {
    TERN_ASSIGN_OR_RETURN(const double waited, grad_sync_->Finish());
    const auto t0 = std::chrono::steady_clock::now();
    // Host values go through SumInRankOrder: AllReduce takes device buffers under NCCL.
    Result<double> sum = comm_->SumInRankOrder(loss_sum);
    if (!sum.ok()) return sum.status().WithContext("summing the loss");
    loss_sum = sum.value();
    s.comm_s += waited + Seconds(t0);
  }
  if (env_.after_backward) env_.after_backward(step_ + 1, *model_);
  s.loss = loss_sum / accum;
  // ZeRO-1: each rank holds the sums of its shard only; the norm comes from the shards' norms.
  double norm = 0;
  if (grad_sync_ && grad_sync_->sharded()) {
    const auto t0 = std::chrono::steady_clock::now();
    TERN_ASSIGN_OR_RETURN(norm, grad_sync_->GlobalNorm(setup_.backend.get()));
    s.comm_s += Seconds(t0);
  } else {
    norm = model_->GradNorm();
  }
  float grad_scale = 1.0f;
  if (fp16) {
    TERN_RETURN_IF_ERROR(DecideFp16Step(norm, &s, &grad_scale));
  } else {
    s.grad_norm = norm;
  }
  if (!s.skipped && (!std::isfinite(s.loss) || !std::isfinite(s.grad_norm))) {
    return Status::Internal(fmt::format(
        "step {}: loss {} / gradient norm {} is not finite; lower train.lr or enable train.grad_clip",
        step_ + 1, s.loss, s.grad_norm));
  }
  if (cfg_.grad_clip > 0 && s.grad_norm > cfg_.grad_clip)
    grad_scale *= static_cast<float>(cfg_.grad_clip / s.grad_norm);
  s.lr = schedule_.At(step_);
  if (!s.skipped) {
    if (ckpt_)
      ckpt_->WaitForSnapshot();  // a save in flight must finish copying the weights before they change
    adam_t_++;
    model_->AdamWStep(static_cast<float>(s.lr), cfg_.beta1, cfg_.beta2, cfg_.eps, cfg_.weight_decay,
                      grad_scale, adam_t_);
    if (grad_sync_ && cfg_.dist.zero > 0) {  // each rank updated its shard: gather the whole weights
      const auto t0 = std::chrono::steady_clock::now();
      const GradRange sh = model_->optimizer_shard(), all = model_->trainable();
      TERN_RETURN_IF_ERROR(
          comm_->AllGather(model_->params() + sh.offset, model_->params() + all.offset, all.count)
              .WithContext("gathering the updated weights (ZeRO-1)"));
      model_->WeightsChanged();
      s.comm_s += Seconds(t0);
    }
  }
  setup_.backend->Synchronize();
  step_++;
  s.step = step_;
  s.step_s = Seconds(start);
  s.data_wait_s = train_loader_->TakeWaitSeconds();
  TERN_RETURN_IF_ERROR(ReduceStepStats(&s));
  const double tokens = static_cast<double>(B) * T * accum;  // every rank's
  s.tokens_per_s = tokens / s.step_s;
  s.mfu = flops_per_token_ * s.tokens_per_s / (peak_gflops_ * 1e9 * W);
  tokens_seen_ += static_cast<uint64_t>(tokens);
  train_seconds_ += s.step_s;
  if (gpu_meter_) s.gpu = gpu_meter_->StepEnd(tokens, s.step_s);
  return s;
}

Status Trainer::ReduceStepStats(StepStats* s) {
  s->step_s_min = s->step_s_max = s->step_s;
  s->data_wait_s_min = s->data_wait_s_max = s->data_wait_s;
  if (world() == 1) {
    s->notice = watcher_ && watcher_->notified();
    return Status::Ok();
  }
  // One int all-reduce (max) per step: any rank's notice, and the slowest and fastest rank (as -min).
  auto us = [](double seconds) { return static_cast<int64_t>(seconds * 1e6); };
  int64_t v[5] = {watcher_ && watcher_->notified() ? 1 : 0, us(s->step_s), -us(s->step_s), us(s->data_wait_s),
                  -us(s->data_wait_s)};
  TERN_RETURN_IF_ERROR(
      comm_->AllReduceInt(v, 5, dist::IntOp::kMax).WithContext("sharing the step's times and notices"));
  s->notice = v[0] != 0;
  s->step_s_max = v[1] / 1e6;
  s->step_s_min = -v[2] / 1e6;
  s->data_wait_s_max = v[3] / 1e6;
  s->data_wait_s_min = -v[4] / 1e6;
  return Status::Ok();
}

Status Trainer::DecideFp16Step(double scaled_norm, StepStats* s, float* unscale) {
  const LossScaler::Decision d = scaler_.Update(scaled_norm);
  s->loss_scale = d.scale_used;
  s->grad_norm = d.grad_norm;
  s->skipped = !d.apply;
  *unscale = d.unscale;
  if (s->skipped && d.scale_used <= scaler_.options().min_scale) {
    // Halving cannot help any more: the overflow is in the forward pass (activations above fp16's 65504).
    return Status::Internal(
        fmt::format("step {}: fp16 gradients overflow even at the minimum loss scale {}: the activations "
                    "themselves exceed "
                    "fp16's range; train with train.precision=bf16 (or fp32), or lower train.lr",
                    step_ + 1, d.scale_used));
  }
  return Status::Ok();
}

Result<std::optional<std::pair<double, double>>> Trainer::EvaluateChoices() {
  if (choices_total_ == 0) return std::optional<std::pair<double, double>>();
  int64_t right[2] = {0, 0};  // acc, acc_norm
  if (!choices_.empty()) {
    std::unique_ptr<Backend> cpu = MakeCpuFastBackend();
    TERN_ASSIGN_OR_RETURN(ChoiceResult c, ScoreChoices(cpu.get(), cfg_.model, model_->ExportParameters(),
                                                       *tokenizer_, choices_, Quantize::kNone));
    right[0] = c.correct;
    right[1] = c.correct_norm;
  }
  if (world() > 1) {
    TERN_RETURN_IF_ERROR(
        comm_->AllReduceInt(right, 2, dist::IntOp::kSum).WithContext("summing the eval.choices accuracy"));
  }
  const double n = static_cast<double>(choices_total_);
  return std::optional<std::pair<double, double>>(std::make_pair(right[0] / n, right[1] / n));
}

// The prompt is cropped and the length capped so that they fit the trained length.
GenerationRequest Trainer::SampleRequest(int count, int tokens, bool full_length) const {
  GenerationRequest r;
  r.prompt = tokenizer_->Encode(cfg_.sample_prompt);
  if (r.prompt.empty()) r.prompt.push_back(tokenizer_->eos_id());
  const int context = std::min(cfg_.seq_len, cfg_.model.block_size);
  if (static_cast<int>(r.prompt.size()) >= context)
    r.prompt.erase(r.prompt.begin(), r.prompt.end() - (context - 1));
  r.max_tokens = std::min<int>(tokens, context - static_cast<int>(r.prompt.size()));
  r.sampling = {0.8f, 40, 1.0f};
  r.seed = cfg_.seed + 1000;
  r.n = std::min(count, kMaxChoices);
  r.ignore_eos = full_length;
  return r;
}

// Samples run on the serving engine (infer/generate.h), tern's one decode loop, over a host copy of the
// live weights.
Result<std::vector<std::string>> Trainer::Samples(int count, int tokens, bool full_length) {
  std::vector<std::string> out;
  if (count <= 0 || tokens <= 0) return out;
  const GenerationRequest r = SampleRequest(count, tokens, full_length);
  const int context = std::min(cfg_.seq_len, cfg_.model.block_size);
  TERN_ASSIGN_OR_RETURN(auto gen,
                        GenerateOnce(cfg_.model, model_->ExportParameters(), *tokenizer_, r, context));
  for (const Generated& g : gen) {
    std::vector<int32_t> ids = r.prompt;
    ids.insert(ids.end(), g.tokens.begin(), g.tokens.end());
    out.push_back(tokenizer_->Decode(ids));  // end-of-text tokens decode to nothing
  }
  return out;
}

Result<TrainSummary> Trainer::Run() {
  auto start = std::chrono::steady_clock::now();
  cost_.StartClock(cfg_.billing_start_unix);  // `tern run` bills the start-up since the attempt's launch
  TrainSummary sum;
  sum.run_dir = cfg_.run_dir;
  sum.peak_gflops = peak_gflops_;
  const uint64_t tokens_per_step =
      static_cast<uint64_t>(cfg_.batch_size) * cfg_.seq_len * cfg_.grad_accum_steps();
  if (!quiet_) {
    std::fprintf(
        stderr,
        "tern train: %s, %.2fM params, %s on %s (%d threads), B=%d T=%d x%d accum = %llu tokens/step, "
        "%d steps\n  peak %.0f GFLOP/s (%s), %.1f MFLOP/token; run dir %s\n",
        cfg_.model.ToString().c_str(), model_->num_params() / 1e6, PrecisionName(cfg_.precision),
        setup_.backend->name().c_str(), omp_get_max_threads(), cfg_.batch_size, cfg_.seq_len,
        cfg_.grad_accum_steps(), static_cast<unsigned long long>(tokens_per_step), cfg_.steps, peak_gflops_,
        PrecisionName(cfg_.precision), flops_per_token_ / 1e6, cfg_.run_dir.c_str());
    if (train_loader_->num_sources() > 1) std::fprintf(stderr, "%s", DescribeMix().c_str());
    if (cfg_.lora.enabled())
      std::fprintf(
          stderr,
          "  LoRA %s (scale %.3g): %.3fM trainable parameters (%.2f%%), the %.2fM of the model frozen\n",
          cfg_.lora.ToString().c_str(), cfg_.lora.scale(), model_->trainable().count / 1e6,
          100.0 * model_->trainable().count / model_->num_base_params(), model_->num_base_params() / 1e6);
  }
  sum.resumed_from = resumed_from_;
  ProgressBar bar("train", cfg_.steps, "step", quiet_ ? nullptr : stderr);
  double mfu_sum = 0, loss_ema = 0;
  int steps_here = 0;
  while (step_ < cfg_.steps) {
    TERN_ASSIGN_OR_RETURN(StepStats s, Step());
    if (s.abandoned) {
      TERN_RETURN_IF_ERROR(EmergencyCheckpoint(&sum, &bar));
      return sum;
    }
    loss_ema = steps_here++ == 0 ? s.loss : 0.9 * loss_ema + 0.1 * s.loss;
    mfu_sum += s.mfu;
    sum.train_loss = s.loss;
    double elapsed = Seconds(start);
    const StepRecord row = StepRow(s, elapsed);
    if (row.skipped && !quiet_) {
      bar.Print(
          fmt::format("step {}: fp16 gradients overflowed at loss scale {}; update skipped, scale now {}",
                      s.step, s.loss_scale, scaler_.scale()));
    }
    const std::string cost_text =
        row.cost_usd ? fmt::format(" | ${:.4f} ({:.2f} $/Mtok)", *row.cost_usd, *row.usd_per_mtok) : "";
    TERN_RETURN_IF_ERROR(log_.Write(row));
    if (resumed_from_ >= 0 && !first_resumed_step_logged_) {
      first_resumed_step_logged_ = true;
      TERN_RETURN_IF_ERROR(log_.Write({{"event", "resumed_first_step"},
                                       {"step", s.step},
                                       {"since_process_start_s", ProcessAgeSeconds()}}));
    }
    if (s.notice) {  // finish policy (any rank's notice, agreed by all): this step is done; save it and stop
      TERN_RETURN_IF_ERROR(EmergencyCheckpoint(&sum, &bar));
      return sum;
    }
    if (!quiet_ && (s.step % cfg_.log_every == 0 || s.step == cfg_.steps)) {
      bar.Update(s.step,
                 fmt::format("loss {:.4f} | lr {:.2e} | {} | MFU {:.1f}%{}", loss_ema, s.lr,
                             ProgressBar::FormatAmount(s.tokens_per_s, "tok/s"), s.mfu * 100, cost_text));
    }
    bool last = s.step == cfg_.steps;
    std::optional<double> val_now;
    if ((cfg_.eval_every > 0 && s.step % cfg_.eval_every == 0) || last) {
      auto t0 = std::chrono::steady_clock::now();
      TERN_ASSIGN_OR_RETURN(double val, Evaluate());
      TERN_ASSIGN_OR_RETURN(auto acc, EvaluateChoices());
      TERN_ASSIGN_OR_RETURN(sum.val_loss_mix, EvaluateMix());
      sum.val_loss = val;
      val_now = val;
      EvalRecord row{s.step, val, Seconds(t0) * 1e3, std::nullopt, std::nullopt};
      row.val_loss_mix = sum.val_loss_mix;
      std::string acc_text = MixText(sum.val_loss_mix);
      if (acc) {
        sum.choice_acc = row.choice_acc = acc->first;
        sum.choice_acc_norm = row.choice_acc_norm = acc->second;
        acc_text += fmt::format(" | choices acc {:.4f}, acc_norm {:.4f}", acc->first, acc->second);
      }
      TERN_RETURN_IF_ERROR(log_.Write(row));
      if (!quiet_)
        bar.Print(
            fmt::format("step {:>6}: val loss {:.4f} (train {:.4f}){}", s.step, val, loss_ema, acc_text));
    }
    if (cfg_.sample_every > 0 && s.step % cfg_.sample_every == 0 && !last && !quiet_) {
      TERN_ASSIGN_OR_RETURN(auto samples, Samples(1, cfg_.sample_tokens));
      for (const auto& text : samples) bar.Print("sample: " + text);
    }
    TERN_RETURN_IF_ERROR(TuneInterval(s.step_s, &bar));
    TERN_RETURN_IF_ERROR(MaybeCheckpoint(s.step, last, val_now, &bar));
  }
  ckpt_->WaitIdle();  // the last save is published before the run reports success
  Status save_failure;
  TERN_RETURN_IF_ERROR(DrainCheckpointEvents(&bar, &save_failure));
  if (!save_failure.ok() && cfg_.ckpt.on_error == OnSaveError::kStop) {
    return save_failure.WithContext("the final checkpoint failed and ckpt.on_error=stop");
  }
  if (steps_here == 0) {  // resumed a finished run: nothing to train, still report where it stands
    TERN_ASSIGN_OR_RETURN(sum.val_loss, Evaluate());
    TERN_ASSIGN_OR_RETURN(sum.val_loss_mix, EvaluateMix());
  }
  if (!quiet_) bar.Finish();
  sum.steps = step_;
  sum.tokens = tokens_seen_;
  sum.train_s = train_seconds_;
  sum.tokens_per_s = tokens_seen_ / std::max(1e-9, train_seconds_);
  sum.mfu = flops_per_token_ * sum.tokens_per_s / (peak_gflops_ * 1e9);
  if (writer()) {
    TERN_ASSIGN_OR_RETURN(sum.samples, Samples(cfg_.num_samples, cfg_.sample_tokens));
  }
  sum.wall_s = Seconds(start);
  sum.cost_usd = cost_.CostUsd(sum.wall_s);
  if (writer()) TERN_RETURN_IF_ERROR(WriteRunFiles(sum));
  // Every rank ends once rank 0 has written the run's files (the launcher may end the job at the first exit).
  if (world() > 1) TERN_RETURN_IF_ERROR(comm_->Barrier().WithContext("finishing the run"));
  return sum;
}

Status Trainer::WriteRunFiles(const TrainSummary& s) {
  TERN_RETURN_IF_ERROR(WriteGptSafetensors(
      cfg_.run_dir + "/model.safetensors", cfg_.model, model_->ExportParameters(),
      {{"tern.tokenizer", tokenizer_->fingerprint()}, {"tern.step", std::to_string(step_)}}));
  if (model_->lora().enabled()) {  // the adapters alone too, for `tern serve BASE --lora NAME=RUN`
    std::vector<float> all = model_->GetParameters();
    LoraAdapter a{cfg_.model, model_->lora(), {}, BaseFingerprint(cfg_.model, all)};
    a.params.assign(all.begin() + static_cast<std::ptrdiff_t>(model_->num_base_params()), all.end());
    TERN_RETURN_IF_ERROR(WriteLoraAdapter(
        cfg_.run_dir + "/" + kAdapterFile, a,
        {{"tern.tokenizer", tokenizer_->fingerprint()}, {"tern.step", std::to_string(step_)}}));
  }
  const nlohmann::json summary = ToJson(EndRow(s));
  TERN_RETURN_IF_ERROR(log_.Write(summary));
  return WriteFileAtomic(cfg_.run_dir + "/summary.json", summary.dump(2) + "\n");
}

}  // namespace tern
