#include "serve/storm.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <fmt/format.h>

namespace tern {

namespace {

constexpr int kKinds = static_cast<int>(StormKind::kCount);

int Connect(const StormOptions& o, int rcvbuf = 0) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{static_cast<time_t>(o.io_timeout_s), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (rcvbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(o.port));
  ::inet_pton(AF_INET, o.host.c_str(), &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::send(fd, s.data() + done, s.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Reads until the server closes (or `until` appears, or the timeout); a slow reader takes `chunk` bytes
// per read and sleeps `pause_s` between reads.
std::string Receive(int fd, const std::string& until = "", size_t chunk = 65536, double pause_s = 0) {
  std::string out;
  std::vector<char> buf(chunk);
  while (true) {
    ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n <= 0) break;
    out.append(buf.data(), static_cast<size_t>(n));
    if (!until.empty() && out.find(until) != std::string::npos) break;
    if (pause_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(pause_s));
  }
  return out;
}

int StatusOf(const std::string& raw) {
  return raw.rfind("HTTP/1.1 ", 0) == 0 || raw.rfind("HTTP/1.0 ", 0) == 0 ? std::atoi(raw.c_str() + 9) : 0;
}

std::string Head(const StormOptions& o, const std::string& path, size_t content_length) {
  std::string h =
      fmt::format("POST {} HTTP/1.1\r\nHost: {}:{}\r\nConnection: close\r\n", path, o.host, o.port);
  if (!o.api_key.empty()) h += "Authorization: Bearer " + o.api_key + "\r\n";
  return h + fmt::format("Content-Type: application/json\r\nContent-Length: {}\r\n\r\n", content_length);
}

std::string Ids(int n, int i, int vocab) {
  std::string s = "[";
  uint32_t x = 2654435761u * static_cast<uint32_t>(i + 1);
  for (int k = 0; k < n; k++) {
    x = x * 1664525u + 1013904223u;
    s += (k ? "," : "") + std::to_string(3 + (x >> 8) % static_cast<uint32_t>(std::max(4, vocab - 3)));
  }
  return s + "]";
}

std::string CompletionBody(const StormOptions& o, int i, int prompt, int max_tokens, bool stream) {
  return fmt::format(R"({{"prompt":{},"max_tokens":{},"temperature":0.8,"seed":{}{}}})",
                     Ids(prompt, i, o.vocab), max_tokens, i,
                     stream ? R"(,"stream":true,"stream_options":{"include_usage":true})" : "");
}

std::string ChatBody(const StormOptions& o, int i, bool stream) {
  return fmt::format(
      R"({{"messages":[{{"role":"system","content":"Answer briefly."}},{{"role":"user","content":"Tell me about request {}."}}],"max_tokens":{},"seed":{}{}}})",
      i, o.max_tokens, i, stream ? R"(,"stream":true)" : "");
}

// One request of kind k; the status (0 = no answer) and whether a 200 was a whole response.
std::pair<int, bool> One(const StormOptions& o, StormKind k, int i) {
  std::string path = "/v1/completions", body;
  bool stream = false;
  switch (k) {
    case StormKind::kCompletion:
      body = CompletionBody(o, i, 8, o.max_tokens, false);
      break;
    case StormKind::kCompletionStream:
    case StormKind::kSlowReader:
      body = CompletionBody(o, i, 8, o.max_tokens, stream = true);
      break;
    case StormKind::kChat:
      path = "/v1/chat/completions", body = ChatBody(o, i, false);
      break;
    case StormKind::kChatStream:
      path = "/v1/chat/completions", body = ChatBody(o, i, stream = true);
      break;
    case StormKind::kLongPrompt:
      body = CompletionBody(o, i, o.long_prompt_tokens, o.max_tokens, false);
      break;
    case StormKind::kVanishStream:
      body = CompletionBody(o, i, 8, 4 * o.max_tokens, true);
      break;
    case StormKind::kVanishRequest:
      body = CompletionBody(o, i, 8, 4 * o.max_tokens, false);
      break;
    case StormKind::kMalformed: {
      static const char* kBad[] = {R"({"prompt": [1, 2,)", R"({"prompt": "x", "max_tokens": "many"})", "[]",
                                   R"({"messages": "hi"})"};
      body = kBad[(i / kKinds) % 4];
      if (body[2] == 'm') path = "/v1/chat/completions";
      break;
    }
    default:
      break;
  }
  const int fd = Connect(o, k == StormKind::kSlowReader ? 2048 : 0);
  if (fd < 0) return {0, false};
  std::string raw;
  if (k == StormKind::kOversized) {
    // The whole body, as a real client sends it (cpp-httplib reads and drops it, then answers 413; a client
    // that promises a body and never sends it holds its HTTP thread until the read timeout).
    std::string big = R"({"prompt": ")" + std::string(o.oversized_bytes, 'a') + R"("})";
    SendAll(fd, Head(o, path, big.size()) + big);
    raw = Receive(fd);
  } else if (k == StormKind::kTruncatedBody) {
    SendAll(fd, Head(o, path, 1000) + R"({"prompt": "hello",)");
    ::shutdown(fd, SHUT_WR);
    raw = Receive(fd);
  } else if (k == StormKind::kGarbage) {
    static const char kTlsHello[] = "\x16\x03\x01\x02\x00 NOT HTTP AT ALL\r\n\r\n";  // a TLS client
    SendAll(fd, std::string(kTlsHello, sizeof(kTlsHello) - 1));
    raw = Receive(fd);
  } else {
    SendAll(fd, Head(o, path, body.size()) + body);
    if (k == StormKind::kVanishRequest) {
      linger l{1, 0};
      ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    } else if (k == StormKind::kVanishStream) {
      raw = Receive(fd, "data: ");
      if ((i / kKinds) % 2 == 0) {  // half of them reset, half close politely
        linger l{1, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
      }
    } else if (k == StormKind::kSlowReader) {
      raw = Receive(fd, "", 256, o.slow_read_s / 16);
    } else {
      raw = Receive(fd);
    }
  }
  ::close(fd);
  const int status = StatusOf(raw);
  bool whole = true;
  if (status == 200 && WellFormed(k))
    whole =
        stream ? raw.find("data: [DONE]") != std::string::npos : raw.find("\"usage\"") != std::string::npos;
  return {status, whole};
}

}  // namespace

const char* StormKindName(StormKind k) {
  static const char* kNames[] = {
      "completion",        "completion stream",  "chat",      "chat stream", "long prompt",    "slow reader",
      "vanish mid-stream", "vanish mid-request", "malformed", "oversized",   "truncated body", "garbage"};
  return kNames[static_cast<int>(k)];
}

bool WellFormed(StormKind k) {
  return k <= StormKind::kSlowReader;
}

StormReport RunStorm(const StormOptions& o) {
  StormReport r;
  r.requests = o.requests;
  r.concurrency = o.concurrency;
  std::atomic<int> next{0};
  std::mutex mu;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> clients;
  for (int c = 0; c < o.concurrency; c++) {
    clients.emplace_back([&] {
      for (int i = next++; i < o.requests; i = next++) {
        const StormKind k = static_cast<StormKind>(i % kKinds);
        const auto t1 = std::chrono::steady_clock::now();
        const auto [status, whole] = One(o, k, i);
        const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
        std::lock_guard<std::mutex> lk(mu);
        double& slowest = r.max_seconds[StormKindName(k)];
        slowest = std::max(slowest, took);
        r.status[StormKindName(k)][status]++;
        std::string problem;
        if (status >= 500 && status != 503) {
          r.server_errors++;
          problem = "HTTP " + std::to_string(status);
        }
        if (WellFormed(k)) {
          r.well_formed++;
          if (status == 200) r.ok++;
          if (status == 429 || status == 503) r.backpressure++;
          if (status == 0) r.unanswered++, problem = "no answer";
          if (status != 0 && status != 200 && status != 429 && status != 503)
            r.wrong_status++, problem = "HTTP " + std::to_string(status);
          if (status == 200 && !whole) r.wrong_status++, problem = "an incomplete 200 response";
        } else if ((k == StormKind::kMalformed && status != 400) ||
                   (k == StormKind::kOversized && status != 413)) {
          r.wrong_status++;
          problem = "HTTP " + std::to_string(status);
        }
        if (!problem.empty() && r.problems.size() < 10)
          r.problems.push_back(fmt::format("request {} ({}): {}", i, StormKindName(k), problem));
      }
    });
  }
  for (auto& t : clients) t.join();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::string StormReport::Summary() const {
  std::string s = fmt::format(
      "{} requests at {} connections in {:.1f} s: {} well-formed ({} answered 200, {} "
      "429/503, {} unanswered), {} other 5xx, {} wrong statuses.",
      requests, concurrency, seconds, well_formed, ok, backpressure, unanswered, server_errors, wrong_status);
  for (const auto& [kind, codes] : status) {
    s += fmt::format(" {}:", kind);
    for (const auto& [code, n] : codes)
      s += fmt::format(" {}x{}", n, code == 0 ? "none" : std::to_string(code));
    s += fmt::format(" (slowest {:.2f} s);", max_seconds.count(kind) ? max_seconds.at(kind) : 0.0);
  }
  for (const auto& p : problems) s += "\n  " + p;
  return s;
}

std::map<std::string, double> ScrapeMetrics(const StormOptions& o) {
  std::map<std::string, double> out;
  const int fd = Connect(o);
  if (fd < 0) return out;
  std::string req =
      fmt::format("GET /metrics HTTP/1.1\r\nHost: {}:{}\r\nConnection: close\r\n", o.host, o.port);
  if (!o.api_key.empty()) req += "Authorization: Bearer " + o.api_key + "\r\n";
  SendAll(fd, req + "\r\n");
  const std::string raw = Receive(fd);
  ::close(fd);
  if (StatusOf(raw) != 200) return out;
  std::istringstream in(raw.substr(raw.find("\r\n\r\n") + 4));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    out[line.substr(0, sp)] = std::strtod(line.c_str() + sp + 1, nullptr);
  }
  return out;
}

std::map<int, double> RequestsByCode(const std::map<std::string, double>& metrics) {
  std::map<int, double> out;
  for (const auto& [name, v] : metrics) {
    if (name.rfind("tern_http_requests_total{", 0) != 0) continue;
    const size_t c = name.find("code=\"");
    if (c != std::string::npos) out[std::atoi(name.c_str() + c + 6)] += v;
  }
  return out;
}

long ProcessRssKb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return -1;
}

}  // namespace tern
