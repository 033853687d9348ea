#include "ckpt/preemption.h"

#include <signal.h>
#include <time.h>

#include <ctime>

#include <nlohmann/json.hpp>

#include "net/http.h"

namespace tern::ckpt {

using net::HttpFetch;
using net::HttpRequest;
using net::HttpResponse;

namespace {

// Written by the handler, read by the training thread. Lock-free atomics are async-signal-safe.
std::atomic<int> g_signal{0};
std::atomic<int64_t> g_signal_ns{0};  // CLOCK_MONOTONIC (steady_clock on Linux) when it arrived
struct sigaction g_old_term, g_old_usr1;
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<int64_t>::is_always_lock_free);

extern "C" void OnSignal(int sig) {
  int expected = 0;
  if (g_signal.compare_exchange_strong(expected, sig)) {  // the first notice counts; repeats are ignored
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe (POSIX)
    g_signal_ns.store(static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec);
  }
}

// "2025-01-01T12:00:00Z" -> seconds from now (negative when past); nullopt when unparsable.
std::optional<double> SecondsUntil(const std::string& iso) {
  std::tm tm{};
  if (!strptime(iso.c_str(), "%Y-%m-%dT%H:%M:%S", &tm)) return std::nullopt;
  return std::difftime(timegm(&tm), std::time(nullptr));
}

}  // namespace

Result<std::unique_ptr<PreemptionWatcher>> PreemptionWatcher::Start(const PreemptionOptions& options) {
  if (options.kind != "aws" && options.kind != "gcp")
    return Status::InvalidArgument(fmt::format("preemption notice kind '{}': use aws or gcp", options.kind));
  std::unique_ptr<PreemptionWatcher> w(new PreemptionWatcher());
  w->options_ = options;
  if (options.signals) {
    g_signal.store(0);
    struct sigaction sa {};
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;  // the training thread's reads and writes carry on
    if (sigaction(SIGTERM, &sa, &g_old_term) != 0 || sigaction(SIGUSR1, &sa, &g_old_usr1) != 0)
      return Status::Internal("cannot install the SIGTERM/SIGUSR1 handlers");
    w->installed_ = true;
  }
  if (!options.url.empty()) w->poller_ = std::thread([p = w.get()] { p->PollLoop(); });
  return w;
}

PreemptionWatcher::~PreemptionWatcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (poller_.joinable()) poller_.join();
  if (installed_) {
    sigaction(SIGTERM, &g_old_term, nullptr);
    sigaction(SIGUSR1, &g_old_usr1, nullptr);
  }
}

bool PreemptionWatcher::notified() const {
  if (installed_ && g_signal.load(std::memory_order_relaxed) != 0) return true;
  std::lock_guard<std::mutex> lock(mu_);
  return polled_notice_;
}

PreemptionNotice PreemptionWatcher::notice() const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (polled_notice_) return notice_;
  }
  PreemptionNotice n;
  const int sig = g_signal.load();
  n.source = sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : fmt::format("signal {}", sig);
  n.window_s = options_.signal_window_s;
  n.at = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(g_signal_ns.load()));
  return n;
}

void PreemptionWatcher::Notify(const std::string& source, double window_s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (polled_notice_) return;
  polled_notice_ = true;
  notice_ = {source, window_s, std::chrono::steady_clock::now()};
}

Result<bool> PreemptionWatcher::PollOnce(const PreemptionOptions& o, std::string* token,
                                         PreemptionNotice* notice) {
  HttpRequest req;
  req.timeout_s = 2;
  req.connect_timeout_s = 1;
  if (o.kind == "gcp") {
    req.url = o.url + "/computeMetadata/v1/instance/preempted";
    req.headers = {"Metadata-Flavor: Google"};
    TERN_ASSIGN_OR_RETURN(HttpResponse r, HttpFetch(req));
    if (r.status != 200) return Status::Unavailable(fmt::format("GET {}: HTTP {}", req.url, r.status));
    if (!ParseGcpPreempted(r.body)) return false;
    *notice = {"gcp preempted", o.signal_window_s, std::chrono::steady_clock::now()};
    return true;
  }
  if (token->empty()) {  // IMDSv2: a session token first (v1's plain GET is often disabled)
    HttpRequest put = req;
    put.method = "PUT";
    put.url = o.url + "/latest/api/token";
    put.headers = {"X-aws-ec2-metadata-token-ttl-seconds: 21600"};
    TERN_ASSIGN_OR_RETURN(HttpResponse r, HttpFetch(put));
    if (r.status != 200) return Status::Unavailable(fmt::format("PUT {}: HTTP {}", put.url, r.status));
    *token = r.body;
  }
  req.url = o.url + "/latest/meta-data/spot/instance-action";
  req.headers = {"X-aws-ec2-metadata-token: " + *token};
  TERN_ASSIGN_OR_RETURN(HttpResponse r, HttpFetch(req));
  if (r.status == 401) token->clear();  // expired: get a new one next time
  if (r.status == 404 || r.status == 401) return false;
  if (r.status != 200) return Status::Unavailable(fmt::format("GET {}: HTTP {}", req.url, r.status));
  *notice = ParseAwsInstanceAction(r.body);
  return true;
}

PreemptionNotice ParseAwsInstanceAction(std::string_view body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  // Fields of another type count as absent (value() would throw on them).
  auto text = [&](const char* key) -> std::string {
    return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
  };
  const std::string action = text("action").empty() ? "terminate" : text("action");
  const std::optional<double> until = SecondsUntil(text("time"));
  return {"aws spot instance-action: " + action, until.value_or(120.0), std::chrono::steady_clock::now()};
}

bool ParseGcpPreempted(std::string_view body) {
  return body.find("TRUE") != std::string_view::npos;
}

void PreemptionWatcher::PollLoop() {
  std::string token;
  while (true) {
    PreemptionNotice n;
    auto r = PollOnce(options_, &token, &n);  // errors: the endpoint is flaky or absent; try again later
    if (r.ok() && *r) {
      Notify(n.source, n.window_s);
      return;
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, std::chrono::duration<double>(options_.poll_s), [&] { return stop_; })) return;
  }
}

}  // namespace tern::ckpt
