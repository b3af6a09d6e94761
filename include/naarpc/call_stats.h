// Per-routine call statistics, kept on both sides (on by default): calls,
// errors by status name, bytes sent and received, calls in flight and a
// latency histogram, for one (side, routine, peer). Lock-free: relaxed atomic
// counters (exact under concurrency) and a fixed-bucket histogram
// (naarpc/histogram.h). Kept in a StatsRegistry (naarpc/stats_registry.h),
// which the generated clients (StubOptions::stats) and NaaServer
// (ServerOptions::stats) record into.
#ifndef NAARPC_CALL_STATS_H_
#define NAARPC_CALL_STATS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "naarpc/histogram.h"
#include "naarpc/status.h"

namespace naarpc {

// Which side of a call the statistics (or an interceptor) see.
enum class CallSide : uint8_t { kHost, kNaa };
std::string_view CallSideName(CallSide side);  // "host", "naa"

// The name a failed call is counted under: the StatusCode's name
// ("DEADLINE_EXCEEDED"), or for a call the NAA answered with a non-zero
// status "NAA_" + the standard status' name ("NAA_KERNEL_FAILED") or its
// value ("NAA_0x10"). "OK" for success.
std::string StatusMetricName(const Status& status);
std::string NaaStatusMetricName(uint8_t naa_status);

class RoutineStats {
 public:
  RoutineStats(CallSide side, std::string routine, std::string peer)
      : side_(side), routine_(std::move(routine)), peer_(std::move(peer)) {}
  RoutineStats(const RoutineStats&) = delete;
  RoutineStats& operator=(const RoutineStats&) = delete;

  CallSide side() const { return side_; }
  const std::string& routine() const { return routine_; }
  // Host: the NAA's "host:port"; NAA: the host's address (no port).
  const std::string& peer() const { return peer_; }

  // A call began / ended. `status` of the host's call; on the NAA,
  // RecordNaaEnd with the status byte it answered.
  void RecordStart() {
    started_.fetch_add(1, std::memory_order_relaxed);
  }
  void RecordEnd(const Status& status, uint64_t bytes_sent, uint64_t bytes_received,
                 uint64_t duration_ns) {
    if (!status.ok()) {
      if (status.code() == StatusCode::kNaaError && status.wire_code().has_value()) {
        naa_errors_[*status.wire_code()].fetch_add(1, std::memory_order_relaxed);
      } else {
        code_errors_[static_cast<uint8_t>(status.code()) % kCodes].fetch_add(
            1, std::memory_order_relaxed);
      }
    }
    Finish(bytes_sent, bytes_received, duration_ns);
  }
  // A host's call that failed before it had a session (connecting or the
  // MRSP failed, or no session was free by its deadline): started and
  // ended, nothing sent or received.
  void RecordUnstarted(const Status& status, uint64_t duration_ns) {
    RecordStart();
    RecordEnd(status, 0, 0, duration_ns);
  }
  void RecordNaaEnd(uint8_t naa_status, uint64_t bytes_sent, uint64_t bytes_received,
                    uint64_t duration_ns) {
    if (naa_status != 0) naa_errors_[naa_status].fetch_add(1, std::memory_order_relaxed);
    Finish(bytes_sent, bytes_received, duration_ns);
  }

  struct Snapshot {
    CallSide side = CallSide::kHost;
    std::string routine;
    std::string peer;
    uint64_t started = 0;
    uint64_t completed = 0;  // calls ended, failed ones included
    uint64_t in_flight = 0;
    uint64_t bytes_sent = 0;
    uint64_t bytes_received = 0;
    // (StatusMetricName, count) of the failed calls, by name.
    std::vector<std::pair<std::string, uint64_t>> errors;
    uint64_t error_count() const;
    LatencyHistogram::Snapshot latency_ns;
  };
  Snapshot Take() const;

 private:
  static constexpr size_t kCodes = 32;
  void Finish(uint64_t bytes_sent, uint64_t bytes_received, uint64_t duration_ns) {
    bytes_sent_.fetch_add(bytes_sent, std::memory_order_relaxed);
    bytes_received_.fetch_add(bytes_received, std::memory_order_relaxed);
    latency_.Record(duration_ns);
    completed_.fetch_add(1, std::memory_order_release);
  }

  const CallSide side_;
  const std::string routine_;
  const std::string peer_;
  std::atomic<uint64_t> started_{0};
  std::atomic<uint64_t> completed_{0};  // in flight: started_ - completed_
  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> bytes_received_{0};
  std::array<std::atomic<uint64_t>, kCodes> code_errors_{};
  std::array<std::atomic<uint64_t>, 256> naa_errors_{};
  LatencyHistogram latency_;
};

}  // namespace naarpc

#endif  // NAARPC_CALL_STATS_H_
