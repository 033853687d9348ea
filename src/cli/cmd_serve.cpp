// tern serve RUN_DIR|CHECKPOINT: the OpenAI-compatible inference server (docs/serving.md).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <thread>
#include <vector>

#include "backend/registry.h"
#include "ckpt/preemption.h"
#include "cli/command.h"
#include "cli/speculative_flags.h"
#include "infer/adapter.h"
#include "infer/setup.h"
#include "infer/weights.h"
#include "registry/model_uri.h"
#include "serve/server.h"

namespace tern::cli {
namespace {

struct ServeCliOptions {
  std::string model_path, host = "127.0.0.1", api_key, api_key_file, weights = "fp32", quantize,
                          device = "cpu", kv_dtype = "auto";
  std::string model_name, tokenizer;
  std::string api_keys_file, usage_log, usage_file;  // usage and cost per project (serve/usage.h)
  std::vector<std::string> lora;                     // LoRA adapters served beside the model: NAME=PATH
  int port = 8080, max_batch = 32, max_batch_tokens = 256, max_queue = 64, max_seq_len = 0, threads = 0;
  int http_threads = 0, max_body_kb = 1024, timeout_s = 600;
  double kv_cache_mb = 1024, price_per_hour = 0;
  bool log_requests = false;
  bool allow_lora_updates = false;  // POST /v1/load_lora_adapter, /v1/unload_lora_adapter
  int max_lora_adapters = 0;
  int max_loaded_loras = 0;     // > 0: adapters in memory at once; the rest read back on demand
  double drain_timeout_s = 30;  // on SIGTERM/SIGINT or a spot notice: let accepted requests finish
  std::string notice_url, notice_kind = "aws";
  double notice_poll_s = 5;
  SpeculativeOptions speculative;
  bool no_priority_preemption = false;
  std::string lora_root;
};

// The key from --api-key-file (first line, surrounding whitespace removed), --api-key or $TERN_API_KEY.
Result<std::string> ApiKey(const ServeCliOptions& o) {
  std::string key = o.api_key;
  if (!o.api_key_file.empty()) {
    std::ifstream in(o.api_key_file);
    if (!in || !std::getline(in, key))
      return Status::NotFound("cannot read --api-key-file " + o.api_key_file);
  } else if (key.empty() && o.api_keys_file.empty() && std::getenv("TERN_API_KEY")) {
    key = std::getenv("TERN_API_KEY");
  }
  while (!key.empty() && std::isspace(static_cast<unsigned char>(key.back()))) key.pop_back();
  while (!key.empty() && std::isspace(static_cast<unsigned char>(key.front()))) key.erase(0, 1);
  if ((!o.api_key_file.empty() || !o.api_key.empty()) && key.empty())
    return Status::InvalidArgument("the API key is empty");
  return key;
}

int Fail(const Status& st) {
  std::fprintf(stderr, "tern serve: %s\n", st.message().c_str());
  return 1;
}

// Reads one LoRA adapter (a LoRA run, its adapter file or checkpoint, models:/NAME@REF) and checks it against
// the served weights: the very base it was trained on. For --lora at start and POST /v1/load_lora_adapter.
std::function<Result<LoraAdapter>(const std::string&)> AdapterLoader(const GptConfig& cfg,
                                                                     const std::string& base_fingerprint,
                                                                     const std::string& model_path) {
  return [=](const std::string& path) -> Result<LoraAdapter> {
    TERN_ASSIGN_OR_RETURN(std::string local, registry::ResolveModelUri(path));  // models:/NAME@REF
    TERN_ASSIGN_OR_RETURN(LoraAdapter a, LoadLoraAdapter(local));
    TERN_RETURN_IF_ERROR(CheckAdapterBase(a, path, cfg, base_fingerprint, model_path));
    return a;
  };
}

// The adapters of --lora, their names distinct and not the base model's. Each is read and checked; with
// --max-loaded-loras N only the first N are kept (the others are read back when a request names one).
Result<std::vector<LoraAdapter>> LoadAdapters(
    const ServeCliOptions& o, const std::string& model_name,
    const std::function<Result<LoraAdapter>(const std::string&)>& load, std::vector<LoraModule>* modules) {
  std::vector<LoraAdapter> adapters;
  for (const std::string& arg : o.lora) {
    TERN_ASSIGN_OR_RETURN(LoraModule m, ParseLoraModule(arg));
    // models:/NAME@production -> models:/NAME@3: a read-back (--max-loaded-loras) gets the same version.
    auto pinned = registry::PinModelUri(m.path);
    if (!pinned.ok()) return pinned.status().WithContext("--lora " + arg);
    m.path = *pinned;
    const bool taken = std::any_of(modules->begin(), modules->end(),
                                   [&](const LoraModule& other) { return other.name == m.name; });
    if (m.name == model_name || taken)
      return Status::InvalidArgument(fmt::format(
          "--lora {}: the name '{}' is taken (the model's, or another adapter's); name it: --lora NAME={}",
          arg, m.name, m.path));
    auto loaded = load(m.path);
    if (!loaded.ok()) return loaded.status().WithContext("--lora " + arg);
    modules->push_back(m);
    if (o.max_loaded_loras == 0 || static_cast<int>(adapters.size()) < o.max_loaded_loras)
      adapters.push_back(std::move(loaded).value());
  }
  return adapters;
}

// How long idle OpenMP workers spin before they sleep. libgomp's default (300k spins, ~1 ms) lets them hold
// the cores that the engine's serial work (scheduling, sampling, events), the HTTP threads and anything else
// on the machine need: on a shared 2-core machine --threads 2 decoded 5-8x slower. Sleeping at once
// (OMP_WAIT_POLICY=passive) costs a futex wake-up per parallel region instead, which doubled the decode
// step of small models. A short spin covers the gap between the back-to-back ops of one forward and sleeps
// between steps (docs/serving-speed.md, Measured). libgomp reads these once, when it loads, so the server
// re-executes itself with GOMP_SPINCOUNT set unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is (set one to
// override).
constexpr const char* kServeSpinCount = "3000";
void PreferShortOpenMpSpinning() {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t start = 0; start < all.size();) {
    const size_t end = all.find('\0', start);
    args.push_back(all.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (args.empty()) return;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  setenv("GOMP_SPINCOUNT", kServeSpinCount, 1);
  execv("/proc/self/exe", argv.data());
  // exec failed (no /proc?): serve anyway, with spinning workers
}

int RunServe(const ServeCliOptions& o) {
  PreferShortOpenMpSpinning();
  auto key = ApiKey(o);
  if (!key.ok()) return Fail(key.status());
  auto quantize = o.quantize.empty() ? ParseWeights(o.weights) : ParseQuantize(o.quantize);
  if (!quantize.ok()) return Fail(quantize.status());
  auto kv_dtype = ParseKvDtype(o.kv_dtype, *quantize);
  if (!kv_dtype.ok()) return Fail(kv_dtype.status());
  // SIGINT/SIGTERM are taken by sigwait below; blocked before any thread starts so that all inherit it.
  // A shell starts background jobs with SIGINT ignored, and an ignored signal is never delivered, not even
  // to sigwait: restore the default so that `kill -INT` stops a backgrounded server too.
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // Listen first: /health answers 503 while the weights load.
  ServeMetrics metrics;
  ServerOptions so;
  so.host = o.host;
  so.port = o.port;
  so.api_key = *key;
  if (!o.api_keys_file.empty()) {
    auto keys = LoadApiKeys(o.api_keys_file);
    if (!keys.ok()) return Fail(keys.status());
    so.api_keys = std::move(*keys);
  }
  so.price_per_hour = o.price_per_hour;
  so.usage_log = o.usage_log;
  so.usage_file = o.usage_file;
  // Every running or queued request holds an HTTP thread; with fewer threads than that, a burst of clients
  // would wait unseen in the accept queue instead of getting 429 when the queue is full.
  so.http_threads = o.http_threads > 0 ? o.http_threads : o.max_batch + o.max_queue + 16;
  so.max_body_bytes = static_cast<size_t>(o.max_body_kb) * 1024;
  so.request_timeout_s = o.timeout_s;
  so.log_requests = o.log_requests;
  auto model_path = registry::ResolveModelUri(o.model_path);  // models:/NAME@ALIAS -> a local directory
  if (!model_path.ok()) return Fail(model_path.status());
  auto weights = LoadModelWeights(*model_path, o.tokenizer);  // cheap to fail early on a wrong path
  if (!weights.ok()) return Fail(weights.status());
  so.model_name = o.model_name.empty() ? weights->name : o.model_name;
  so.lora_loader =
      AdapterLoader(weights->config, BaseFingerprint(weights->config, weights->params), o.model_path);
  so.allow_lora_updates = o.allow_lora_updates;
  so.max_lora_adapters = o.max_lora_adapters;
  so.max_loaded_loras = o.max_loaded_loras;
  so.lora_pin = registry::PinModelUri;
  so.lora_root = o.lora_root;
  if (o.max_lora_adapters > 0 && static_cast<int>(o.lora.size()) > o.max_lora_adapters)
    return Fail(Status::InvalidArgument(fmt::format("{} --lora adapters are more than --max-lora-adapters {}",
                                                    o.lora.size(), o.max_lora_adapters)));
  auto adapters = LoadAdapters(o, so.model_name, so.lora_loader, &so.adapters);
  if (!adapters.ok()) return Fail(adapters.status());
  Server server(so, &metrics);
  if (Status st = server.Bind(); !st.ok()) return Fail(st);
  std::thread http([&] { server.Serve(); });
  std::fprintf(stderr,
               "tern serve: listening on http://%s:%d (loading the model; /health is 503 until ready)\n",
               o.host.c_str(), server.port());

  auto fail_running = [&](const Status& st) {
    server.Stop();
    http.join();
    return Fail(st);
  };
  auto tok = Tokenizer::Load(weights->tokenizer_path);
  if (!tok.ok()) return fail_running(tok.status());
  auto backend = MakeBackend(o.device);
  if (!backend.ok()) return fail_running(backend.status());
  EngineSetup setup;
  setup.quantize = *quantize;
  setup.kv_dtype = *kv_dtype;
  setup.kv_cache_mb = o.kv_cache_mb;
  setup.engine.max_batch = o.max_batch;
  setup.engine.max_batch_tokens = std::max(o.max_batch_tokens, o.max_batch);
  setup.engine.max_queue = o.max_queue;
  setup.engine.max_seq_len = o.max_seq_len;
  setup.engine.threads = o.threads;
  setup.engine.speculative = o.speculative;
  setup.engine.priority_preemption = !o.no_priority_preemption;
  setup.adapters = std::move(*adapters);
  auto engine = MakeEngine(backend->get(), weights->config, weights->params, &tok.value(), setup, &metrics);
  if (!engine.ok()) return fail_running(engine.status());
  weights->params = {};  // the model holds its own copy
  Engine& e = **engine;
  const InferenceModel& m = e.model();
  const GptConfig& mc = m.config();
  metrics.SetModelInfo({{"model", so.model_name},
                        {"n_layer", std::to_string(mc.n_layer)},
                        {"n_head", std::to_string(mc.n_head)},
                        {"n_embd", std::to_string(mc.n_embd)},
                        {"vocab_size", std::to_string(mc.vocab_size)},
                        {"block_size", std::to_string(mc.block_size)},
                        {"weights", WeightsName(*quantize)},
                        {"kv_dtype", KvDtypeName(*kv_dtype)},
                        {"device", (*backend)->name()}});
  std::fprintf(
      stderr,
      "tern serve: model %s (%s), weights %s %.1f MB on %s; KV cache %s, %d blocks x %d tokens (%.0f MB); "
      "max batch %d, context %d\n",
      so.model_name.c_str(), weights->config.ToString().c_str(), WeightsName(*quantize),
      m.weight_bytes() / 1048576.0, (*backend)->name().c_str(), KvDtypeName(*kv_dtype),
      m.options().num_blocks, m.options().block_size,
      m.options().num_blocks *
          InferenceModel::KvBytesPerBlock(weights->config, m.options().block_size, *kv_dtype) / 1048576.0,
      o.max_batch, e.max_seq_len());
  if (o.speculative.enabled())
    std::fprintf(
        stderr,
        "tern serve: speculative decoding by prompt lookup: up to %d draft tokens from a %d-%d token "
        "match%s; tern_spec_decode_* in /metrics\n",
        o.speculative.num_tokens, o.speculative.lookup_min, o.speculative.lookup_max,
        o.speculative.max_batch > 0
            ? fmt::format(", while at most {} sequences decode", o.speculative.max_batch).c_str()
            : "");
  for (size_t i = 0; i < so.adapters.size(); i++) {
    if (i >= setup.adapters.size()) {
      std::fprintf(stderr,
                   "tern serve: LoRA adapter %s: \"model\": \"%s\", read into memory when a request names it "
                   "(--max-loaded-loras %d)\n",
                   so.adapters[i].name.c_str(), so.adapters[i].name.c_str(), o.max_loaded_loras);
      continue;
    }
    const LoraAdapter& a = setup.adapters[i];
    std::fprintf(stderr, "tern serve: LoRA adapter %s (%s, %.1f MB): \"model\": \"%s\"\n",
                 so.adapters[i].name.c_str(), a.spec.ToString().c_str(),
                 a.params.size() * m.adapter_bytes_per_param() / 1048576.0, so.adapters[i].name.c_str());
  }
  setup.adapters.clear();
  if (o.allow_lora_updates)
    std::fprintf(stderr,
                 "tern serve: LoRA updates allowed%s%s: POST /v1/load_lora_adapter {\"lora_name\", "
                 "\"lora_path\"}, /v1/unload_lora_adapter {\"lora_name\"}\n",
                 so.api_keys.empty() ? "" : " to admin keys",
                 o.lora_root.empty() ? " (any path: --lora-root DIR limits them)"
                                     : (" from models:/ and " + o.lora_root).c_str());
  e.Start();
  server.SetEngine(&e, {so.model_name, &tok.value(), e.max_seq_len()});
  std::fprintf(
      stderr, "tern serve: ready: POST http://%s:%d/v1/completions%s\n", o.host.c_str(), server.port(),
      so.api_key.empty() && so.api_keys.empty() ? " (no API key: anyone who can reach the port can use it)"
                                                : "");

  // A spot notice from the cloud's metadata (--notice-url) drains the server as a signal does. Signals stay
  // with sigwait here: the watcher only polls.
  std::unique_ptr<ckpt::PreemptionWatcher> watcher;
  if (!o.notice_url.empty()) {
    ckpt::PreemptionOptions po;
    po.signals = false;
    po.url = o.notice_url;
    po.kind = o.notice_kind;
    po.poll_s = o.notice_poll_s;
    auto w = ckpt::PreemptionWatcher::Start(po);
    if (!w.ok()) {
      e.Stop();
      return fail_running(w.status());
    }
    watcher = std::move(*w);
  }

  // Until a signal or a notice: every 30 s with traffic, the throughput and (with --price-per-hour) the cost
  // it implies.
  uint64_t last_tokens = metrics.generation_tokens;
  auto last = std::chrono::steady_clock::now();
  std::string why;
  double drain_s = o.drain_timeout_s;
  for (;;) {
    timespec wait{1, 0};
    const int sig = sigtimedwait(&signals, nullptr, &wait);
    if (sig > 0) {
      why = sig == SIGTERM ? "SIGTERM" : "SIGINT";
      break;
    }
    if (watcher && watcher->notified()) {
      const ckpt::PreemptionNotice n = watcher->notice();
      why = n.source;
      // Leave the last seconds of the window to the exit itself.
      drain_s = std::min(drain_s, std::max(0.0, n.window_s - 5));
      break;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now - last < std::chrono::seconds(30)) continue;
    const uint64_t tokens = metrics.generation_tokens;
    const double secs = std::chrono::duration<double>(now - last).count(),
                 rate = (tokens - last_tokens) / secs;
    if (tokens > last_tokens) {
      std::fprintf(stderr, "tern serve: %.1f generated tokens/s over the last %.0f s", rate, secs);
      if (o.price_per_hour > 0)
        std::fprintf(stderr, "; at $%.2f/h that is $%.3f per 1M generated tokens", o.price_per_hour,
                     o.price_per_hour / (rate * 3600) * 1e6);
      std::fprintf(stderr, "\n");
    }
    last_tokens = tokens;
    last = now;
  }
  // Drain: no new requests (503, /health 503 "draining"), the accepted ones finish, up to --drain-timeout.
  const int in_flight = e.active();
  if (in_flight > 0 && drain_s > 0) {
    std::fprintf(stderr,
                 "tern serve: %s: draining %d sequence(s) for up to %.0f s (new requests get 503; a second "
                 "signal stops at once)\n",
                 why.c_str(), in_flight, drain_s);
    const auto t0 = std::chrono::steady_clock::now();
    const int left = DrainServer(server, e, drain_s, [&] {
      timespec now{0, 0};
      return sigtimedwait(&signals, nullptr, &now) > 0;
    });
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (left == 0)
      std::fprintf(stderr, "tern serve: drained in %.1f s: every accepted request finished\n", took);
    else
      std::fprintf(stderr, "tern serve: %d sequence(s) still running after %.1f s are cancelled\n", left,
                   took);
  } else {
    server.StartDrain();
    std::fprintf(stderr, "tern serve: %s: %s\n", why.c_str(),
                 in_flight > 0 ? "--drain-timeout 0: cancelling what runs" : "nothing in flight");
  }
  std::fprintf(stderr, "tern serve: shutting down; busy %.0f s, idle %.0f s", server.usage().busy_s(),
               server.usage().idle_s());
  if (const auto usd = server.usage().UsageJson()["usd_per_million_generated_tokens"]; usd.is_number())
    std::fprintf(stderr, "; $%.3f per 1M generated tokens over the whole time", usd.get<double>());
  std::fprintf(stderr, "\n");
  e.Stop();  // open streams end first, so that the HTTP threads can finish
  server.Stop();
  http.join();
  return 0;
}

}  // namespace

void AddServeCommand(CLI::App& root, CommandTable& table) {
  auto o = std::make_shared<ServeCliOptions>();
  auto* sub = root.add_subcommand("serve", "Serve a trained model over an OpenAI-compatible HTTP API");
  sub->footer(
      "\nExample:\n  tern serve runs/demo --port 8080 --api-key-file key.txt --weights bf16\n"
      "  curl -s localhost:8080/v1/completions -H \"Authorization: Bearer $(cat key.txt)\" \\\n"
      "       -d '{\"prompt\": \"And God said\", \"max_tokens\": 40}'\n"
      "Endpoints, limits, metrics and tuning: docs/serving.md.");
  sub->add_option("model", o->model_path, "run directory (model.safetensors + tokenizer.model) or checkpoint")
      ->required();
  sub->add_option("--host", o->host, "address to listen on (0.0.0.0 for all interfaces)")
      ->capture_default_str();
  sub->add_option("--port", o->port, "TCP port")->capture_default_str()->check(CLI::Range(0, 65535));
  auto* key = sub->add_option(
      "--api-key", o->api_key,
      "require 'Authorization: Bearer KEY' (visible in ps: prefer --api-key-file or $TERN_API_KEY)");
  auto* key_file = sub->add_option("--api-key-file", o->api_key_file, "file whose first line is the API key")
                       ->excludes(key);
  sub->add_option("--api-keys", o->api_keys_file,
                  "YAML file of several keys, each with an id, a project and optional requests_per_min and "
                  "tokens_per_min limits (docs/serving.md, \"Usage and cost per project\")")
      ->excludes(key)
      ->excludes(key_file);
  sub->add_option(
      "--usage-log", o->usage_log,
      "append one JSON line per generation request (time, project, key id, tokens, status, latency)");
  sub->add_option(
      "--usage-file", o->usage_file,
      "JSON usage summary (per key and project, busy/idle seconds, $), rewritten every 5 s and at "
      "shutdown; `tern report --ledger --serving FILE` reads it");
  sub->add_option(
         "--max-batch", o->max_batch,
         "sequences decoded together; 1 = one stream at a time (bf16 weights on an AMX CPU then decode "
         "through the faster one-row kernel: docs/serving-speed.md)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  sub->add_option("--max-batch-tokens", o->max_batch_tokens,
                  "tokens per forward pass (long prompts are prefilled in chunks of this size)")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  sub->add_option("--max-queue", o->max_queue,
                  "sequences waiting (a request of n choices counts n) beyond which new ones get 429")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_flag("--no-priority-preemption", o->no_priority_preemption,
                "a request of a lower \"priority\" value that does not fit waits for running ones to end, "
                "instead of preempting those of higher values (which are computed again later, output "
                "unchanged)");
  sub->add_option("--max-seq-len", o->max_seq_len,
                  "prompt + completion tokens per request (0 = the model's context)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--kv-cache-mb", o->kv_cache_mb, "memory for the paged KV cache")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  auto* weights =
      sub->add_option(
             "--weights", o->weights,
             "matmul weights and the token table: fp32, bf16 (half the bytes, loss "
             "within 0.1%), int8 (a quarter, per-channel) or int4 (4.5 bits a weight, a scale per 64; CPU "
             "only); docs/serving-speed.md compares them")
          ->capture_default_str();
  sub->add_option("--quantize", o->quantize, "the older name of --weights: none (= fp32) or int8")
      ->excludes(weights);
  sub->add_option("--kv-dtype", o->kv_dtype,
                  "KV cache elements: fp32, bf16 (half the memory per token), int8 (about a quarter; CPU "
                  "only) or auto "
                  "(bf16 with bf16, int8 or int4 weights)")
      ->capture_default_str();
  sub->add_option("--threads", o->threads, "compute threads (0 = OMP_NUM_THREADS or all cores)")
      ->check(CLI::NonNegativeNumber);
  AddSpeculativeOptions(sub, &o->speculative);
  sub->add_option(
         "--http-threads", o->http_threads,
         "HTTP worker threads; each running or queued request holds one (0 = max-batch + max-queue + 16)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--max-body-kb", o->max_body_kb, "largest request body; larger ones get 413")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--timeout", o->timeout_s, "seconds after which a request is cancelled")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--model-name", o->model_name, "model id in the API (default: the run directory's name)");
  sub->add_option("--lora", o->lora,
                  "serve a LoRA adapter beside the model, as API model NAME (repeatable): NAME=PATH, PATH a "
                  "LoRA run directory (train.lora.rank, train.init_from = this model), its "
                  "adapter.safetensors or a checkpoint; requests pick it with \"model\": \"NAME\"")
      ->allow_extra_args(false);
  sub->add_flag(
      "--allow-lora-updates", o->allow_lora_updates,
      "load and unload LoRA adapters while serving: POST /v1/load_lora_adapter {\"lora_name\": NAME, "
      "\"lora_path\": PATH} (a NAME served already is replaced: move a registry alias, load "
      "models:/NAME@REF again) and /v1/unload_lora_adapter {\"lora_name\": NAME}; with --api-keys "
      "only keys with admin: true may (vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING)");
  sub->add_option(
         "--lora-root", o->lora_root,
         "with --allow-lora-updates: the load route reads only models:/ URIs (the registry) and paths "
         "inside this directory (symlinks and .. resolved); others get 403")
      ->check(CLI::ExistingDirectory);
  sub->add_option("--max-lora-adapters", o->max_lora_adapters,
                  "the most LoRA adapters served at once (0 = no limit but memory; tern plan --serve "
                  "--lora-adapters N sizes them)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--max-loaded-loras", o->max_loaded_loras,
                  "the most LoRA adapters kept in memory at once (0 = all): the others served stay on disk "
                  "and are read back when a request names one, retiring the least recently used (S-LoRA; "
                  "vLLM's --max-cpu-loras; tern_lora_loads_total in /metrics)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--tokenizer", o->tokenizer,
                  "tokenizer.model to use (default: the one next to the weights)");
  sub->add_option("--device", o->device, "cpu | cpu-ref | cuda | auto")->capture_default_str();
  sub->add_option(
         "--price-per-hour", o->price_per_hour,
         "instance price in $/h: $ per 1M generated tokens at the measured throughput and utilisation "
         "(stderr, /metrics, --usage-file)")
      ->check(CLI::NonNegativeNumber);
  sub->add_flag("--log-requests", o->log_requests, "one line per request on stderr (method, path, status)");
  sub->add_option(
         "--drain-timeout", o->drain_timeout_s,
         "on SIGTERM/SIGINT or a spot notice: seconds the requests already accepted may run on while "
         "new ones get 503 and /health 503 \"draining\" (0 = cancel them at once; a second signal "
         "stops at once)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option(
      "--notice-url", o->notice_url,
      "cloud metadata base URL polled for a spot notice, which drains the server within the "
      "notice's window (e.g. http://169.254.169.254 on AWS, http://metadata.google.internal on GCP)");
  sub->add_option("--notice-kind", o->notice_kind, "the metadata protocol: aws or gcp")
      ->capture_default_str()
      ->check(CLI::IsMember({"aws", "gcp"}));
  sub->add_option("--notice-poll-s", o->notice_poll_s, "seconds between metadata polls")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  table.Add(sub, [o] { return RunServe(*o); });
}

}  // namespace tern::cli
