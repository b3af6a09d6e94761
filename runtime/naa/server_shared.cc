#include "runtime/naa/server_shared.h"

#include "naarpc/log.h"

namespace naarpc::internal {

namespace {

Admission::Limits AdmissionLimits(const ServerOptions& o) {
  Admission::Limits l;
  l.max_connections = o.max_connections;
  l.max_connections_per_peer =
      o.max_connections_per_peer == 0 ? o.max_connections : o.max_connections_per_peer;
  l.max_handshakes_per_peer = o.max_handshakes_per_peer;
  l.max_bytes = o.max_total_bytes;
  l.max_bytes_per_peer = o.max_bytes_per_peer == 0 ? o.max_total_bytes : o.max_bytes_per_peer;
  return l;
}

}  // namespace

ServerShared::ServerShared(const ServerOptions& options)
    : options(options),
      admission(AdmissionLimits(options)),
      log_limiter_(options.max_log_lines_per_second) {}

void ServerShared::Log(const std::string& line) {
  if (!LogEnabled(LogComponent::kServer, LogLevel::kWarn)) return;
  uint64_t suppressed = 0;
  if (!log_limiter_.Allow(&suppressed)) return;
  auto write = [this](const std::string& out) {
    if (options.log) {
      options.log(out);
    } else {
      naarpc::Log(LogComponent::kServer, LogLevel::kWarn, out);
    }
  };
  // A line of its own, so that every entry stays one line.
  if (suppressed > 0) {
    write("naarpc NAA: (" + std::to_string(suppressed) + " log lines suppressed)");
  }
  write(line);
}

}  // namespace naarpc::internal
