// The HTTP front of `tern serve` (cpp-httplib): a thin layer in the manner of llama.cpp's server. Handlers
// turn JSON into native structs at once (api.h), hand them to the engine and relay its events back, as one
// JSON response or as server-sent events. One wrapper at the route boundary turns every failure into an
// OpenAI error object with the right status code; internals never reach the client.
//
// Routes: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /v1/models/{id}, GET /health,
// GET /metrics, and with --allow-lora-updates POST /v1/load_lora_adapter and /v1/unload_lora_adapter. With an
// API key, every route but /health needs "Authorization: Bearer KEY" (compared in
// constant time, never logged; with several keys each has a project and limits: usage.h). The server
// listens before the model is loaded: /health answers 503 and the
// model routes 503 until SetEngine().
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "infer/engine.h"
#include "infer/metrics.h"
#include "serve/api.h"
#include "serve/usage.h"

namespace tern {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                    // 0 = any free port (tests)
  std::string api_key;                // one key (id and project "default"); empty and no api_keys = no auth
  std::vector<ApiKeyEntry> api_keys;  // --api-keys FILE: several keys, each with a project and limits
  double price_per_hour = 0;          // $ figures in /metrics and the usage file (0 = none)
  std::string usage_log, usage_file;  // usage.h
  double usage_file_period_s = 5;
  int http_threads = 64;            // each open stream holds one
  size_t max_body_bytes = 1 << 20;  // larger bodies get 413
  int io_timeout_s = 30;            // socket read/write timeouts; and the most a client may take to send a
                                    // request's headers, then its body (connection_deadlines.h)
  int request_timeout_s = 600;      // a request running longer is cancelled
  std::string model_name = "tern";
  std::vector<LoraModule> adapters;  // LoRA adapters at start (`--lora NAME=PATH`): the engine's 1, 2, ...
  bool log_requests = false;         // one line per request on stderr (method, path, status, seconds)
  // --allow-lora-updates: POST /v1/load_lora_adapter {"lora_name", "lora_path"} and /v1/unload_lora_adapter
  // {"lora_name"} (vLLM's routes) change the adapters while serving; with API keys only admin keys may.
  // lora_loader reads one (a LoRA run, its adapter file or checkpoint, models:/NAME@REF) and checks it
  // against the served weights; max_lora_adapters (> 0) caps how many are served at once.
  bool allow_lora_updates = false;
  std::function<Result<LoraAdapter>(const std::string& path)> lora_loader;
  int max_lora_adapters = 0;
  // A lora_path as the server keeps it (registry::PinModelUri: models:/NAME@production -> models:/NAME@3),
  // so that an adapter read back later (--max-loaded-loras) is the version first loaded, not wherever the
  // alias has moved since. Null: paths are kept as given.
  std::function<Result<std::string>(const std::string& path)> lora_pin;
  // > 0: at most this many adapters' weights in memory; `adapters` beyond the first max_loaded_loras are
  // served but read back when a request names one (adapter_pager.h). The engine holds the first ones.
  int max_loaded_loras = 0;
  std::string lora_root;  // non-empty: the route reads only models:/ URIs and paths inside it (CheckLoraPath)
};

class Server {
 public:
  Server(const ServerOptions& options, ServeMetrics* metrics);
  ~Server();

  // Binds host:port; false with the reason when the address is taken or invalid.
  Status Bind();
  int port() const;
  // The engine is ready: model routes start answering. ctx describes the served model.
  void SetEngine(Engine* engine, const ApiContext& ctx);
  // Serves until Stop() (from any thread).
  void Serve();
  void Stop();
  // Per key and project usage, busy and idle seconds (usage.h).
  UsageTracker& usage();
  // Graceful shutdown begins: from now on /health answers 503 {"status":"draining"} and new generation
  // requests 503 (code "server_shutting_down", Connection: close), so that a load balancer sends them to
  // another replica; requests already accepted run on (DrainServer waits for them).
  void StartDrain();
  bool draining() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// StartDrain, then waits until the engine has no request queued or running, `timeout_s` has passed, or
// interrupted() (polled every 50 ms; null = never) says to stop waiting. Returns the sequences still active
// then (0: every accepted request finished); the caller stops the engine, which cancels them.
int DrainServer(Server& server, const Engine& engine, double timeout_s,
                const std::function<bool()>& interrupted = nullptr);

}  // namespace tern
