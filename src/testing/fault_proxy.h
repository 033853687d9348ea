// A fault-injecting HTTP proxy for the storage fault tests: it sits on loopback in front of a real server
// (moto_server) and, per request, forwards it untouched or answers with a fault a cloud store really
// produces: 500/503, a reset connection, a stall past the client's timeout, or the request forwarded (so the
// server acts on it) and the answer replaced by a reset ("accepted, then the connection died").
//
// The proxy works on the byte stream and forwards the request head as it came, so SigV4 signatures (which
// cover the Host header) stay valid. It expects one request per connection, which is what net::HttpFetch
// does (a new libcurl handle per request).
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tern::testing {

enum class ProxyFault {
  kForward,           // pass it through
  kStatus500,         // answer 500 InternalError
  kStatus503,         // answer 503 SlowDown
  kStatus400,         // answer 400 InvalidRequest (a client error: must not be retried)
  kNoSuchUpload,      // answer 404 NoSuchUpload (S3's answer to completing an upload already completed)
  kReset,             // close the connection with a TCP reset before answering
  kStall,             // say nothing for stall_s, then close
  kForwardThenReset,  // forward it (the server acts), then reset instead of passing the answer back
};
const char* ProxyFaultName(ProxyFault f);

struct ProxiedRequest {
  int index = 0;       // 0, 1, ... in arrival order
  std::string method;  // "PUT"
  std::string target;  // "/bucket/key?partNumber=2&uploadId=..."
  ProxyFault fault = ProxyFault::kForward;
};

class FaultProxy {
 public:
  using Rule = std::function<ProxyFault(const ProxiedRequest&)>;
  // Forwards to 127.0.0.1:upstream_port. rule decides each request's fault (it may be replaced later).
  FaultProxy(int upstream_port, Rule rule, double stall_s = 2.0);
  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void SetRule(Rule rule);
  std::vector<ProxiedRequest> Log();  // every request seen, with the fault applied
  void ClearLog();

 private:
  void AcceptLoop();
  void Serve(int client);

  int upstream_port_, port_ = 0, listen_fd_ = -1;
  double stall_s_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  Rule rule_;
  std::vector<ProxiedRequest> log_;
  int next_index_ = 0;
  std::thread acceptor_;
  std::vector<std::thread> workers_;
};

}  // namespace tern::testing
