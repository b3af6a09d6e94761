// naarpc's logging: one facility with levels and per-component filtering.
// NAARPC_LOG (read on first use) or SetLogLevels() sets them:
//   NAARPC_LOG=debug            every component at debug and above
//   NAARPC_LOG=warn,server=debug,verbs=trace
// Components: runtime, client, server, transport, emulated, verbs, calls
// (the logging interceptor), metrics. Default level: info. Lines go to
// the sink (SetLogSink; default stderr); NaaServer's ServerOptions::log, when
// set, stays the sink of that server's lines.
#ifndef NAARPC_LOG_H_
#define NAARPC_LOG_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

#include "naarpc/status.h"

namespace naarpc {

enum class LogLevel : uint8_t { kTrace, kDebug, kInfo, kWarn, kError, kOff };
std::string_view LogLevelName(LogLevel level);  // "trace", ...

enum class LogComponent : uint8_t {
  kRuntime,
  kClient,
  kServer,
  kTransport,
  kEmulated,
  kVerbs,
  kCalls,
  kMetrics,
  kCount,  // not a component
};
std::string_view LogComponentName(LogComponent component);  // "runtime", ...

// Parses a NAARPC_LOG-style spec and applies it (levels not named keep
// theirs; a bare level sets every component). kInvalidArgument, naming the
// bad part, changes nothing.
Status SetLogLevels(std::string_view spec);
void SetLogLevel(LogComponent component, LogLevel level);
LogLevel GetLogLevel(LogComponent component);

namespace log_internal {
extern std::atomic<uint8_t> levels[static_cast<size_t>(LogComponent::kCount)];
void EnsureConfigured();
}  // namespace log_internal

// Whether a line of `level` from `component` would be written: one relaxed
// load (after the first call).
inline bool LogEnabled(LogComponent component, LogLevel level) {
  log_internal::EnsureConfigured();
  return static_cast<uint8_t>(level) >=
         log_internal::levels[static_cast<size_t>(component)].load(std::memory_order_relaxed);
}

// The process-wide sink: gets each line that passes its filter, with its
// level and component. nullptr restores the default, which writes
// "naarpc <level> <component>: <line>" to stderr. Thread-safe.
using LogSink = std::function<void(LogLevel, LogComponent, std::string_view line)>;
void SetLogSink(LogSink sink);

// Writes `line` if enabled.
void Log(LogComponent component, LogLevel level, std::string_view line);

// At most `per_second` lines pass per one-second window; the rest are
// counted, and Allow() reports the count to the first line that passes
// after them (for lines a peer can trigger). 0 = unlimited. Thread-safe.
class LogRateLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  // `now`: the clock (tests); default steady_clock.
  explicit LogRateLimiter(size_t per_second, std::function<Clock::time_point()> now = nullptr)
      : per_second_(per_second), now_(std::move(now)) {}
  // true: write the line; *suppressed = lines dropped since the last one
  // written.
  bool Allow(uint64_t* suppressed);

 private:
  const size_t per_second_;
  const std::function<Clock::time_point()> now_;
  std::mutex mu_;
  std::chrono::steady_clock::time_point window_start_{};
  size_t in_window_ = 0;
  uint64_t suppressed_ = 0;
};

}  // namespace naarpc

#endif  // NAARPC_LOG_H_
