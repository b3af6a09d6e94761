// Per-routine statistics: histogram snapshots, the registry, and its
// Prometheus text rendering (naarpc/histogram.h, call_stats.h,
// stats_registry.h).
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <string>

#include "naarpc/call_stats.h"
#include "naarpc/histogram.h"
#include "naarpc/protocol.h"
#include "naarpc/stats_registry.h"

namespace naarpc {

LatencyHistogram::Snapshot LatencyHistogram::Take() const {
  Snapshot s;
  for (size_t i = 0; i < kBuckets; ++i) {
    const uint64_t n = buckets_[i].load(std::memory_order_relaxed);
    if (n != 0) s.buckets.emplace_back(static_cast<uint32_t>(i), n);
    s.count += n;
  }
  s.sum = sum_.load(std::memory_order_relaxed);
  s.max = max_.load(std::memory_order_relaxed);
  return s;
}

uint64_t LatencyHistogram::Snapshot::Percentile(double q) const {
  uint64_t total = 0;
  for (const auto& b : buckets) total += b.second;
  if (total == 0) return 0;
  if (q < 0) q = 0;
  if (q > 1) q = 1;
  uint64_t rank = static_cast<uint64_t>(std::ceil(q * static_cast<double>(total)));
  if (rank == 0) rank = 1;
  uint64_t seen = 0;
  for (const auto& [bucket, n] : buckets) {
    seen += n;
    if (seen >= rank) {
      const uint64_t upper = LatencyHistogram::BucketUpper(bucket);
      return max != 0 && upper > max ? max : upper;
    }
  }
  return max;
}

uint64_t LatencyHistogram::Snapshot::CountAtMost(uint64_t bound) const {
  uint64_t n = 0;
  for (const auto& [bucket, c] : buckets) {
    if (LatencyHistogram::BucketUpper(bucket) > bound) break;
    n += c;
  }
  return n;
}

std::string_view CallSideName(CallSide side) {
  return side == CallSide::kHost ? "host" : "naa";
}

std::string NaaStatusMetricName(uint8_t naa_status) {
  switch (naa_status) {
    case kNaaStatusSuccess: return "OK";
    case kNaaStatusSocketUnavailable: return "NAA_SOCKET_UNAVAILABLE";
    case kNaaStatusKernelTimeout: return "NAA_KERNEL_TIMEOUT";
    case kNaaStatusUnknownFunction: return "NAA_UNKNOWN_FUNCTION";
    case kNaaStatusBadRegionLayout: return "NAA_BAD_REGION_LAYOUT";
    case kNaaStatusKernelFailed: return "NAA_KERNEL_FAILED";
    default: {
      char buf[16];
      std::snprintf(buf, sizeof buf, "NAA_0x%02x", unsigned{naa_status});
      return buf;
    }
  }
}

std::string StatusMetricName(const Status& status) {
  if (status.code() == StatusCode::kNaaError && status.wire_code().has_value()) {
    return NaaStatusMetricName(*status.wire_code());
  }
  return std::string(StatusCodeName(status.code()));
}

uint64_t RoutineStats::Snapshot::error_count() const {
  uint64_t n = 0;
  for (const auto& e : errors) n += e.second;
  return n;
}

RoutineStats::Snapshot RoutineStats::Take() const {
  Snapshot s;
  s.side = side_;
  s.routine = routine_;
  s.peer = peer_;
  // completed_ first (acquire): what it counts is in the other fields.
  s.completed = completed_.load(std::memory_order_acquire);
  // Read after completed_: never fewer started than completed.
  s.started = started_.load(std::memory_order_relaxed);
  s.in_flight = s.started >= s.completed ? s.started - s.completed : 0;
  s.bytes_sent = bytes_sent_.load(std::memory_order_relaxed);
  s.bytes_received = bytes_received_.load(std::memory_order_relaxed);
  for (size_t c = 1; c < kCodes; ++c) {
    const uint64_t n = code_errors_[c].load(std::memory_order_relaxed);
    if (n != 0) {
      s.errors.emplace_back(std::string(StatusCodeName(static_cast<StatusCode>(c))), n);
    }
  }
  for (size_t c = 1; c < naa_errors_.size(); ++c) {
    const uint64_t n = naa_errors_[c].load(std::memory_order_relaxed);
    if (n != 0) s.errors.emplace_back(NaaStatusMetricName(static_cast<uint8_t>(c)), n);
  }
  s.latency_ns = latency_.Take();
  return s;
}

const std::shared_ptr<StatsRegistry>& StatsRegistry::Default() {
  static const std::shared_ptr<StatsRegistry> registry = std::make_shared<StatsRegistry>();
  return registry;
}

RoutineStats& StatsRegistry::Get(CallSide side, std::string_view routine,
                                 std::string_view peer) {
  std::lock_guard<std::mutex> lock(mu_);
  auto key = std::make_tuple(side, std::string(routine), std::string(peer));
  auto it = stats_.find(key);
  if (it == stats_.end()) {
    auto stats = std::make_unique<RoutineStats>(side, std::get<1>(key), std::get<2>(key));
    it = stats_.emplace(std::move(key), std::move(stats)).first;
  }
  return *it->second;
}

std::vector<RoutineStats::Snapshot> StatsRegistry::Take() const {
  std::vector<RoutineStats*> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, stats] : stats_) all.push_back(stats.get());
  }
  std::vector<RoutineStats::Snapshot> out;
  out.reserve(all.size());
  for (const RoutineStats* s : all) out.push_back(s->Take());
  return out;
}

namespace {

// A label value, escaped as the exposition format wants (\\, \", \n).
std::string Escape(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Seconds(uint64_t ns) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(ns) / 1e9);
  return buf;
}

// The exported "le" bounds of naarpc_call_duration_seconds, in ns.
constexpr uint64_t kBoundsNs[] = {
    1'000,      2'500,      5'000,       10'000,      25'000,      50'000,
    100'000,    250'000,    500'000,     1'000'000,   2'500'000,   5'000'000,
    10'000'000, 25'000'000, 50'000'000,  100'000'000, 250'000'000, 500'000'000,
    1'000'000'000, 2'500'000'000, 5'000'000'000, 10'000'000'000};

}  // namespace

std::string RenderPrometheusText(const StatsRegistry& registry) {
  const std::vector<RoutineStats::Snapshot> all = registry.Take();
  std::string out;
  auto labels = [](const RoutineStats::Snapshot& s) {
    return "side=\"" + std::string(CallSideName(s.side)) + "\",routine=\"" +
           Escape(s.routine) + "\",peer=\"" + Escape(s.peer) + "\"";
  };
  auto counter = [&](const char* name, const char* type, const char* help, auto value) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    for (const auto& s : all) {
      out += std::string(name) + "{" + labels(s) + "} " + std::to_string(value(s)) + "\n";
    }
  };
  counter("naarpc_calls_started_total", "counter", "Calls begun.",
          [](const auto& s) { return s.started; });
  counter("naarpc_calls_total", "counter", "Calls ended, failed ones included.",
          [](const auto& s) { return s.completed; });
  counter("naarpc_calls_in_flight", "gauge", "Calls begun and not yet ended.",
          [](const auto& s) { return s.in_flight; });
  counter("naarpc_call_bytes_sent_total", "counter",
          "Parameter bytes sent (host: inputs; NAA: outputs written back).",
          [](const auto& s) { return s.bytes_sent; });
  counter("naarpc_call_bytes_received_total", "counter",
          "Parameter bytes received (host: output regions of successful calls; NAA: input "
          "regions).",
          [](const auto& s) { return s.bytes_received; });
  out += "# HELP naarpc_call_errors_total Failed calls, by status name.\n"
         "# TYPE naarpc_call_errors_total counter\n";
  for (const auto& s : all) {
    for (const auto& [name, n] : s.errors) {
      out += "naarpc_call_errors_total{" + labels(s) + ",status=\"" + Escape(name) + "\"} " +
             std::to_string(n) + "\n";
    }
  }
  out += "# HELP naarpc_call_duration_seconds Call latency (host: the call as its caller "
         "sees it; NAA: from the request's arrival to the end of the kernel, before the reply).\n"
         "# TYPE naarpc_call_duration_seconds histogram\n";
  for (const auto& s : all) {
    const std::string l = labels(s);
    for (uint64_t bound : kBoundsNs) {
      out += "naarpc_call_duration_seconds_bucket{" + l + ",le=\"" + Seconds(bound) + "\"} " +
             std::to_string(s.latency_ns.CountAtMost(bound)) + "\n";
    }
    out += "naarpc_call_duration_seconds_bucket{" + l + ",le=\"+Inf\"} " +
           std::to_string(s.latency_ns.count) + "\n";
    out += "naarpc_call_duration_seconds_sum{" + l + "} " + Seconds(s.latency_ns.sum) + "\n";
    out += "naarpc_call_duration_seconds_count{" + l + "} " +
           std::to_string(s.latency_ns.count) + "\n";
  }
  out += "# HELP naarpc_call_latency_seconds Call latency quantiles since start (from the "
         "fine-grained histogram: within 6.25 %; quantile 1 is the exact maximum).\n"
         "# TYPE naarpc_call_latency_seconds gauge\n";
  for (const auto& s : all) {
    const std::string l = labels(s);
    for (auto [q, text] : {std::pair{0.5, "0.5"}, std::pair{0.9, "0.9"},
                           std::pair{0.99, "0.99"}}) {
      out += "naarpc_call_latency_seconds{" + l + ",quantile=\"" + text + "\"} " +
             Seconds(s.latency_ns.Percentile(q)) + "\n";
    }
    out += "naarpc_call_latency_seconds{" + l + ",quantile=\"1\"} " + Seconds(s.latency_ns.max) +
           "\n";
  }
  return out;
}

}  // namespace naarpc
