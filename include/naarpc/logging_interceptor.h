// LoggingInterceptor: one line per call (routine, peer, bytes, status,
// duration) to naarpc's log (naarpc/log.h), component "calls": successful
// calls at debug, failed ones at warn (rate-limited: a peer can trigger
// them). Add it to StubOptions::interceptors or ServerOptions::interceptors.
#ifndef NAARPC_LOGGING_INTERCEPTOR_H_
#define NAARPC_LOGGING_INTERCEPTOR_H_

#include <cstddef>
#include <functional>
#include <utility>

#include "naarpc/interceptor.h"
#include "naarpc/log.h"

namespace naarpc {

class LoggingInterceptor final : public Interceptor {
 public:
  explicit LoggingInterceptor(size_t max_failure_lines_per_second = 50,
                              std::function<LogRateLimiter::Clock::time_point()> now = nullptr)
      : limiter_(max_failure_lines_per_second, std::move(now)) {}
  void OnCallEnd(const CallInfo& call, const Status& status) override;

 private:
  LogRateLimiter limiter_;
};

}  // namespace naarpc

#endif  // NAARPC_LOGGING_INTERCEPTOR_H_
