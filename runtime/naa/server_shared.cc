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
    : options(options), admission(AdmissionLimits(options)) {}

void ServerShared::Log(const std::string& line) {
  if (!LogEnabled(LogComponent::kServer, LogLevel::kWarn)) return;
  std::string out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = Deadline::Clock::now();
    if (now - window_start_ >= std::chrono::seconds(1)) {
      window_start_ = now;
      lines_in_window_ = 0;
    }
    if (options.max_log_lines_per_second > 0 &&
        lines_in_window_ >= options.max_log_lines_per_second) {
      ++suppressed_;
      return;
    }
    ++lines_in_window_;
    if (suppressed_ > 0) {
      out = "naarpc NAA: (" + std::to_string(suppressed_) + " log lines suppressed)\n";
      suppressed_ = 0;
    }
  }
  out += line;
  if (options.log) {
    options.log(out);
  } else {
    naarpc::Log(LogComponent::kServer, LogLevel::kWarn, out);
  }
}

}  // namespace naarpc::internal
