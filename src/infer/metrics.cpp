#include "infer/metrics.h"

#include <fmt/format.h>

namespace tern {
namespace {

std::string Number(double v) {
  return fmt::format("{}", v);
}

void Scalar(std::string* out, const std::string& name, const char* type, const std::string& help, double v) {
  *out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, Number(v));
}

std::vector<double> Exponential(double start, double factor, int n) {
  std::vector<double> b;
  for (int i = 0; i < n; i++, start *= factor) b.push_back(start);
  return b;
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double v) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) i++;
  counts_[i]++;
  sum_ += v;
  count_++;
}

void Histogram::Render(const std::string& name, const std::string& help, std::string* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  *out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); i++) {
    cumulative += counts_[i];
    *out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, Number(bounds_[i]), cumulative);
  }
  *out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name,
                      Number(sum_), name, count_);
}

const char* ServeMetrics::PhaseName(int phase) {
  static const char* const kNames[kPhases] = {"schedule", "forward", "sample", "emit"};
  return phase >= 0 && phase < kPhases ? kNames[phase] : "unknown";
}

ServeMetrics::ServeMetrics()
    : time_to_first_token(Exponential(0.001, 2, 16)),     // 1 ms .. 33 s
      time_per_output_token(Exponential(0.0005, 2, 14)),  // 0.5 ms .. 4 s
      request_duration(Exponential(0.01, 2, 14)),         // 10 ms .. 82 s
      batch_size({1, 2, 4, 8, 16, 32, 64, 128, 256}),
      batch_tokens({1, 4, 16, 64, 256, 1024, 4096}) {}

void ServeMetrics::SetModelInfo(std::map<std::string, std::string> labels) {
  std::lock_guard<std::mutex> lock(requests_mu_);
  model_info_ = std::move(labels);
}

void ServeMetrics::CountRequest(const std::string& route, int status) {
  std::lock_guard<std::mutex> lock(requests_mu_);
  requests_[{route, status}]++;
}

std::string ServeMetrics::Render() const {
  std::string out;
  out +=
      "# HELP tern_http_requests_total HTTP responses by route and status code.\n"
      "# TYPE tern_http_requests_total counter\n";
  {
    std::lock_guard<std::mutex> lock(requests_mu_);
    for (const auto& [key, n] : requests_)
      out +=
          fmt::format("tern_http_requests_total{{route=\"{}\",code=\"{}\"}} {}\n", key.first, key.second, n);
  }
  Scalar(&out, "tern_ready", "gauge", "1 once the model is loaded and requests are served.", ready);
  {
    std::lock_guard<std::mutex> lock(requests_mu_);
    if (!model_info_.empty()) {
      std::string labels;
      for (const auto& [k, v] : model_info_) {
        std::string escaped;
        for (char c : v)
          escaped += c == '\\' ? "\\\\" : c == '"' ? "\\\"" : c == '\n' ? "\\n" : std::string(1, c);
        labels += fmt::format("{}{}=\"{}\"", labels.empty() ? "" : ",", k, escaped);
      }
      out += fmt::format(
          "# HELP tern_model_info The served model: its shape and formats.\n# TYPE tern_model_info gauge\n"
          "tern_model_info{{{}}} 1\n",
          labels);
    }
  }
  Scalar(&out, "tern_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.", prompt_tokens);
  Scalar(&out, "tern_generation_tokens_total", "counter", "Tokens generated.", generation_tokens);
  Scalar(&out, "tern_prefill_tokens_total", "counter", "Prompt tokens run through the model (not cached).",
         prefill_tokens);
  Scalar(&out, "tern_prefix_cache_hit_tokens_total", "counter",
         "Prompt tokens whose keys and values came from the prefix cache (prefill saved).",
         prefix_cache_hit_tokens);
  Scalar(&out, "tern_prefix_cache_queries_total", "counter",
         "Full prompt blocks looked up in the prefix cache.", prefix_cache_queries);
  Scalar(&out, "tern_prefix_cache_hits_total", "counter", "Full prompt blocks found in the prefix cache.",
         prefix_cache_hits);
  Scalar(&out, "tern_forward_steps_total", "counter", "Batched forward passes run by the engine.",
         forward_steps);
  Scalar(&out, "tern_spec_decode_drafts_total", "counter",
         "Speculative drafts proposed by prompt lookup (one per sequence and step).", spec_drafts);
  Scalar(&out, "tern_spec_decode_draft_tokens_total", "counter", "Draft tokens verified by the model.",
         spec_draft_tokens);
  Scalar(&out, "tern_spec_decode_accepted_tokens_total", "counter",
         "Draft tokens the model confirmed (each one a forward step saved).", spec_accepted_tokens);
  out +=
      "# HELP tern_engine_seconds_total Engine thread time by phase of its steps (schedule, forward, sample, "
      "emit).\n"
      "# TYPE tern_engine_seconds_total counter\n";
  for (int p = 0; p < kPhases; p++)
    out += fmt::format("tern_engine_seconds_total{{phase=\"{}\"}} {}\n", PhaseName(p),
                       Number(engine_ns[p] * 1e-9));
  out +=
      "# HELP tern_requests_finished_total Generations ended, by reason.\n"
      "# TYPE tern_requests_finished_total counter\n";
  out += fmt::format("tern_requests_finished_total{{reason=\"stop\"}} {}\n", finished_stop.load());
  out += fmt::format("tern_requests_finished_total{{reason=\"length\"}} {}\n", finished_length.load());
  out += fmt::format("tern_requests_finished_total{{reason=\"cancelled\"}} {}\n", finished_cancelled.load());
  Scalar(
      &out, "tern_preemptions_total", "counter",
      "Running sequences sent back to wait (and be computed again) for a request of a lower priority value.",
      preemptions);
  Scalar(&out, "tern_queue_length", "gauge", "Sequences waiting for admission (a request of n choices is n).",
         queue_length);
  Scalar(&out, "tern_running_sequences", "gauge", "Sequences being prefilled or decoded.", running_sequences);
  Scalar(&out, "tern_kv_cache_blocks_used", "gauge", "KV-cache blocks held by sequences.", kv_blocks_used);
  Scalar(&out, "tern_kv_cache_blocks_free", "gauge", "KV-cache blocks holding nothing.", kv_blocks_free);
  Scalar(&out, "tern_kv_cache_blocks_cached", "gauge",
         "KV-cache blocks held by no sequence that keep a reusable prompt prefix (evicted when needed).",
         kv_blocks_cached);
  Scalar(&out, "tern_kv_cache_blocks_reserved", "gauge",
         "KV-cache blocks promised to running sequences for their remaining tokens.", kv_blocks_reserved);
  Scalar(&out, "tern_lora_adapters", "gauge",
         "LoRA adapters in memory beside the model (--lora, and loaded or unloaded at run time; with "
         "--max-loaded-loras the others served are read back on demand).",
         lora_adapters);
  Scalar(&out, "tern_lora_loads_total", "counter",
         "LoRA adapters read back into memory for a request that named one (--max-loaded-loras).",
         lora_loads);
  out +=
      "# HELP tern_lora_load_seconds_total Time spent reading LoRA adapters back into memory.\n"
      "# TYPE tern_lora_load_seconds_total counter\n";
  out += fmt::format("tern_lora_load_seconds_total {}\n", Number(lora_load_ns * 1e-9));
  Scalar(&out, "tern_lora_evictions_total", "counter",
         "LoRA adapters retired from memory to make room for another (--max-loaded-loras).", lora_evictions);
  time_to_first_token.Render("tern_time_to_first_token_seconds",
                             "From request arrival to its first generated token.", &out);
  time_per_output_token.Render("tern_time_per_output_token_seconds",
                               "Between consecutive generated tokens of one request.", &out);
  request_duration.Render("tern_request_duration_seconds", "From request arrival to its last token.", &out);
  batch_size.Render("tern_batch_size", "Sequences per forward pass.", &out);
  batch_tokens.Render("tern_batch_tokens", "Tokens (rows) per forward pass.", &out);
  return out;
}

}  // namespace tern
