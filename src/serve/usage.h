// Serving usage and cost per project (docs/serving.md, "Usage and cost per project"): the API keys of
// `--api-keys FILE` (each with a key id, a project and optional per-minute limits), the rate limiter that
// answers 429, the per-key counters of /metrics, the JSON-lines usage log, the busy and idle seconds of the
// server and the JSON usage file that `tern report --ledger --serving FILE` reads.
//
// Secrets: a key's value is only ever compared (in constant time, against every key); what is counted,
// logged, rendered or written names the key by its id.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "serve/api_keys.h"

namespace tern {

// What one request used, as the usage log writes it.
struct UsageRecord {
  double unix_s = 0;
  int key = -1;  // index into the keys, -1 = no authentication
  std::string route;
  int status = 0;
  int64_t prompt_tokens = 0, generation_tokens = 0;
  double latency_s = 0;
  std::string model;  // the served model or LoRA adapter the request named ("" = the base model)
};

struct UsageOptions {
  std::vector<ApiKeyEntry> keys;   // empty: no authentication, all usage under key "none", project "default"
  double price_per_hour = 0;       // 0: no $ figures
  std::string usage_log;           // JSON lines, one per generation request ("" = none)
  std::string usage_file;          // the JSON summary, rewritten atomically ("" = none)
  double usage_file_period_s = 5;  // ... this often, and when the tracker is destroyed
  std::string model;
  std::function<double()> clock;  // seconds, monotonic; default steady_clock (tests inject one)
};

class UsageTracker {
 public:
  explicit UsageTracker(UsageOptions options);
  ~UsageTracker();

  bool auth_required() const { return !opt_.keys.empty(); }
  // The index of the key `given` is, or -1. Compares against every key, each in constant time.
  int Authenticate(const std::string& given) const;
  // Whether key (Authenticate's index) may load and unload LoRA adapters; with no keys, anyone may.
  bool IsAdmin(int key) const;
  const std::string& KeyId(int key) const;  // "none" without keys
  // The priority a key's request runs at: what it asked for, but not below (sooner than) its key's floor.
  int Priority(int key, int requested) const;

  // Whether `key` may start a request now; when not, the seconds to wait (>= 1) and which limit
  // ("requests" or "tokens"). Counts an admitted request against its requests/min bucket.
  struct Refusal {
    int retry_after_s = 1;
    std::string limit, message;
  };
  std::optional<Refusal> Admit(int key);

  // A generation starts / ends (busy: at least one in flight).
  void Begin();
  void End();
  // A generation request was answered (any status): counted, charged to the tokens/min bucket, logged.
  void Record(const UsageRecord& r);

  double busy_s() const;
  double idle_s() const;  // reserved (since start) - busy
  // Prometheus families, appended to /metrics.
  std::string RenderMetrics() const;
  // The usage file's content; WriteUsageFile publishes it (temp file + rename).
  nlohmann::json UsageJson() const;
  [[nodiscard]] Status WriteUsageFile() const;

 private:
  struct Bucket {
    double level = 0, last = 0;  // tokens available, when last refilled
  };
  struct KeyUsage {
    uint64_t requests = 0, prompt_tokens = 0, generation_tokens = 0, limited_requests = 0, limited_tokens = 0;
    Bucket rpm, tpm;
  };
  void Refill(Bucket* b, double per_min, double now) const;
  const std::string& Project(int key) const;
  KeyUsage& Slot(int key);

  UsageOptions opt_;
  double start_ = 0, start_unix_ = 0;
  mutable std::mutex mu_;
  std::vector<KeyUsage> usage_;  // per key; the last slot is "no key"
  struct ModelUsage {
    uint64_t requests = 0, prompt_tokens = 0, generation_tokens = 0;
  };
  std::map<std::string, ModelUsage> by_model_;  // per served model and LoRA adapter
  int in_flight_ = 0;
  double busy_acc_ = 0, busy_since_ = 0;
  FILE* log_ = nullptr;
  std::thread writer_;  // rewrites the usage file
  std::condition_variable stop_cv_;
  bool stop_ = false;
};

}  // namespace tern
