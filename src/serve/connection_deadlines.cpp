#include "serve/connection_deadlines.h"

#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <set>

namespace tern {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kEvery = std::chrono::milliseconds(200);  // how often the connections are looked at
constexpr auto kShutDown = Clock::time_point::min();     // a connection already shut down
constexpr auto kNone = Clock::time_point::max();         // a handler runs: no deadline

std::string Key(const std::string& addr, int port) {
  return addr + " " + std::to_string(port);
}

int PortOf(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return -1;
}

// The client's "addr port" of socket `fd` if it is a connection accepted on `port`, else "".
std::string ConnectionTo(int fd, int port) {
  sockaddr_storage local{}, peer{};
  socklen_t len = sizeof(local);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0 || PortOf(local) != port) return "";
  len = sizeof(peer);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) return "";  // the listening socket
  char host[NI_MAXHOST];
  // As httplib names Request::remote_addr.
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&peer), len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST))
    return "";
  return Key(host, PortOf(peer));
}

// Whether a whole request head waits unread in the socket: a well-formed request queued for a thread.
bool HeadersWaiting(int fd) {
  char buf[8192];
  const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);
  return n > 0 && std::string_view(buf, static_cast<size_t>(n)).find("\r\n\r\n") != std::string_view::npos;
}

}  // namespace

ConnectionDeadlines::ConnectionDeadlines(double timeout_s)
    : timeout_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s))) {}

ConnectionDeadlines::~ConnectionDeadlines() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

void ConnectionDeadlines::Start(int port) {
  port_ = port;
  if (!watchdog_.joinable()) watchdog_ = std::thread([this] { Watch(); });
}

void ConnectionDeadlines::Set(const std::string& addr, int port, Clock::time_point deadline) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = deadlines_[Key(addr, port)];
  if (e.deadline != kShutDown) e.deadline = deadline;
  e.touched = Clock::now();
}
void ConnectionDeadlines::HeadersRead(const std::string& addr, int port) {
  Set(addr, port, Clock::now() + timeout_);
}
void ConnectionDeadlines::HandlerStarted(const std::string& addr, int port) {
  Set(addr, port, kNone);
}
void ConnectionDeadlines::ResponseWritten(const std::string& addr, int port) {
  Set(addr, port, Clock::now() + timeout_);
}

int64_t ConnectionDeadlines::cut_off() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cut_off_;
}

void ConnectionDeadlines::Watch() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    Sweep(Clock::now());
    lock.lock();
    cv_.wait_for(lock, kEvery, [this] { return stop_; });
  }
}

void ConnectionDeadlines::Sweep(Clock::time_point now) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return;
  std::set<std::string> seen;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const int fd = std::atoi(e->d_name);
    if (fd == ::dirfd(dir)) continue;
    const std::string key = ConnectionTo(fd, port_);
    if (key.empty()) continue;
    seen.insert(key);
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, is_new] = deadlines_.try_emplace(key, Entry{now + timeout_, now});
    Clock::time_point& deadline = it->second.deadline;
    it->second.touched = std::max(it->second.touched, now);
    if (is_new || deadline == kShutDown || deadline == kNone || deadline > now) continue;
    if (HeadersWaiting(fd)) {  // a complete request waiting for a thread: look again shortly
      deadline = now + kEvery;
      continue;
    }
    // The thread blocked reading this socket wakes with end of file and closes the connection.
    ::shutdown(fd, SHUT_RDWR);
    deadline = kShutDown;
    cut_off_++;
  }
  ::closedir(dir);
  std::lock_guard<std::mutex> lock(mu_);
  // Connections gone since the sweep began (not seen, not set by a thread meanwhile) are forgotten.
  for (auto it = deadlines_.begin(); it != deadlines_.end();)
    it = seen.count(it->first) || it->second.touched >= now ? std::next(it) : deadlines_.erase(it);
}

}  // namespace tern
