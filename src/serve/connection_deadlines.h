// Deadlines for the phases of an HTTP connection in which the client, not the server, is the one to act:
// sending a request's headers, then its body. cpp-httplib serves each connection on one thread of a fixed
// pool and its read timeout applies to each read, so a client that sends a byte every few seconds
// (slowloris) holds a thread for as long as it likes; enough of them and no other request is answered.
// Here a connection has `timeout_s` from when it is first seen to send its headers, `timeout_s` more for its
// body, and (kept alive) `timeout_s` from the end of each response to send the next request's headers. One
// past its deadline is shut down (the client sees the connection closed, never a 5xx) and its thread goes
// back to the pool. A connection whose complete headers wait unread in the socket (queued for a thread,
// behind slow ones) is a well-formed request and is left alone. While a handler runs there is no deadline
// (the request timeout and the write timeout apply).
//
// Debian's cpp-httplib 0.11 hands out neither the accepted socket nor a hook before the headers are read, so
// a watchdog thread finds the server's connections itself (the process's sockets whose local port is the
// server's, /proc/self/fd, every 200 ms) and the handlers report the phases by the client's address and port.
// Only server.cpp uses it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace tern {

class ConnectionDeadlines {
 public:
  explicit ConnectionDeadlines(double timeout_s);
  ~ConnectionDeadlines();  // stops the watchdog
  ConnectionDeadlines(const ConnectionDeadlines&) = delete;
  ConnectionDeadlines& operator=(const ConnectionDeadlines&) = delete;

  void Start(int port);  // after the server is bound: watch the connections to `port`

  // From the connection's thread, naming it by the client's address and port (Request::remote_addr/port):
  void HeadersRead(const std::string& addr, int port);      // the body now has timeout_s
  void HandlerStarted(const std::string& addr, int port);   // no deadline while the server works
  void ResponseWritten(const std::string& addr, int port);  // the next request's headers have timeout_s

  int64_t cut_off() const;  // connections shut down for missing a deadline so far

 private:
  using Clock = std::chrono::steady_clock;
  void Set(const std::string& addr, int port, Clock::time_point deadline);
  void Watch();
  void Sweep(Clock::time_point now);

  const Clock::duration timeout_;
  int port_ = -1;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  int64_t cut_off_ = 0;
  struct Entry {
    Clock::time_point deadline, touched;  // touched: last seen by a sweep or set by a thread
  };
  std::map<std::string, Entry> deadlines_;  // by "addr port" of the client
  std::thread watchdog_;
};

}  // namespace tern
