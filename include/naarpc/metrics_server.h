// MetricsServer: serves a StatsRegistry (naarpc/stats_registry.h) in the
// Prometheus text exposition format over HTTP (GET /metrics; any other path
// is 404), on a thread of its own. NaaServer starts one when
// ServerOptions::metrics_port is set; a host program can start its own.
// Uses Debian's cpp-httplib.
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

  // Listens on host:port (port 0: an ephemeral one, see port()).
  // kUnavailable if it cannot bind.
  static Result<std::unique_ptr<MetricsServer>> Start(std::shared_ptr<StatsRegistry> registry,
                                                      const std::string& host, uint16_t port);
  uint16_t port() const;
  void Stop();

 private:
  class Impl;
  explicit MetricsServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace naarpc

#endif  // NAARPC_METRICS_SERVER_H_
