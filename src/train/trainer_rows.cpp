// The trainer's rows of metrics.jsonl and summary.json, as typed records (metrics/run_record.h), and the live
// metrics server that serves the same rows (metrics/live_metrics.h).
#include <omp.h>

#include "train/trainer.h"

namespace tern {

StartRecord Trainer::StartRow() const {
  StartRecord r;
  r.model = cfg_.model.ToString();
  r.params = static_cast<int64_t>(model_->num_params());
  r.device = setup_.backend->name();
  r.threads = omp_get_max_threads();
  r.precision = PrecisionName(cfg_.precision);
  r.batch_size = cfg_.batch_size;
  r.seq_len = cfg_.seq_len;
  r.grad_accum_steps = cfg_.grad_accum_steps();
  r.recompute = RecomputeName(cfg_.recompute);
  r.flops_per_token = flops_per_token_;
  r.peak_gflops = peak_gflops_;
  r.memory_bytes = static_cast<int64_t>(model_->memory().total());  // the backend's scratch comes on top
  r.tokenizer = tokenizer_->fingerprint();
  r.price_per_hour = cfg_.price_per_hour;
  r.world = world();
  r.dist = comm_->name();
  r.zero = world() > 1 ? cfg_.dist.zero : 0;
  if (gpu_) r.gpu_metrics = gpu_->status();
  if (!init_from_.empty()) r.init_from = init_from_;
  if (!local_data_.empty()) {
    r.data_fetch_s = data_fetch_s_;
    r.data_fetch_bytes = static_cast<int64_t>(data_fetch_bytes_);
  }
  if (setup_.compute == Compute::kF16) r.loss_scale = scaler_.scale();
  return r;
}

StepRecord Trainer::StepRow(const StepStats& s, double elapsed_s) const {
  StepRecord r;
  r.step = s.step;
  r.loss = s.loss;
  r.lr = s.lr;
  r.grad_norm = s.grad_norm;
  r.tokens = tokens_seen_;
  r.tokens_per_s = s.tokens_per_s;
  r.mfu = s.mfu;
  r.step_ms = s.step_s * 1e3;
  r.data_wait_ms = s.data_wait_s * 1e3;
  r.comm_ms = s.comm_s * 1e3;
  r.precision = PrecisionName(cfg_.precision);
  r.elapsed_s = elapsed_s;
  if (world() > 1)
    r.ranks = RankSpreadRecord{s.step_s_max * 1e3, s.step_s_min * 1e3, s.data_wait_s_max * 1e3,
                               s.data_wait_s_min * 1e3};
  if (setup_.compute == Compute::kF16) {
    r.loss_scale = s.loss_scale;
    r.skipped = s.skipped;
  }
  if (s.gpu.ok) r.gpu = GpuRecord{s.gpu.util_pct, s.gpu.mem_used_gb, s.gpu.power_w, s.gpu.joules_per_token};
  if (cost_.enabled()) {
    r.cost_usd = cost_.CostUsd(elapsed_s);
    r.usd_per_mtok = cost_.UsdPerMillionTokens(s.tokens_per_s);
  }
  return r;
}

EndRecord Trainer::EndRow(const TrainSummary& s) const {
  EndRecord r;
  r.steps = s.steps;
  r.train_loss = s.train_loss;
  r.val_loss = s.val_loss;
  r.tokens = s.tokens;
  r.wall_s = s.wall_s;
  r.train_s = s.train_s;
  r.tokens_per_s = s.tokens_per_s;
  r.mfu = s.mfu;
  r.peak_gflops = s.peak_gflops;
  r.cost_usd = s.cost_usd;
  r.samples = s.samples;
  r.choice_acc = s.choice_acc;
  r.choice_acc_norm = s.choice_acc_norm;
  r.val_loss_mix = s.val_loss_mix;
  if (setup_.compute == Compute::kF16) {
    r.loss_scale = scaler_.scale();
    r.skipped_steps = scaler_.state().skipped_steps;
  }
  return r;
}

Status Trainer::StartMetricsServer() {
  if (cfg_.metrics_port == 0 || !writer()) return Status::Ok();  // off, or not rank 0
  live_ = std::make_shared<LiveRunState>();
  TERN_ASSIGN_OR_RETURN(metrics_server_, MetricsServer::Start(cfg_.metrics_bind, cfg_.metrics_port,
                                                              [live = live_] { return live->Text(); }));
  log_.SetObserver([live = live_](const nlohmann::json& row) { live->Observe(row); });
  if (!quiet_) {
    std::fprintf(stderr, "tern train: live metrics at http://%s:%d/metrics\n", cfg_.metrics_bind.c_str(),
                 metrics_server_->port());
  }
  return Status::Ok();
}

}  // namespace tern
