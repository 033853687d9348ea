// The server's counters, gauges and histograms, rendered in the Prometheus text format (version 0.0.4):
// names prefixed tern_, underscored, in base units (seconds, tokens, blocks); counters end in _total.
// Updated by the engine thread and the HTTP threads (atomics; histograms take a lock).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace tern {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double v);
  // Appends the _bucket (cumulative, le="+Inf" last), _sum and _count lines.
  void Render(const std::string& name, const std::string& help, std::string* out) const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; the last one is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct ServeMetrics {
  ServeMetrics();

  // engine counters
  std::atomic<uint64_t> prompt_tokens{0}, generation_tokens{0};
  std::atomic<uint64_t> prefill_tokens{0};           // prompt tokens computed (not found in the prefix cache)
  std::atomic<uint64_t> prefix_cache_hit_tokens{0};  // prompt tokens served from the prefix cache
  std::atomic<uint64_t> prefix_cache_queries{0}, prefix_cache_hits{0};  // full blocks looked up / found
  std::atomic<uint64_t> forward_steps{0};
  // Speculative decoding (speculative.h): drafts proposed (one per sequence and step), their tokens, and the
  // draft tokens the model confirmed. Acceptance rate = accepted / draft tokens.
  std::atomic<uint64_t> spec_drafts{0}, spec_draft_tokens{0}, spec_accepted_tokens{0};
  // Where the engine thread's time goes, per phase of a step (tern_engine_seconds_total{phase}): scheduling
  // (admission, batch building), the forward, sampling and logprobs, emitting (detokenizing, events).
  enum Phase { kSchedule, kForward, kSample, kEmit, kPhases };
  static const char* PhaseName(int phase);
  std::atomic<uint64_t> engine_ns[kPhases] = {};
  std::atomic<uint64_t> finished_stop{0}, finished_length{0}, finished_cancelled{0};
  std::atomic<uint64_t> preemptions{0};  // running sequences sent back to wait for a lower priority value
  // LoRA adapters read back into memory for a request (--max-loaded-loras), the time it took, and adapters
  // retired from memory to make room (serve/adapter_pager.h)
  std::atomic<uint64_t> lora_loads{0}, lora_load_ns{0}, lora_evictions{0};
  // engine gauges
  std::atomic<int64_t> queue_length{0}, running_sequences{0};
  std::atomic<int64_t> kv_blocks_used{0}, kv_blocks_free{0}, kv_blocks_cached{0}, kv_blocks_reserved{0};
  std::atomic<int64_t> lora_adapters{0};  // LoRA adapters in memory (`--lora`, and loaded at run time)
  std::atomic<int> ready{0};
  Histogram time_to_first_token, time_per_output_token, request_duration, batch_size, batch_tokens;

  // tern_model_info{model, n_layer, ..., weights, kv_dtype, device} 1: what is served (`tern diagnose
  // --serve` reads the shape to plan the load it saw). Set once the model is loaded.
  void SetModelInfo(std::map<std::string, std::string> labels);
  // HTTP responses by route and status code
  void CountRequest(const std::string& route, int status);
  std::string Render() const;

 private:
  mutable std::mutex requests_mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::map<std::string, std::string> model_info_;  // guarded by requests_mu_
};

}  // namespace tern
