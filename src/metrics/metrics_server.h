// `tern train --metrics-port N` (metrics.port, metrics.bind): serves GET /metrics, Prometheus text
// (live_metrics.h), from a cpp-httplib server on its own thread; the training thread never waits on it.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/status.h"

namespace tern {

class MetricsServer {
 public:
  // Binds `bind`:`port` now (0 = any free port, for tests) and serves `render()`'s text at /metrics. A port
  // in use, or an address not on this machine, is InvalidArgument naming the key to change.
  [[nodiscard]] static Result<std::unique_ptr<MetricsServer>> Start(const std::string& bind, int port,
                                                                    std::function<std::string()> render);
  ~MetricsServer();  // stops serving and joins the thread
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;
  int port() const;

 private:
  MetricsServer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tern
