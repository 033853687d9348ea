#include "cli/plan_config.h"

#include <cmath>

#include <fmt/format.h>

#include "data/tokenizer.h"
#include "plan/units.h"
#include "train/remote_data.h"
#include "train/train_config.h"

namespace tern::cli {

using namespace tern::plan;

Status ApplyTrainConfig(const std::string& config, const std::vector<std::string>& overrides,
                        const std::string& tokens, const std::optional<BenchProfile>& bench,
                        PlanRequest* req) {
  TrainConfig cfg;
  TERN_RETURN_IF_ERROR(LoadTrainConfigFile(config, &cfg).WithContext("--config"));
  for (const auto& kv : overrides) TERN_RETURN_IF_ERROR(ApplyOverride(kv, &cfg).WithContext("--set"));
  if (IsRemoteData(cfg.data_dir)) {  // s3://: each new instance fetches it; its prepare.json says how much
    auto info = ReadRemoteDataInfo(cfg.data_dir, DataMirrorOptionsFor(cfg).s3);
    if (!info.ok()) return info.status().WithContext("--config " + config);
    if (cfg.model.vocab_size == 0) cfg.model.vocab_size = info->vocab_size;
    req->fetch_data = true;
    if (!req->dataset_gb && info->shard_bytes > 0)
      req->dataset_gb = static_cast<double>(info->shard_bytes) / 1e9;
  }
  if (cfg.model.vocab_size == 0) {  // the trainer takes the tokenizer's: so does the plan, or the bench's
    auto tok = Tokenizer::Load(cfg.data_dir + "/tokenizer.model");
    cfg.model.vocab_size = tok.ok() ? tok->vocab_size() : bench ? bench->model.vocab_size : 4096;
  }
  TERN_RETURN_IF_ERROR(cfg.model.Validate().WithContext("--config " + config));
  TERN_RETURN_IF_ERROR(cfg.Validate().WithContext("--config " + config));
  WorkloadSpec& w = req->workload;
  w.cfg = cfg.model;
  w.model_label = config;
  w.seq = cfg.seq_len;
  w.micro_batch = cfg.batch_size;
  w.recompute = PlanRecompute(cfg.recompute);  // --recompute may override
  w.attention = cfg.attention;
  w.logits_chunk = cfg.logits_chunk;
  w.lora = cfg.lora;
  const double step_tokens = static_cast<double>(cfg.batch_size) * cfg.seq_len * cfg.grad_accum_steps();
  w.global_batch_tokens = step_tokens;
  if (tokens.empty()) {
    w.tokens = cfg.steps * step_tokens;
  } else {
    TERN_ASSIGN_OR_RETURN(w.tokens, ParseCount(tokens, "--tokens"));
    cfg.steps = static_cast<int>(std::ceil(w.tokens / step_tokens));
  }
  TrainRunSpec run;
  run.config_file = config;
  run.steps = cfg.steps;
  run.micro_batch = cfg.batch_size;
  run.seq = cfg.seq_len;
  run.grad_accum = cfg.grad_accum_steps();
  run.eval_every = cfg.eval_every;
  run.eval_batches = cfg.eval_batches;
  run.sample_every = cfg.sample_every;
  run.sample_tokens = cfg.sample_tokens;
  run.num_samples = cfg.num_samples;
  run.ckpt_every = cfg.ckpt.every;
  run.durable_every = cfg.ckpt.durable.empty() ? 0 : cfg.ckpt.durable_every;
  run.best_k = cfg.ckpt.best_k;
  run.ckpt_async = cfg.ckpt.async;
  run.probe_peak = cfg.peak_gflops <= 0;
  req->run = run;
  return Status::Ok();
}

Result<ConfigWork> WorkOnInstance(const Catalog& cat, const InstanceOffer& offer, const PlanRequest& base,
                                  const PlanDefaults& d) {
  if (!base.run) return Status::InvalidArgument("WorkOnInstance needs a training config (ApplyTrainConfig)");
  PlanRequest req = base;  // one instance of this offer, on-demand, unconstrained: the run's work only
  req.providers = {offer.provider};
  req.regions = {offer.region};
  req.instances = {offer.instance_type};
  req.gpus.clear();
  req.billing = {Billing::kOnDemand};
  req.max_gpus = offer.gpu_count;
  req.deadline_h.reset();
  req.budget_usd.reset();
  req.spot_traces.clear();
  TERN_ASSIGN_OR_RETURN(PlanResult plan, MakePlan(cat, req, d));
  for (const PlanRow& r : plan.rows) {
    if (cat.offers[r.offer].Key() != offer.Key() || r.nodes != 1 || !r.run) continue;
    ConfigWork w;
    w.work_s = r.run->total_s();
    w.state_bytes = plan.workload.checkpoint_bytes();
    w.mfu_source = r.step.mfu_source;
    w.overheads_source = r.run->source;
    w.runs_why = r.runs ? "" : r.runs_why;
    w.calibrated = w.mfu_source.rfind("calibrated", 0) == 0;
    const BenchProfile* bench = base.calibration ? &*base.calibration : nullptr;
    w.restart = RestartFor(bench, w.calibrated, plan.workload.spec().cfg, base.run->micro_batch,
                           plan.workload.seq(), base.run->probe_peak, plan.workload.checkpoint_bytes(), d);
    return w;
  }
  std::string why = "no row";
  for (const Exclusion& e : plan.excluded) {
    if (cat.offers[e.offer].Key() == offer.Key()) {
      why = e.category + ": " + e.reason;
      break;
    }
  }
  return Status::InvalidArgument(
      fmt::format("{} cannot run {} on one instance ({}); `tern plan --config {} "
                  "--show-excluded` lists why, pick another --instance",
                  offer.Key(), base.run->config_file, why, base.run->config_file));
}

}  // namespace tern::cli
