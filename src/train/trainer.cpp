#include "train/trainer.h"

#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cmath>
#include <filesystem>

#include "backend/peak_probe.h"
#include "backend/registry.h"
#include "core/file_util.h"
#include "core/progress.h"
#include "model/safetensors.h"
#include "model/sampler.h"

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

Result<std::unique_ptr<Trainer>> Trainer::Create(const TrainConfig& config, bool quiet, TrainerEnv env) {
  std::unique_ptr<Trainer> t(new Trainer());
  t->cfg_ = config;
  t->quiet_ = quiet;
  t->env_ = std::move(env);
  TrainConfig& cfg = t->cfg_;

  const std::string tok_path = cfg.data_dir + "/tokenizer.model";
  TERN_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::Load(tok_path));
  t->tokenizer_ = std::make_unique<Tokenizer>(std::move(tok));
  if (cfg.model.vocab_size == 0) cfg.model.vocab_size = t->tokenizer_->vocab_size();
  if (cfg.model.vocab_size < t->tokenizer_->vocab_size()) {
    return Status::InvalidArgument(fmt::format("model.vocab_size ({}) is smaller than the tokenizer's ({}) in {}",
                                               cfg.model.vocab_size, t->tokenizer_->vocab_size(), tok_path));
  }
  TERN_RETURN_IF_ERROR(cfg.model.Validate());
  TERN_RETURN_IF_ERROR(cfg.Validate());

  TERN_ASSIGN_OR_RETURN(auto train_shards, FindShards(cfg.data_dir, "train"));
  TERN_ASSIGN_OR_RETURN(auto val_shards, FindShards(cfg.data_dir, "val"));
  TERN_ASSIGN_OR_RETURN(t->train_loader_, DataLoader::Open(train_shards, cfg.batch_size, cfg.seq_len, cfg.seed, true));
  TERN_ASSIGN_OR_RETURN(t->val_loader_, DataLoader::Open(val_shards, cfg.batch_size, cfg.seq_len, cfg.seed, false));

  TERN_ASSIGN_OR_RETURN(t->backend_, MakeBackend(cfg.device));
  const Compute compute = cfg.precision == "bf16" ? Compute::kBF16 : Compute::kF32;
  t->model_ = std::make_unique<Gpt>(t->backend_.get(), cfg.model, cfg.batch_size, cfg.seq_len, compute);
  // InitWeights waits until we know whether a checkpoint replaces the weights (OpenCheckpoints below):
  // initialising 124M parameters only to overwrite them is a second of the time to the first resumed step.

  t->schedule_ = {cfg.lr, cfg.min_lr_ratio, cfg.warmup_steps, cfg.steps, cfg.schedule == "cosine"};
  t->cost_.price_per_hour = cfg.price_per_hour;
  t->flops_per_token_ = GptFlopsPerToken(cfg.model, cfg.seq_len);
  t->peak_gflops_ = cfg.peak_gflops > 0 ? cfg.peak_gflops : MeasurePeakGflops(t->backend_.get(), compute, 0.5);

  TERN_RETURN_IF_ERROR(MakeDirs(cfg.run_dir));
  TERN_RETURN_IF_ERROR(WriteFileAtomic(cfg.run_dir + "/config.yaml", TrainConfigToYaml(cfg)));
  std::error_code ec;
  std::filesystem::copy_file(tok_path, cfg.run_dir + "/tokenizer.model",
                             std::filesystem::copy_options::overwrite_existing, ec);
  if (ec) return Status::IoError(fmt::format("copying {} into {}: {}", tok_path, cfg.run_dir, ec.message()));
  nlohmann::json resume_row;
  TERN_RETURN_IF_ERROR(t->OpenCheckpoints(&resume_row));
  if (t->resumed_from_ < 0) t->model_->InitWeights(cfg.seed);
  // A resumed run appends: the rows of the steps it repeats follow a "resume" row (the last row wins).
  const std::string metrics = cfg.run_dir + "/metrics.jsonl";
  if (t->resumed_from_ >= 0) TERN_RETURN_IF_ERROR(EndWithNewline(metrics));
  TERN_RETURN_IF_ERROR(t->log_.Open(metrics, /*append=*/t->resumed_from_ >= 0));
  GptMemory mem = GptMemoryEstimate(cfg.model, cfg.batch_size, cfg.seq_len, compute == Compute::kBF16);
  TERN_RETURN_IF_ERROR(t->log_.Write({{"event", "start"},
                                      {"model", cfg.model.ToString()},
                                      {"params", t->model_->num_params()},
                                      {"device", t->backend_->name()},
                                      {"threads", omp_get_max_threads()},
                                      {"precision", cfg.precision},
                                      {"batch_size", cfg.batch_size},
                                      {"seq_len", cfg.seq_len},
                                      {"grad_accum_steps", cfg.grad_accum_steps()},
                                      {"flops_per_token", t->flops_per_token_},
                                      {"peak_gflops", t->peak_gflops_},
                                      {"memory_bytes", mem.total()},
                                      {"tokenizer", t->tokenizer_->fingerprint()},
                                      {"price_per_hour", cfg.price_per_hour}}));
  if (!resume_row.is_null()) TERN_RETURN_IF_ERROR(t->log_.Write(resume_row));
  return t;
}

Result<StepStats> Trainer::Step() {
  auto start = std::chrono::steady_clock::now();
  const int accum = cfg_.grad_accum_steps();
  const int B = cfg_.batch_size, T = cfg_.seq_len;
  const float dloss = 1.0f / (static_cast<float>(B) * T * accum);
  StepStats s;
  model_->ZeroGrad();
  Batch batch;
  double loss_sum = 0;
  const LoaderPosition start_pos = train_loader_->position();
  for (int micro = 0; micro < accum; micro++) {
    if (micro > 0 && AbandonRequested()) {
      // Rewind the data so the emergency checkpoint resumes with this step's first micro-batch.
      TERN_RETURN_IF_ERROR(train_loader_->Restore(start_pos));
      s.abandoned = true;
      return s;
    }
    TERN_RETURN_IF_ERROR(train_loader_->Next(&batch));
    loss_sum += model_->Forward(batch.inputs.data(), batch.targets.data(), B, T, dloss);
    model_->Backward();
  }
  s.loss = loss_sum / accum;
  s.grad_norm = model_->GradNorm();
  if (!std::isfinite(s.loss) || !std::isfinite(s.grad_norm)) {
    return Status::Internal(fmt::format(
        "step {}: loss {} / gradient norm {} is not finite; lower train.lr or enable train.grad_clip", step_ + 1,
        s.loss, s.grad_norm));
  }
  float grad_scale = 1.0f;
  if (cfg_.grad_clip > 0 && s.grad_norm > cfg_.grad_clip) grad_scale = static_cast<float>(cfg_.grad_clip / s.grad_norm);
  s.lr = schedule_.At(step_);
  ckpt_->WaitForSnapshot();  // a save in flight must finish copying the weights before they change
  model_->AdamWStep(static_cast<float>(s.lr), cfg_.beta1, cfg_.beta2, cfg_.eps, cfg_.weight_decay, grad_scale,
                    step_ + 1);
  backend_->Synchronize();
  step_++;
  s.step = step_;
  s.step_s = Seconds(start);
  s.data_wait_s = train_loader_->TakeWaitSeconds();
  const double tokens = static_cast<double>(B) * T * accum;
  s.tokens_per_s = tokens / s.step_s;
  s.mfu = flops_per_token_ * s.tokens_per_s / (peak_gflops_ * 1e9);
  tokens_seen_ += static_cast<uint64_t>(tokens);
  train_seconds_ += s.step_s;
  return s;
}

Result<double> Trainer::Evaluate() {
  TERN_RETURN_IF_ERROR(val_loader_->Reset());
  Batch batch;
  double sum = 0;
  for (int i = 0; i < cfg_.eval_batches; i++) {
    TERN_RETURN_IF_ERROR(val_loader_->Next(&batch));
    sum += model_->Forward(batch.inputs.data(), batch.targets.data(), cfg_.batch_size, cfg_.seq_len);
  }
  return sum / cfg_.eval_batches;
}

std::vector<std::string> Trainer::Samples(int count, int tokens) {
  std::vector<std::string> out;
  std::vector<int32_t> prompt = tokenizer_->Encode(cfg_.sample_prompt);
  if (prompt.empty()) prompt.push_back(tokenizer_->eos_id());
  SamplingParams params{0.8f, 40, 1.0f};
  for (int i = 0; i < count; i++) {
    auto ids = GenerateTokens(*model_, prompt, tokens, params, cfg_.seed + 1000 + i, tokenizer_->eos_id(),
                              cfg_.seq_len);
    if (ids.front() == tokenizer_->eos_id()) ids.erase(ids.begin());
    if (!ids.empty() && ids.back() == tokenizer_->eos_id()) ids.pop_back();
    out.push_back(tokenizer_->Decode(ids));
  }
  return out;
}

Result<TrainSummary> Trainer::Run() {
  auto start = std::chrono::steady_clock::now();
  TrainSummary sum;
  sum.run_dir = cfg_.run_dir;
  sum.peak_gflops = peak_gflops_;
  const uint64_t tokens_per_step = static_cast<uint64_t>(cfg_.batch_size) * cfg_.seq_len * cfg_.grad_accum_steps();
  if (!quiet_) {
    std::fprintf(stderr,
                 "tern train: %s, %.2fM params, %s on %s (%d threads), B=%d T=%d x%d accum = %llu tokens/step, "
                 "%d steps\n  peak %.0f GFLOP/s (%s), %.1f MFLOP/token; run dir %s\n",
                 cfg_.model.ToString().c_str(), model_->num_params() / 1e6, cfg_.precision.c_str(),
                 backend_->name().c_str(), omp_get_max_threads(), cfg_.batch_size, cfg_.seq_len,
                 cfg_.grad_accum_steps(), static_cast<unsigned long long>(tokens_per_step), cfg_.steps, peak_gflops_,
                 cfg_.precision.c_str(), flops_per_token_ / 1e6, cfg_.run_dir.c_str());
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
    nlohmann::json row = {{"step", s.step},           {"loss", s.loss},
                          {"lr", s.lr},               {"grad_norm", s.grad_norm},
                          {"tokens", tokens_seen_},   {"tokens_per_s", s.tokens_per_s},
                          {"mfu", s.mfu},             {"step_ms", s.step_s * 1e3},
                          {"data_wait_ms", s.data_wait_s * 1e3}, {"precision", cfg_.precision},
                          {"elapsed_s", elapsed}};
    std::string cost_text;
    if (cost_.enabled()) {
      row["cost_usd"] = cost_.CostUsd(elapsed);
      row["usd_per_mtok"] = cost_.UsdPerMillionTokens(s.tokens_per_s);
      cost_text = fmt::format(" | ${:.4f} ({:.2f} $/Mtok)", cost_.CostUsd(elapsed), cost_.UsdPerMillionTokens(s.tokens_per_s));
    }
    TERN_RETURN_IF_ERROR(log_.Write(row));
    if (resumed_from_ >= 0 && !first_resumed_step_logged_) {
      first_resumed_step_logged_ = true;
      TERN_RETURN_IF_ERROR(log_.Write(
          {{"event", "resumed_first_step"}, {"step", s.step}, {"since_process_start_s", ProcessAgeSeconds()}}));
    }
    if (watcher_ && watcher_->notified()) {  // finish policy: this step is done; save it and stop
      TERN_RETURN_IF_ERROR(EmergencyCheckpoint(&sum, &bar));
      return sum;
    }
    if (!quiet_ && (s.step % cfg_.log_every == 0 || s.step == cfg_.steps)) {
      bar.Update(s.step, fmt::format("loss {:.4f} | lr {:.2e} | {} | MFU {:.1f}%{}", loss_ema, s.lr,
                                     ProgressBar::FormatAmount(s.tokens_per_s, "tok/s"), s.mfu * 100, cost_text));
    }
    bool last = s.step == cfg_.steps;
    std::optional<double> val_now;
    if ((cfg_.eval_every > 0 && s.step % cfg_.eval_every == 0) || last) {
      auto t0 = std::chrono::steady_clock::now();
      TERN_ASSIGN_OR_RETURN(double val, Evaluate());
      sum.val_loss = val;
      val_now = val;
      TERN_RETURN_IF_ERROR(log_.Write({{"step", s.step}, {"val_loss", val}, {"eval_ms", Seconds(t0) * 1e3}}));
      if (!quiet_) bar.Print(fmt::format("step {:>6}: val loss {:.4f} (train {:.4f})", s.step, val, loss_ema));
    }
    if (cfg_.sample_every > 0 && s.step % cfg_.sample_every == 0 && !last && !quiet_) {
      for (const auto& text : Samples(1, cfg_.sample_tokens)) bar.Print("sample: " + text);
    }
    TERN_RETURN_IF_ERROR(MaybeCheckpoint(s.step, last, val_now, &bar));
  }
  ckpt_->WaitIdle();  // the last save is published before the run reports success
  Status save_failure;
  TERN_RETURN_IF_ERROR(DrainCheckpointEvents(&bar, &save_failure));
  if (!save_failure.ok() && cfg_.ckpt.on_error == "stop") {
    return save_failure.WithContext("the final checkpoint failed and ckpt.on_error=stop");
  }
  if (steps_here == 0) {  // resumed a finished run: nothing to train, still report where it stands
    TERN_ASSIGN_OR_RETURN(sum.val_loss, Evaluate());
  }
  if (!quiet_) bar.Finish();
  sum.steps = step_;
  sum.tokens = tokens_seen_;
  sum.train_s = train_seconds_;
  sum.tokens_per_s = tokens_seen_ / std::max(1e-9, train_seconds_);
  sum.mfu = flops_per_token_ * sum.tokens_per_s / (peak_gflops_ * 1e9);
  sum.samples = Samples(cfg_.num_samples, cfg_.sample_tokens);
  sum.wall_s = Seconds(start);
  sum.cost_usd = cost_.CostUsd(sum.wall_s);
  TERN_RETURN_IF_ERROR(WriteRunFiles(sum));
  return sum;
}

Status Trainer::WriteRunFiles(const TrainSummary& s) {
  TERN_RETURN_IF_ERROR(WriteGptSafetensors(cfg_.run_dir + "/model.safetensors", cfg_.model, model_->GetParameters(),
                                           {{"tern.tokenizer", tokenizer_->fingerprint()},
                                            {"tern.step", std::to_string(step_)}}));
  nlohmann::json summary = {{"event", "end"},         {"steps", s.steps},
                            {"train_loss", s.train_loss}, {"val_loss", s.val_loss},
                            {"tokens", s.tokens},     {"wall_s", s.wall_s},
                            {"train_s", s.train_s},   {"tokens_per_s", s.tokens_per_s},
                            {"mfu", s.mfu},           {"peak_gflops", s.peak_gflops},
                            {"cost_usd", s.cost_usd}, {"samples", s.samples}};
  TERN_RETURN_IF_ERROR(log_.Write(summary));
  return WriteFileAtomic(cfg_.run_dir + "/summary.json", summary.dump(2) + "\n");
}

}  // namespace tern
