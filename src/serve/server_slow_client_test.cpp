// Slow and oversized clients against the server, on raw loopback sockets:
// - slowloris: many connections that send their headers one byte at a time, more of them than the server has
//   HTTP threads. None gets a 5xx, a well-formed request on another connection is still answered, and the
//   slow ones are closed once they have taken the read timeout (io_timeout_s) to send their headers.
// - an oversized body: a Content-Length over the limit with only a few bytes of body is refused with 413 at
//   once, from the header, not after waiting for the body that never comes.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "serve/storm.h"
#include "testing/server_fixture.h"

namespace tern {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int Connect(int port, double timeout_s) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{static_cast<time_t>(timeout_s),
             static_cast<suseconds_t>((timeout_s - static_cast<int>(timeout_s)) * 1e6)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& s) {
  for (size_t done = 0; done < s.size();) {
    const ssize_t n = ::send(fd, s.data() + done, s.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Reads until the server closes the connection or the socket's timeout passes.
std::string ReceiveAll(int fd) {
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

int StatusOf(const std::string& raw) {
  return raw.rfind("HTTP/1.1 ", 0) == 0 ? std::atoi(raw.c_str() + 9) : 0;
}

// A GET /health on its own connection: its status (0 = no answer within timeout_s) and how long it took.
std::pair<int, double> Health(int port, double timeout_s) {
  const auto t0 = Clock::now();
  const int fd = Connect(port, timeout_s);
  if (fd < 0) return {0, Since(t0)};
  std::string raw;
  if (SendAll(fd, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"))
    raw = ReceiveAll(fd);
  ::close(fd);
  return {StatusOf(raw), Since(t0)};
}

constexpr int kThreads = 4;       // HTTP threads of the server under test
constexpr int kTimeoutS = 2;      // its io_timeout_s
constexpr int kSlowClients = 12;  // three times its threads

class SlowClientTest : public testing::ServerTest {
 protected:
  static void SetUpTestSuite() {
    ServerOptions so = DefaultOptions();
    so.http_threads = kThreads;
    so.io_timeout_s = kTimeoutS;
    StartServer(so);
  }
};

TEST_F(SlowClientTest, SlowlorisHeadersAreCutOffAndOtherRequestsAnswered) {
  const int port = server_->port();
  ASSERT_EQ(Health(port, 10).first, 200) << "the server answers before the slow clients come";

  struct Slow {
    int fd = -1;
    Clock::time_point opened;
    double closed_after_s = -1;  // when the server closed it, from `opened`
    std::string received;
  };
  std::vector<Slow> slow(kSlowClients);
  for (Slow& s : slow) {
    s.fd = Connect(port, 0.05);
    ASSERT_GE(s.fd, 0);
    s.opened = Clock::now();
    ASSERT_TRUE(SendAll(s.fd, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: "));
  }
  // A well-formed request on another connection while every HTTP thread could be held by a slow client.
  std::pair<int, double> normal{0, 0};
  std::thread normal_client([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    normal = Health(port, 4 * kTimeoutS + 5);
  });

  // Each slow client sends one more byte every 100 ms (well inside the read timeout, so a per-read timeout
  // alone would never fire) for at most 4 timeouts, noting when the server closes it.
  const auto t0 = Clock::now();
  while (Since(t0) < 4 * kTimeoutS + 2) {
    bool any_open = false;
    for (Slow& s : slow) {
      if (s.closed_after_s >= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(s.fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) s.received.append(buf, static_cast<size_t>(n));
      const bool closed = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) ||
                          ::send(s.fd, "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0;
      if (closed) {
        s.closed_after_s = Since(s.opened);
        ::close(s.fd);
      } else {
        any_open = true;
      }
    }
    if (!any_open) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  normal_client.join();

  double first = 1e9, last = -1;
  for (const Slow& s : slow)
    if (s.closed_after_s >= 0)
      first = std::min(first, s.closed_after_s), last = std::max(last, s.closed_after_s);
  std::printf(
      "slowloris: %d slow clients, %d threads, io_timeout %d s: the normal request answered %d in %.2f s; "
      "slow ones closed after %.2f-%.2f s\n",
      kSlowClients, kThreads, kTimeoutS, normal.first, normal.second, first, last);
  EXPECT_EQ(normal.first, 200)
      << "a well-formed request was not answered while slow clients held the threads";
  // Queued behind the slow clients, it waits at most for one read timeout (they are cut off counting from
  // when they connected) and a short grace; never for each batch of slow clients in turn.
  EXPECT_LT(normal.second, 2 * kTimeoutS + 1.5) << "answered after " << normal.second << " s";
  for (size_t i = 0; i < slow.size(); i++) {
    EXPECT_GE(slow[i].closed_after_s, 0)
        << "slow client " << i << " is still connected after " << 4 * kTimeoutS + 2 << " s";
    if (slow[i].closed_after_s >= 0) {
      EXPECT_GE(slow[i].closed_after_s, kTimeoutS - 0.5) << "slow client " << i << " was cut off early";
      EXPECT_LT(slow[i].closed_after_s, 2 * kTimeoutS + 1.5) << "slow client " << i;
    }
    const int status = StatusOf(slow[i].received);
    EXPECT_TRUE(status == 0 || (status >= 400 && status < 500))
        << "slow client " << i << " got: " << slow[i].received.substr(0, 80);
    if (slow[i].closed_after_s < 0) ::close(slow[i].fd);
  }
  EXPECT_EQ(Health(port, 10).first, 200) << "the server still serves";
  for (const auto& [code, n] : RequestsByCode(Metrics()))
    EXPECT_LT(code, 500) << n << " responses with HTTP " << code;
}

TEST_F(SlowClientTest, ContentLengthOverTheLimitIsRefusedWith413BeforeTheBodyIsRead) {
  const int port = server_->port();
  for (const bool keep_alive : {false, true}) {
    const int fd = Connect(port, 4 * kTimeoutS);
    ASSERT_GE(fd, 0);
    const auto t0 = Clock::now();
    // 100 MB announced (the limit is 256 KiB), 10 bytes sent; the client then waits without closing.
    ASSERT_TRUE(SendAll(fd, std::string("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n") +
                                (keep_alive ? "" : "Connection: close\r\n") + "Authorization: Bearer " +
                                testing::kKey +
                                "\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n"
                                "{\"prompt\":"));
    char buf[4096];
    std::string raw;
    while (raw.find("}") == std::string::npos) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      raw.append(buf, static_cast<size_t>(n));
    }
    const double took = Since(t0);
    ::close(fd);
    EXPECT_EQ(StatusOf(raw), 413) << raw.substr(0, 200);
    EXPECT_NE(raw.find("larger than 262144 bytes"), std::string::npos) << raw;
    // Well inside the read timeout: the answer comes from the header, not after waiting for the body.
    EXPECT_LT(took, kTimeoutS * 0.5) << "413 after " << took << " s (keep-alive " << keep_alive << ")";
  }
  EXPECT_EQ(Health(port, 10).first, 200) << "the server still serves";
}

}  // namespace
}  // namespace tern
