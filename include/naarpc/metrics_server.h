// MetricsServer: serves a StatsRegistry (naarpc/stats_registry.h) in the
// Prometheus text exposition format over HTTP (GET /metrics; any other path
// is 404), on threads of its own: one listening, four answering. One request
// per connection; a connection whose request takes over 2 s (or exceeds
// 64 KiB), or whose response takes over 5 s, is closed, so idle or slow
// clients hold a worker only that long (docs/operating.md). NaaServer starts
// one when ServerOptions::metrics_port is set; a host program can start its
// own. Uses Debian's cpp-httplib.
#ifndef NAARPC_METRICS_SERVER_H_
#define NAARPC_METRICS_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "naarpc/stats_registry.h"
#include "naarpc/status.h"

namespace naarpc {

class MetricsServer {
 public:
  ~MetricsServer();  // Stop()
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Listens on host:port (port 0: an ephemeral one, see port()); the port
  // is not shared (no SO_REUSEPORT). kUnavailable if it cannot bind:
  // "metrics server: cannot listen on HOST:PORT: Address already in use".
  static Result<std::unique_ptr<MetricsServer>> Start(std::shared_ptr<StatsRegistry> registry,
                                                      const std::string& host, uint16_t port);
  uint16_t port() const;
  // Closes the port and the connections being served; returns once the
  // threads have ended.
  void Stop();

 private:
  class Impl;
  explicit MetricsServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace naarpc

#endif  // NAARPC_METRICS_SERVER_H_
