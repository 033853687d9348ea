#include "serve/server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "serve/adapter_pager.h"
#include "serve/adapter_routes.h"
#include "serve/connection_deadlines.h"
#include "serve/response_builder.h"

namespace tern {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPoll =
    std::chrono::milliseconds(1000);  // a quiet stream sends a keep-alive comment this often

void Reply(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(ErrorJson(e), "application/json");
}

std::string Sse(const std::string& data) {
  return "data: " + data + "\n\n";
}

// Routes for the request counter; unknown paths share one label so that scanners cannot grow the metrics.
std::string RouteLabel(const std::string& path) {
  for (const char* r : {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics",
                        "/v1/load_lora_adapter", "/v1/unload_lora_adapter", "/tokenize", "/detokenize"})
    if (path == r) return r;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  return "other";
}

// State of one streaming response, shared by the content provider and its releaser.
struct Stream {
  std::shared_ptr<RequestHandle> handle;
  std::unique_ptr<ResponseBuilder> builder;
  bool started = false, finished = false;
  Clock::time_point deadline, start;
  UsageRecord rec;  // recorded when the response ends
};

// cpp-httplib 0.11 listens with a backlog of 5, a compile-time constant of Debian's library: a burst of
// concurrent clients overflows the accept queue and then waits for SYN retransmits (1 s, 3 s, ...), which
// shows up as a one-second time to first token. listen() again on the bound socket raises the backlog.
class HttpServer : public httplib::Server {
 public:
  void RaiseBacklog(int backlog) { ::listen(svr_sock_, backlog); }
};

}  // namespace

// The bearer token of a request ("" when there is none).
std::string BearerToken(const httplib::Request& req) {
  const std::string auth = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  return auth.rfind(prefix, 0) == 0 ? auth.substr(prefix.size()) : std::string();
}

UsageOptions MakeUsageOptions(const ServerOptions& o) {
  UsageOptions u;
  u.keys = o.api_keys;
  // One key (--api-key) is the operator's: it may load adapters too, and ask for any priority.
  if (u.keys.empty() && !o.api_key.empty())
    u.keys.push_back({"default", o.api_key, "default", 0, 0, true, -kMaxPriority});
  u.price_per_hour = o.price_per_hour;
  u.usage_log = o.usage_log;
  u.usage_file = o.usage_file;
  u.usage_file_period_s = o.usage_file_period_s;
  u.model = o.model_name;
  return u;
}

struct Server::Impl {
  explicit Impl(const ServerOptions& o) : opt(o), usage(MakeUsageOptions(o)), deadlines(o.io_timeout_s) {}
  ServerOptions opt;
  UsageTracker usage;
  ServeMetrics* metrics;
  ConnectionDeadlines deadlines;  // slow clients (slowloris) are cut off after io_timeout_s
  HttpServer http;
  int port = -1;
  std::atomic<Engine*> engine{nullptr};
  std::atomic<bool> draining{false};
  ApiContext ctx;
  ServedAdapters adapters;
  std::unique_ptr<AdapterPager> pager;
  int64_t created = 0;

  void Routes();
  // POST /v1/load_lora_adapter and /v1/unload_lora_adapter (adapter_routes.h), once allowed.
  void UpdateAdapters(const httplib::Request& req, httplib::Response& res, bool load);
  void Generate(const httplib::Request& req, httplib::Response& res, bool chat);
  // What a generation request returns: its usage is recorded when the response is complete.
  void GenerateFor(const httplib::Request& req, httplib::Response& res, bool chat, UsageRecord* rec);
  void Respond(httplib::Response& res, ParsedRequest r, std::shared_ptr<RequestHandle> handle,
               UsageRecord* rec);
  void StreamResponse(httplib::Response& res, ParsedRequest r, std::shared_ptr<RequestHandle> handle,
                      const UsageRecord& rec);
};

Server::Server(const ServerOptions& options, ServeMetrics* metrics) : impl_(std::make_unique<Impl>(options)) {
  impl_->metrics = metrics;
  impl_->created =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  const size_t in_memory =
      options.max_loaded_loras > 0 ? static_cast<size_t>(options.max_loaded_loras) : options.adapters.size();
  for (size_t i = 0; i < options.adapters.size(); i++)
    (void)impl_->adapters.Put({options.adapters[i].name, i < in_memory ? static_cast<int>(i) + 1 : 0,
                               options.adapters[i].path, impl_->created},
                              0, nullptr);
  impl_->pager = std::make_unique<AdapterPager>(&impl_->adapters, options.lora_loader,
                                                options.max_loaded_loras, metrics);
  impl_->Routes();
}

Server::~Server() {
  Stop();
}

Status Server::Bind() {
  Impl& m = *impl_;
  m.port = m.opt.port == 0 ? m.http.bind_to_any_port(m.opt.host)
                           : (m.http.bind_to_port(m.opt.host, m.opt.port) ? m.opt.port : -1);
  if (m.port < 0)
    return Status::Unavailable(
        fmt::format("cannot listen on {}:{} (address in use or not local?)", m.opt.host, m.opt.port));
  m.http.RaiseBacklog(1024);
  m.deadlines.Start(m.port);
  return Status::Ok();
}

int Server::port() const {
  return impl_->port;
}

void Server::SetEngine(Engine* engine, const ApiContext& ctx) {
  impl_->ctx = ctx;
  impl_->ctx.adapters = &impl_->adapters;
  impl_->engine = engine;
  impl_->metrics->ready = 1;
}

void Server::Serve() {
  impl_->http.listen_after_bind();
}
void Server::Stop() {
  if (impl_->http.is_running()) impl_->http.stop();
}
UsageTracker& Server::usage() {
  return impl_->usage;
}
void Server::StartDrain() {
  impl_->draining = true;
  impl_->metrics->ready = 0;
}
bool Server::draining() const {
  return impl_->draining;
}

int DrainServer(Server& server, const Engine& engine, double timeout_s,
                const std::function<bool()>& interrupted) {
  server.StartDrain();
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(std::max(timeout_s, 0.0)));
  for (;;) {
    const int active = engine.active();
    if (active == 0 || Clock::now() >= deadline || (interrupted && interrupted())) return active;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void Server::Impl::Routes() {
  const int threads = opt.http_threads;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(opt.max_body_bytes);
  http.set_read_timeout(opt.io_timeout_s, 0);
  http.set_write_timeout(opt.io_timeout_s, 0);
  http.set_keep_alive_timeout(5);

  // Authentication happens before the body is read, so an unauthenticated client cannot make us read 10 MB;
  // so does the size check, so that a Content-Length over the limit is refused at once rather than after
  // httplib has waited to read (and discard) a body that may never come.
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    deadlines.HeadersRead(req.remote_addr, req.remote_port);
    if (usage.auth_required() && req.path != "/health") {
      const std::string auth = req.get_header_value("Authorization");
      if (auth.empty() || usage.Authenticate(BearerToken(req)) < 0) {
        Reply(res, {401,
                    auth.empty()
                        ? "You didn't provide an API key: send it as the header 'Authorization: Bearer KEY'"
                        : "Incorrect API key provided",
                    "invalid_request_error", "", "invalid_api_key"});
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    const std::string length = req.get_header_value("Content-Length");
    char* end = nullptr;
    const unsigned long long n = std::strtoull(length.c_str(), &end, 10);
    if (!length.empty() && *end == '\0' && n > opt.max_body_bytes) {
      // The unread body stays in the socket: close the connection after the answer.
      res.set_header("Connection", "close");
      Reply(res, {413, fmt::format("The request body is larger than {} bytes", opt.max_body_bytes),
                  "invalid_request_error", "", ""});
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Errors that reach here without a body (unknown route, 413, ...) get an OpenAI error object.
  http.set_error_handler(
      httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        ApiError e{res.status, fmt::format("HTTP {}", res.status), "invalid_request_error", "", ""};
        if (res.status == 404) e.message = fmt::format("Unknown request URL: {} {}", req.method, req.path);
        if (res.status == 405)
          e.message = fmt::format("Method {} is not allowed for {}", req.method, req.path);
        if (res.status == 413)
          e.message = fmt::format("The request body is larger than {} bytes", opt.max_body_bytes);
        if (res.status >= 500) e.type = "server_error";
        Reply(res, e);
        return httplib::Server::HandlerResponse::Handled;
      }));
  http.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tern serve: internal error on %s %s: %s\n", req.method.c_str(), req.path.c_str(),
                   e.what());
    } catch (...) {
      std::fprintf(stderr, "tern serve: internal error on %s %s\n", req.method.c_str(), req.path.c_str());
    }
    Reply(res, {500, "The server had an error while processing your request", "server_error", "", ""});
  });
  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    deadlines.ResponseWritten(req.remote_addr, req.remote_port);
    metrics->CountRequest(RouteLabel(req.path), res.status);
    if (opt.log_requests)
      std::fprintf(stderr, "%s %s %d\n", req.method.c_str(), req.path.c_str(), res.status);
  });

  // Every route: from here the server is the one working, so the connection has no deadline (deadlines).
  const auto Handler = [this](httplib::Server::Handler h) {
    return [this, h = std::move(h)](const httplib::Request& req, httplib::Response& res) {
      deadlines.HandlerStarted(req.remote_addr, req.remote_port);
      h(req, res);
    };
  };
  http.Get("/health", Handler([this](const httplib::Request&, httplib::Response& res) {
             const bool ready = engine.load() != nullptr;
             res.status = ready && !draining ? 200 : 503;
             res.set_content(draining ? R"({"status":"draining"})"
                             : ready  ? R"({"status":"ok"})"
                                      : R"({"status":"loading"})",
                             "application/json");
           }));
  http.Get("/metrics", Handler([this](const httplib::Request&, httplib::Response& res) {
             res.set_content(metrics->Render() + usage.RenderMetrics(),
                             "text/plain; version=0.0.4; charset=utf-8");
           }));
  http.Get("/v1/models", Handler([this](const httplib::Request&, httplib::Response& res) {
             res.set_content(ModelsJson(opt.model_name, adapters.List(), created), "application/json");
           }));
  http.Get(R"(/v1/models/(.+))", Handler([this](const httplib::Request& req, httplib::Response& res) {
             const std::string id = req.matches[1].str();
             if (id == opt.model_name) return res.set_content(ModelJson(id, created), "application/json");
             const auto adapter = adapters.Find(id);
             if (!adapter) {
               return Reply(res, {404, fmt::format("The model '{}' does not exist", id),
                                  "invalid_request_error", "model", "model_not_found"});
             }
             res.set_content(ModelJson(id, adapter->created, opt.model_name, adapter->source),
                             "application/json");
           }));
  // vLLM's token counting: the tokens of a prompt or chat, and text back from tokens (no generation).
  for (const bool tokenize : {true, false}) {
    http.Post(tokenize ? "/tokenize" : "/detokenize",
              Handler([this, tokenize](const httplib::Request& req, httplib::Response& res) {
                if (!engine.load())
                  return Reply(res, {503, "The model is still loading; retry shortly", "server_error", "",
                                     "model_loading"});
                auto out = tokenize ? TokenizeResponse(req.body, ctx) : DetokenizeResponse(req.body, ctx);
                if (auto* err = std::get_if<ApiError>(&out)) return Reply(res, *err);
                res.set_content(std::get<std::string>(out), "application/json");
              }));
  }
  http.Post("/v1/load_lora_adapter", Handler([this](const httplib::Request& req, httplib::Response& res) {
              UpdateAdapters(req, res, true);
            }));
  http.Post("/v1/unload_lora_adapter", Handler([this](const httplib::Request& req, httplib::Response& res) {
              UpdateAdapters(req, res, false);
            }));
  http.Post("/v1/completions", Handler([this](const httplib::Request& req, httplib::Response& res) {
              Generate(req, res, false);
            }));
  http.Post("/v1/chat/completions", Handler([this](const httplib::Request& req, httplib::Response& res) {
              Generate(req, res, true);
            }));
}

void Server::Impl::UpdateAdapters(const httplib::Request& req, httplib::Response& res, bool load) {
  if (!opt.allow_lora_updates || !opt.lora_loader)
    return Reply(res, {404,
                       fmt::format("{} is off: start tern serve with --allow-lora-updates to load and unload "
                                   "LoRA adapters while it serves",
                                   req.path),
                       "invalid_request_error", "", ""});
  const int key = usage.auth_required() ? usage.Authenticate(BearerToken(req)) : -1;
  if (!usage.IsAdmin(key))
    return Reply(res, {403,
                       fmt::format("the API key '{}' may not load or unload LoRA adapters; give it "
                                   "'admin: true' in the --api-keys file, or use a key that has it",
                                   usage.KeyId(key)),
                       "invalid_request_error", "", "permission_denied"});
  Engine* e = engine.load();
  if (!e)
    return Reply(res,
                 {503, "The model is still loading; retry shortly", "server_error", "", "model_loading"});
  const AdapterRouteContext c{e,
                              &adapters,
                              opt.model_name,
                              opt.lora_loader,
                              opt.max_lora_adapters,
                              usage.auth_required() ? usage.KeyId(key) : "(no API key)",
                              opt.lora_root,
                              pager.get(),
                              opt.lora_pin};
  auto out = load ? LoadAdapterRoute(req.body, c) : UnloadAdapterRoute(req.body, c);
  if (auto* err = std::get_if<ApiError>(&out)) return Reply(res, *err);
  res.set_content(std::get<std::string>(out), "application/json");
}

void Server::Impl::Generate(const httplib::Request& req, httplib::Response& res, bool chat) {
  UsageRecord rec;
  rec.unix_s = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  rec.key = usage.auth_required() ? usage.Authenticate(BearerToken(req)) : -1;
  rec.route = chat ? "/v1/chat/completions" : "/v1/completions";
  const auto t0 = Clock::now();
  GenerateFor(req, res, chat, &rec);
  if (rec.status != 0) return;  // a stream records itself when it ends
  rec.status = res.status > 0 ? res.status : 200;
  rec.latency_s = std::chrono::duration<double>(Clock::now() - t0).count();
  usage.Record(rec);
}

void Server::Impl::GenerateFor(const httplib::Request& req, httplib::Response& res, bool chat,
                               UsageRecord* rec) {
  Engine* e = engine.load();
  if (!e)
    return Reply(res,
                 {503, "The model is still loading; retry shortly", "server_error", "", "model_loading"});
  if (draining) {
    res.set_header("Connection", "close");
    return Reply(res, {503, "The server is shutting down; send the request to another replica",
                       "server_error", "", "server_shutting_down"});
  }
  auto parsed = ParseRequest(req.body, chat, ctx);
  if (auto* err = std::get_if<ApiError>(&parsed)) return Reply(res, *err);
  ParsedRequest r = std::move(std::get<ParsedRequest>(parsed));
  r.gen.priority = usage.Priority(rec->key, r.gen.priority);
  rec->model = r.model;
  if (auto refused = usage.Admit(rec->key)) {
    res.set_header("Retry-After", std::to_string(refused->retry_after_s));
    return Reply(res, {429, refused->message, refused->limit, "", "rate_limit_exceeded"});
  }
  Result<std::shared_ptr<RequestHandle>> handle = Status::NotFound("");
  // An adapter's engine id: read back into memory if it is not (--max-loaded-loras). Another request may
  // retire it again before this one is submitted (Submit: NotFound); then it is acquired again.
  for (int attempt = 0; attempt < 4; attempt++) {
    if (r.model != ctx.model_name) {
      auto id = pager->Acquire(r.model, e);
      if (!id.ok() && id.status().code() == Status::Code::kNotFound) break;
      if (!id.ok())
        return Reply(res, {503, id.status().message(), "server_error", "model", "adapter_unavailable"});
      r.gen.adapter = id.value();
    }
    handle = e->Submit(r.gen);
    if (handle.ok() || handle.status().code() != Status::Code::kNotFound) break;
  }
  if (!handle.ok() && handle.status().code() == Status::Code::kNotFound)  // unloaded since it was looked up
    return Reply(res, {404, fmt::format("The model '{}' was unloaded", r.model), "invalid_request_error",
                       "model", "model_not_found"});
  if (!handle.ok()) {
    const bool busy = handle.status().code() == Status::Code::kUnavailable;
    if (busy) res.set_header("Retry-After", "1");
    // What the parser could not check: n (best_of) against --max-queue, the KV cache against max_tokens.
    const bool n_too_large = handle.status().message().rfind("n = ", 0) == 0;
    const std::string param = busy ? "" : n_too_large ? (r.ranks() ? "best_of" : "n") : "max_tokens";
    return Reply(
        res, {busy ? 429 : 400, handle.status().message(),
              busy ? "rate_limit_error" : "invalid_request_error", param, busy ? "rate_limit_exceeded" : ""});
  }
  usage.Begin();
  if (r.stream) {
    rec->status = 200;
    return StreamResponse(res, std::move(r), handle.value(), *rec);
  }
  Respond(res, std::move(r), handle.value(), rec);
  usage.End();
}

// Waits for the whole completion. A non-streaming client that leaves is only noticed at the end (HTTP/1.1
// gives no signal without writing); max_tokens and the request timeout bound the waste.
void Server::Impl::Respond(httplib::Response& res, ParsedRequest r, std::shared_ptr<RequestHandle> handle,
                           UsageRecord* rec) {
  ResponseBuilder builder(r, NewResponseMeta(r.model, r.chat, ctx.tokenizer));
  const auto deadline = Clock::now() + std::chrono::seconds(opt.request_timeout_s);
  while (!builder.finished()) {
    std::vector<GenerationEvent> events;
    handle->Wait(&events, kPoll);
    for (auto& ev : events) builder.Add(ev);
    rec->prompt_tokens = builder.usage().prompt_tokens;
    rec->generation_tokens = builder.usage().completion_tokens;
    if (builder.cancelled()) {
      handle->Cancel();  // the other choices stop too
      return Reply(res, {503, "The request was cancelled (server shutting down or timed out)", "server_error",
                         "", ""});
    }
    if (Clock::now() > deadline) handle->Cancel();
  }
  res.set_content(builder.Body(), "application/json");
}

// Server-sent events: one `data: {chunk}` per generated token (per choice), a chunk with finish_reason per
// choice, optionally one with usage, then `data: [DONE]`. A failed write means the client left: the request
// is cancelled and its KV blocks are freed at the engine's next iteration. A quiet stream (queued request)
// writes an SSE comment every second, which is how a departed client is noticed before its first token.
void Server::Impl::StreamResponse(httplib::Response& res, ParsedRequest r,
                                  std::shared_ptr<RequestHandle> handle, const UsageRecord& rec) {
  auto st = std::make_shared<Stream>();
  st->rec = rec;
  st->start = Clock::now();
  st->handle = std::move(handle);
  st->builder = std::make_unique<ResponseBuilder>(r, NewResponseMeta(r.model, r.chat, ctx.tokenizer));
  st->deadline = Clock::now() + std::chrono::seconds(opt.request_timeout_s);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st](size_t, httplib::DataSink& sink) {
        std::vector<GenerationEvent> events;
        std::string out;
        if (!st->handle->Wait(&events, kPoll)) {
          if (Clock::now() > st->deadline) st->handle->Cancel();
          out = ": keep-alive\n\n";
        }
        if (!st->started) {
          for (const auto& chunk : st->builder->StreamStart()) out += Sse(chunk);
          st->started = true;
        }
        for (auto& ev : events) {
          if (st->finished) break;
          for (const auto& chunk : st->builder->Stream(ev)) out += Sse(chunk);
          if (st->builder->cancelled()) {
            st->handle->Cancel();  // the other choices stop too
            out += Sse(ErrorJson({503, "The request was cancelled (server shutting down or timed out)",
                                  "server_error", "", ""}));
          }
          if (st->builder->cancelled() || st->builder->finished()) {
            out += "data: [DONE]\n\n";
            st->finished = true;
          }
        }
        if (!out.empty() && !sink.write(out.data(), out.size())) {
          st->handle->Cancel();
          return false;
        }
        if (st->finished) sink.done();
        return true;
      },
      [st, this](bool) {
        if (!st->finished) st->handle->Cancel();  // the response ended early: free the slot
        // 499: the client left before the end (nginx's code); its tokens so far still count
        st->rec.status = st->finished ? 200 : 499;
        st->rec.prompt_tokens = st->builder->usage().prompt_tokens;
        st->rec.generation_tokens = st->builder->usage().completion_tokens;
        st->rec.latency_s = std::chrono::duration<double>(Clock::now() - st->start).count();
        usage.End();
        usage.Record(st->rec);
      });
}

}  // namespace tern
