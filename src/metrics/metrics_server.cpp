#include "metrics/metrics_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <thread>

namespace tern {

struct MetricsServer::Impl {
  httplib::Server http;
  std::thread thread;
  int port = -1;
};

MetricsServer::MetricsServer() : impl_(std::make_unique<Impl>()) {}

MetricsServer::~MetricsServer() {
  if (!impl_->thread.joinable()) return;
  // stop() before listen() has begun would be lost: Start waited for it, so it is running.
  impl_->http.stop();
  impl_->thread.join();
}

int MetricsServer::port() const {
  return impl_->port;
}

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& bind, int port,
                                                            std::function<std::string()> render) {
  if (port < 0 || port > 65535)
    return Status::InvalidArgument(
        fmt::format("metrics.port {} is not a TCP port: give 1 to 65535 (0 = off)", port));
  std::unique_ptr<MetricsServer> s(new MetricsServer());
  Impl& m = *s->impl_;
  m.http.new_task_queue = [] {
    return new httplib::ThreadPool(2);
  };  // a scraper or two; training owns the CPU
  // httplib's default sets SO_REUSEPORT, with which a second trainer would bind the same port and share its
  // scrapes; SO_REUSEADDR alone still rebinds a port whose last connections linger in TIME_WAIT.
  m.http.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  m.http.set_read_timeout(5, 0);
  m.http.set_write_timeout(5, 0);
  m.http.Get("/metrics", [render](const httplib::Request&, httplib::Response& res) {
    res.set_content(render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  m.http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("tern train: Prometheus metrics at /metrics\n", "text/plain");
  });
  m.port = port == 0 ? m.http.bind_to_any_port(bind) : (m.http.bind_to_port(bind, port) ? port : -1);
  if (m.port < 0) {
    return Status::InvalidArgument(fmt::format(
        "cannot serve live metrics on {}:{}: the port is in use or the address is not this machine's; "
        "choose another --metrics-port (metrics.port) or metrics.bind",
        bind, port));
  }
  m.thread = std::thread([&m] { m.http.listen_after_bind(); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!m.http.is_running() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!m.http.is_running()) {
    m.thread.join();  // listen returned at once: the socket is gone
    return Status::Internal(fmt::format("the live metrics server on {}:{} did not start", bind, m.port));
  }
  return s;
}

}  // namespace tern
