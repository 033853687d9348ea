#include "testing/fault_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

namespace tern::testing {

namespace {

bool SendAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

void ResetAndClose(int fd) {
  linger l{1, 0};  // close() now sends RST instead of FIN
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  ::close(fd);
}

// Reads what the client still sends (for up to `ms`), so that closing does not turn into a reset that
// hides the answer just written.
void Drain(int fd, int ms) {
  char buf[65536];
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    if (::recv(fd, buf, sizeof(buf), 0) <= 0) return;
  }
}

}  // namespace

const char* ProxyFaultName(ProxyFault f) {
  switch (f) {
    case ProxyFault::kForward:
      return "forward";
    case ProxyFault::kStatus500:
      return "500";
    case ProxyFault::kStatus503:
      return "503";
    case ProxyFault::kStatus400:
      return "400";
    case ProxyFault::kNoSuchUpload:
      return "404 NoSuchUpload";
    case ProxyFault::kReset:
      return "reset";
    case ProxyFault::kStall:
      return "stall";
    case ProxyFault::kForwardThenReset:
      return "forward-then-reset";
  }
  return "?";
}

FaultProxy::FaultProxy(int upstream_port, Rule rule, double stall_s)
    : upstream_port_(upstream_port), stall_s_(stall_s), rule_(std::move(rule)) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::listen(listen_fd_, 64);
  socklen_t len = sizeof(a);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

FaultProxy::~FaultProxy() {
  stop_ = true;
  acceptor_.join();
  ::close(listen_fd_);
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& t : workers_) t.join();
}

void FaultProxy::SetRule(Rule rule) {
  std::lock_guard<std::mutex> lk(mu_);
  rule_ = std::move(rule);
}

std::vector<ProxiedRequest> FaultProxy::Log() {
  std::lock_guard<std::mutex> lk(mu_);
  return log_;
}

void FaultProxy::ClearLog() {
  std::lock_guard<std::mutex> lk(mu_);
  log_.clear();
}

void FaultProxy::AcceptLoop() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    std::lock_guard<std::mutex> lk(mu_);
    workers_.emplace_back([this, c] { Serve(c); });
  }
}

void FaultProxy::Serve(int client) {
  // The request head (and whatever body bytes came with it).
  std::string head;
  char buf[65536];
  while (head.find("\r\n\r\n") == std::string::npos && head.size() < (1u << 20) && !stop_) {
    pollfd p{client, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    ssize_t n = ::recv(client, buf, sizeof(buf), 0);
    if (n <= 0) {
      ::close(client);
      return;
    }
    head.append(buf, static_cast<size_t>(n));
  }
  ProxiedRequest req;
  const size_t sp1 = head.find(' '), sp2 = head.find(' ', sp1 + 1);
  req.method = head.substr(0, sp1);
  req.target = head.substr(sp1 + 1, sp2 - sp1 - 1);
  {
    std::lock_guard<std::mutex> lk(mu_);
    req.index = next_index_++;
    req.fault = rule_ ? rule_(req) : ProxyFault::kForward;
    log_.push_back(req);
  }
  auto answer = [&](int status, const char* reason, const char* code) {
    const std::string body = std::string("<?xml version=\"1.0\"?><Error><Code>") + code +
                             "</Code><Message>injected by the test proxy</Message></Error>";
    const std::string text =
        "HTTP/1.1 " + std::to_string(status) + " " + reason +
        "\r\nContent-Type: application/xml\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\nConnection: close\r\n\r\n" + body;
    SendAll(client, text.data(), text.size());
    ::shutdown(client, SHUT_WR);
    Drain(client, 300);
    ::close(client);
  };
  switch (req.fault) {
    case ProxyFault::kStatus500:
      return answer(500, "Internal Server Error", "InternalError");
    case ProxyFault::kStatus503:
      return answer(503, "Service Unavailable", "SlowDown");
    case ProxyFault::kStatus400:
      return answer(400, "Bad Request", "InvalidRequest");
    case ProxyFault::kNoSuchUpload:
      return answer(404, "Not Found", "NoSuchUpload");
    case ProxyFault::kReset:
      return ResetAndClose(client);
    case ProxyFault::kStall: {
      const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(stall_s_);
      while (!stop_ && std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      ::close(client);
      return;
    }
    case ProxyFault::kForward:
    case ProxyFault::kForwardThenReset:
      break;
  }
  int up = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(upstream_port_));
  if (::connect(up, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      !SendAll(up, head.data(), head.size())) {
    ::close(up);
    ResetAndClose(client);
    return;
  }
  const bool reset_answer = req.fault == ProxyFault::kForwardThenReset;
  std::string from_up;  // with reset_answer: upstream bytes not yet passed on
  while (!stop_) {
    pollfd p[2] = {{client, POLLIN, 0}, {up, POLLIN, 0}};
    if (::poll(p, 2, 100) <= 0) continue;
    if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = ::recv(client, buf, sizeof(buf), 0);
      if (n <= 0 || !SendAll(up, buf, static_cast<size_t>(n))) break;
    }
    if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = ::recv(up, buf, sizeof(buf), 0);
      if (n <= 0) break;
      if (!reset_answer) {
        if (!SendAll(client, buf, static_cast<size_t>(n))) break;
        continue;
      }
      from_up.append(buf, static_cast<size_t>(n));
      // Pass "100 Continue" on (the client then sends the body), reset on the first final answer.
      while (from_up.starts_with("HTTP/1.1 100") && from_up.find("\r\n\r\n") != std::string::npos) {
        const size_t end = from_up.find("\r\n\r\n") + 4;
        SendAll(client, from_up.data(), end);
        from_up.erase(0, end);
      }
      if (from_up.size() >= 12 && !from_up.starts_with("HTTP/1.1 100")) {
        ::close(up);
        ResetAndClose(client);
        return;
      }
    }
  }
  ::close(up);
  ::close(client);
}

}  // namespace tern::testing
