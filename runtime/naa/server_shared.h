// What one NaaServer's connections share: options, admission (slots and the
// memory budget per peer), the kernels' watchdog, and the rate-limited log.
// Internal to the NAA room.
#ifndef NAARPC_RUNTIME_NAA_SERVER_SHARED_H_
#define NAARPC_RUNTIME_NAA_SERVER_SHARED_H_

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "naarpc/deadline.h"
#include "naarpc/log.h"
#include "naarpc/naa_server.h"
#include "runtime/naa/admission.h"
#include "runtime/naa/kernel_workers.h"

namespace naarpc::internal {

// Shared with the connections: a kernel given up keeps its connection,
// and so this, alive.
class ServerShared {
 public:
  explicit ServerShared(const ServerOptions& options);
  const ServerOptions options;
  RunningKernels running_kernels;
  // Stopped by NaaServer::Shutdown once every connection has ended.
  KernelWatchdog kernel_watchdog;
  // Connection slots and ServerOptions::max_total_bytes, per peer.
  Admission admission;

  // At most ServerOptions::max_log_lines_per_second lines; what is dropped
  // is counted and reported, in a line of its own, before the next line
  // that passes.
  void Log(const std::string& line);

 private:
  LogRateLimiter log_limiter_;
};

}  // namespace naarpc::internal

#endif  // NAARPC_RUNTIME_NAA_SERVER_SHARED_H_
