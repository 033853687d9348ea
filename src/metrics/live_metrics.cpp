#include "metrics/live_metrics.h"

#include <cmath>
#include <utility>
#include <vector>

namespace tern {
namespace {

// Prometheus' float syntax: the shortest text that reads back as the same double; +Inf, -Inf, NaN.
std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

// A label value: backslash, double quote and newline escaped.
std::string LabelValue(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

class Exposition {
 public:
  void Family(const char* name, const char* type, const char* help, double value,
              const std::string& labels = "") {
    text_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n{}{} {}\n", name, help, name, type, name,
                         labels.empty() ? "" : "{" + labels + "}", Number(value));
  }
  // One family with a sample per label set (labels as `key="value"`, escaped by the caller).
  void Samples(const char* name, const char* type, const char* help,
               const std::vector<std::pair<std::string, double>>& samples) {
    text_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    for (const auto& [labels, value] : samples)
      text_ += fmt::format("{}{{{}}} {}\n", name, labels, Number(value));
  }
  void Gauge(const char* name, const char* help, double value) { Family(name, "gauge", help, value); }
  void Counter(const char* name, const char* help, double value) { Family(name, "counter", help, value); }
  std::string Take() { return std::move(text_); }

 private:
  std::string text_;
};

}  // namespace

std::string PrometheusText(const LiveSnapshot& s) {
  Exposition e;
  if (s.start) {
    const StartRecord& r = *s.start;
    e.Family("tern_run_info", "gauge", "The run's model, precision, device and communicator (value 1).", 1,
             fmt::format("model=\"{}\",precision=\"{}\",device=\"{}\",dist=\"{}\"", LabelValue(r.model),
                         LabelValue(r.precision), LabelValue(r.device), LabelValue(r.dist)));
    e.Gauge("tern_world_size", "Data-parallel ranks of the run.", r.world);
    e.Gauge("tern_params", "Model parameters.", static_cast<double>(r.params));
    e.Gauge("tern_peak_flops", "Peak FLOP/s the MFU is measured against (matmul probe or run.peak_gflops).",
            r.peak_gflops * 1e9);
    if (r.price_per_hour > 0)
      e.Gauge("tern_price_usd_per_hour", "Price of the machine in USD per hour.", r.price_per_hour);
  }
  if (s.step) {
    const StepRecord& r = *s.step;
    e.Gauge("tern_step", "Last optimizer step completed (1-based).", r.step);
    e.Counter("tern_tokens_total", "Tokens trained on, cumulative over the run (resumes included).",
              static_cast<double>(r.tokens));
    e.Gauge("tern_train_loss", "Training loss of the last step, in nats.", r.loss);
    e.Gauge("tern_learning_rate", "Learning rate of the last step.", r.lr);
    e.Gauge("tern_grad_norm", "Global gradient L2 norm of the last step before clipping (NaN: skipped).",
            r.grad_norm);
    e.Gauge("tern_tokens_per_second", "Throughput of the last step (its tokens over its wall time).",
            r.tokens_per_s);
    e.Gauge("tern_mfu_ratio", "Model FLOPs utilisation of the last step (0 to 1).", r.mfu);
    e.Gauge("tern_step_duration_seconds", "Wall time of the last step.", r.step_ms / 1e3);
    e.Gauge("tern_step_data_wait_seconds", "Time the last step waited for the data loader.",
            r.data_wait_ms / 1e3);
    e.Gauge("tern_step_communication_seconds", "Exposed communication time of the last step.",
            r.comm_ms / 1e3);
    if (r.elapsed_s)
      e.Gauge("tern_elapsed_seconds", "Seconds since the trainer's clock started (evaluation included).",
              *r.elapsed_s);
    e.Counter("tern_step_seconds_total", "Wall time of the steps this process ran.", s.step_s_total);
    e.Counter("tern_data_wait_seconds_total", "Time this process's steps waited for the data loader.",
              s.data_wait_s_total);
    e.Counter("tern_communication_seconds_total", "Exposed communication time of this process's steps.",
              s.comm_s_total);
    if (r.cost_usd)
      e.Counter("tern_cost_usd_total", "USD spent so far (the row's cost_usd; under tern run, the job's).",
                *r.cost_usd);
    if (r.usd_per_mtok)
      e.Gauge("tern_cost_usd_per_million_tokens", "USD per million tokens at the last step's speed.",
              *r.usd_per_mtok);
    if (r.loss_scale) {
      e.Gauge("tern_loss_scale", "fp16 loss scale of the last step.", *r.loss_scale);
      e.Counter("tern_skipped_steps_total", "fp16 steps whose update was skipped (overflow), this process.",
                static_cast<double>(s.skipped_steps_total));
    }
    if (r.gpu) {
      e.Gauge("tern_gpu_utilization_ratio", "GPU utilisation at the end of the last step (NVML, 0 to 1).",
              r.gpu->util_pct / 100);
      e.Gauge("tern_gpu_memory_used_bytes", "GPU memory in use, all processes (NVML).",
              r.gpu->mem_used_gb * 1e9);
      e.Gauge("tern_gpu_power_watts", "GPU board power at the end of the last step (NVML).", r.gpu->power_w);
      e.Gauge("tern_energy_per_token_joules", "GPU energy of the last step per token.",
              r.gpu->joules_per_token);
    }
  }
  if (s.eval) {
    e.Gauge("tern_val_loss", "Validation loss of the last evaluation, in nats.", s.eval->val_loss);
    e.Gauge("tern_val_step", "Step of the last evaluation.", s.eval->step);
    if (s.eval->choice_acc)
      e.Gauge("tern_val_choice_acc",
              "Accuracy on the eval.choices multiple-choice set at the last evaluation.",
              *s.eval->choice_acc);
    if (!s.eval->val_loss_mix.empty()) {  // data.mix: each mixed-in dataset's own validation loss
      std::vector<std::pair<std::string, double>> samples;
      for (const auto& [dir, loss] : s.eval->val_loss_mix)
        samples.emplace_back(fmt::format("dataset=\"{}\"", LabelValue(dir)), loss);
      e.Samples("tern_val_loss_dataset", "gauge",
                "Validation loss of each data.mix dataset at the last evaluation, in nats (data.dir's is "
                "tern_val_loss).",
                samples);
    }
  }
  e.Counter("tern_checkpoint_stall_seconds_total",
            "Time training stood still for checkpoint saves (stall + wait, and an emergency save).",
            s.checkpoint_stall_s_total);
  e.Counter("tern_checkpoints_total", "Checkpoints saved by this process.",
            static_cast<double>(s.checkpoints_total));
  return e.Take();
}

void LiveRunState::Observe(const nlohmann::json& row) {
  auto parsed = ParseRunRow(row, "live metrics row");
  if (parsed.ok()) Observe(parsed->record);
}

void LiveRunState::Observe(const RunRecord& record) {
  std::lock_guard<std::mutex> lock(mu_);
  if (const auto* start = std::get_if<StartRecord>(&record)) {
    s_.start = *start;
  } else if (const auto* step = std::get_if<StepRecord>(&record)) {
    s_.step = *step;
    s_.step_s_total += step->step_ms / 1e3;
    s_.data_wait_s_total += step->data_wait_ms / 1e3;
    s_.comm_s_total += step->comm_ms / 1e3;
    if (step->skipped) s_.skipped_steps_total++;
  } else if (const auto* eval = std::get_if<EvalRecord>(&record)) {
    s_.eval = *eval;
  } else if (const auto* event = std::get_if<EventRecord>(&record)) {
    if (event->event == "checkpoint") {
      s_.checkpoints_total++;
      s_.checkpoint_stall_s_total += (event->Number("stall_ms") + event->Number("wait_ms")) / 1e3;
    } else if (event->event == "preempted") {
      s_.checkpoint_stall_s_total += event->Number("save_s");
    }
  }
}

LiveSnapshot LiveRunState::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return s_;
}

}  // namespace tern
