// naarpc's logging facility (naarpc/log.h).
#include "naarpc/log.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace naarpc {

namespace log_internal {

std::atomic<uint8_t> levels[static_cast<size_t>(LogComponent::kCount)] = {};

}  // namespace log_internal

namespace {

Status ApplyLogSpec(std::string_view spec);

std::once_flag configured;

}  // namespace

namespace log_internal {

void EnsureConfigured() {
  std::call_once(configured, [] {
    for (auto& l : levels) l.store(static_cast<uint8_t>(LogLevel::kInfo), std::memory_order_relaxed);
    if (const char* env = std::getenv("NAARPC_LOG"); env != nullptr && *env != '\0') {
      // ApplyLogSpec, not SetLogLevels: that one configures first (here).
      Status s = ApplyLogSpec(env);
      if (!s.ok()) std::fprintf(stderr, "naarpc: NAARPC_LOG ignored: %s\n", s.ToString().c_str());
    }
  });
}

}  // namespace log_internal

namespace {

constexpr std::string_view kLevelNames[] = {"trace", "debug", "info", "warn", "error", "off"};
constexpr std::string_view kComponentNames[] = {"runtime", "client",  "server", "transport",
                                                "emulated", "verbs", "calls",  "metrics"};
static_assert(std::size(kComponentNames) == static_cast<size_t>(LogComponent::kCount));

bool ParseLevel(std::string_view s, LogLevel* level) {
  for (size_t i = 0; i < std::size(kLevelNames); ++i) {
    if (s == kLevelNames[i]) {
      *level = static_cast<LogLevel>(i);
      return true;
    }
  }
  if (s == "warning") {
    *level = LogLevel::kWarn;
    return true;
  }
  return false;
}

std::mutex sink_mu;
LogSink& Sink() {
  static LogSink sink;
  return sink;
}

}  // namespace

std::string_view LogLevelName(LogLevel level) {
  const auto i = static_cast<size_t>(level);
  return i < std::size(kLevelNames) ? kLevelNames[i] : "?";
}

std::string_view LogComponentName(LogComponent component) {
  const auto i = static_cast<size_t>(component);
  return i < std::size(kComponentNames) ? kComponentNames[i] : "?";
}

namespace {

// Parses `spec` and sets the levels it names (a bad spec changes nothing).
// Quotes at most this much of a bad part in its error.
constexpr size_t kMaxQuoted = 64;
std::string Quoted(std::string_view s) {
  return s.size() <= kMaxQuoted ? std::string(s) : std::string(s.substr(0, kMaxQuoted)) + "...";
}

Status ApplyLogSpec(std::string_view spec) {
  // Parse everything first: a bad spec changes nothing. A bare level sets
  // every component; "component=level" parts win over it, whatever the order.
  constexpr size_t kN = static_cast<size_t>(LogComponent::kCount);
  bool have_default = false;
  LogLevel default_level = LogLevel::kInfo;
  bool named[kN] = {};
  LogLevel named_level[kN] = {};
  bool any = false;
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    std::string_view part = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
    if (part.empty()) continue;
    any = true;
    const size_t eq = part.find('=');
    LogLevel level;
    if (eq == std::string_view::npos) {
      if (!ParseLevel(part, &level)) {
        return InvalidArgumentError("log spec: unknown level '" + Quoted(part) +
                                    "' (trace, debug, info, warn, error, off)");
      }
      have_default = true;
      default_level = level;
      continue;
    }
    const std::string_view name = part.substr(0, eq);
    if (!ParseLevel(part.substr(eq + 1), &level)) {
      return InvalidArgumentError("log spec: unknown level in '" + Quoted(part) + "'");
    }
    size_t c = 0;
    while (c < kN && kComponentNames[c] != name) ++c;
    if (c == kN) {
      return InvalidArgumentError("log spec: unknown component '" + Quoted(name) +
                                  "' (runtime, client, server, transport, emulated, verbs, "
                                  "calls, metrics)");
    }
    named[c] = true;
    named_level[c] = level;
  }
  if (!any) {
    return InvalidArgumentError(
        "log spec: empty (a level, e.g. 'warn', and/or component=level parts, comma-separated)");
  }
  for (size_t c = 0; c < kN; ++c) {
    if (named[c]) {
      log_internal::levels[c].store(static_cast<uint8_t>(named_level[c]),
                                    std::memory_order_relaxed);
    } else if (have_default) {
      log_internal::levels[c].store(static_cast<uint8_t>(default_level),
                                    std::memory_order_relaxed);
    }
  }
  return Status::Ok();
}

}  // namespace

Status SetLogLevels(std::string_view spec) {
  log_internal::EnsureConfigured();  // NAARPC_LOG first, so that `spec` wins over it
  return ApplyLogSpec(spec);
}

void SetLogLevel(LogComponent component, LogLevel level) {
  log_internal::EnsureConfigured();
  log_internal::levels[static_cast<size_t>(component)].store(static_cast<uint8_t>(level),
                                                             std::memory_order_relaxed);
}

LogLevel GetLogLevel(LogComponent component) {
  log_internal::EnsureConfigured();
  return static_cast<LogLevel>(
      log_internal::levels[static_cast<size_t>(component)].load(std::memory_order_relaxed));
}

void SetLogSink(LogSink sink) {
  std::lock_guard<std::mutex> lock(sink_mu);
  Sink() = std::move(sink);
}

void Log(LogComponent component, LogLevel level, std::string_view line) {
  if (!LogEnabled(component, level)) return;
  std::lock_guard<std::mutex> lock(sink_mu);
  if (Sink()) {
    Sink()(level, component, line);
    return;
  }
  std::fprintf(stderr, "naarpc %.*s %.*s: %.*s\n", static_cast<int>(LogLevelName(level).size()),
               LogLevelName(level).data(), static_cast<int>(LogComponentName(component).size()),
               LogComponentName(component).data(), static_cast<int>(line.size()), line.data());
}

bool LogRateLimiter::Allow(uint64_t* suppressed) {
  *suppressed = 0;
  if (per_second_ == 0) return true;
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = now_ ? now_() : Clock::now();
  if (now - window_start_ >= std::chrono::seconds(1)) {
    window_start_ = now;
    in_window_ = 0;
  }
  if (in_window_ >= per_second_) {
    ++suppressed_;
    return false;
  }
  ++in_window_;
  *suppressed = suppressed_;
  suppressed_ = 0;
  return true;
}

}  // namespace naarpc
