// StatsRegistry: the per-routine statistics of a process (or of one client
// or server that was given its own), one RoutineStats per (side, routine,
// peer). Looking one up takes a lock (done once per session, or once per
// connection and routine on the NAA); recording into it never does.
// StatsRegistry::Default() is the process-wide registry generated clients
// and NaaServer record into unless their options name another (or nullptr:
// no statistics). Thread-safe.
#ifndef NAARPC_STATS_REGISTRY_H_
#define NAARPC_STATS_REGISTRY_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "naarpc/call_stats.h"

namespace naarpc {

class StatsRegistry {
 public:
  StatsRegistry() = default;
  StatsRegistry(const StatsRegistry&) = delete;
  StatsRegistry& operator=(const StatsRegistry&) = delete;

  static const std::shared_ptr<StatsRegistry>& Default();

  // The statistics of (side, routine, peer), created on first use; the
  // reference stays valid for the registry's life.
  RoutineStats& Get(CallSide side, std::string_view routine, std::string_view peer);

  // Every (side, routine, peer) seen, ordered by side, routine, peer.
  std::vector<RoutineStats::Snapshot> Take() const;

 private:
  mutable std::mutex mu_;
  std::map<std::tuple<CallSide, std::string, std::string>, std::unique_ptr<RoutineStats>,
           std::less<>>
      stats_;
};

// The registry in the Prometheus text exposition format (version 0.0.4):
// naarpc_calls_started_total, naarpc_calls_total, naarpc_call_errors_total
// {status}, naarpc_calls_in_flight, naarpc_call_bytes_sent_total,
// naarpc_call_bytes_received_total and the histogram
// naarpc_call_duration_seconds (_bucket{le}, _sum, _count), each labelled
// {side, routine, peer}. docs/operating.md lists them.
std::string RenderPrometheusText(const StatsRegistry& registry);

}  // namespace naarpc

#endif  // NAARPC_STATS_REGISTRY_H_
