// `naarpc bench`'s timed loop: client threads calling for a duration, their
// latencies summarised as one measured point (tools/naarpc/bench.cc).
#ifndef NAARPC_TOOLS_NAARPC_BENCH_MEASURE_H_
#define NAARPC_TOOLS_NAARPC_BENCH_MEASURE_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "naarpc/status.h"
#include "tools/naarpc/progress.h"

namespace naarpc::cli::bench_internal {

using Clock = std::chrono::steady_clock;

// One measured (kind, size, clients) point.
struct Point {
  std::string kind;  // "naarpc" or "raw"
  uint64_t size = 0;
  int clients = 0;
  uint64_t calls = 0;
  uint64_t bytes_per_call = 0;                // both directions
  double p50 = 0, p90 = 0, p99 = 0, max = 0;  // microseconds
  double calls_per_s = 0, mb_per_s = 0;
};

// Sorts `us` (not empty) and fills `p`'s calls, percentiles and rates.
void Summarize(std::vector<double>& us, double seconds, uint64_t bytes_per_call, Point& p);

// One client thread's latencies (microseconds) and its last call's status.
struct Worker {
  std::vector<double> us;
  Status status;
};

// Calls per point per client: always at least this many, so tiny durations
// still give percentiles.
constexpr uint64_t kMinCallsPerClient = 5;

// Runs a thread per client, each calling `once` on its client until
// `duration` has passed (after one warm-up call, not counted); the point of
// all their latencies, or the first failure.
template <typename Client>
Result<Point> Measure(std::vector<std::unique_ptr<Client>>& clients,
                      std::chrono::milliseconds duration, Progress& progress,
                      uint64_t progress_base, const std::string& detail, Status (*once)(Client&)) {
  const size_t n = clients.size();
  std::vector<Worker> workers(n);
  std::latch warmed(static_cast<std::ptrdiff_t>(n));
  std::latch go(1);
  std::atomic<int64_t> start_ns{0};
  std::atomic<int64_t> end_ns{0};
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      Worker& w = workers[i];
      w.status = once(*clients[i]);  // warm-up, not counted
      warmed.count_down();
      go.wait();
      if (!w.status.ok()) return;
      const Clock::time_point end = Clock::time_point(Clock::duration(start_ns.load())) + duration;
      while (true) {
        const Clock::time_point t0 = Clock::now();
        if (t0 >= end && w.us.size() >= kMinCallsPerClient) break;
        w.status = once(*clients[i]);
        if (!w.status.ok()) return;
        w.us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      }
      const int64_t now = Clock::now().time_since_epoch().count();
      int64_t prev = end_ns.load();
      while (prev < now && !end_ns.compare_exchange_weak(prev, now)) {
      }
    });
  }
  warmed.wait();
  const Clock::time_point start = Clock::now();
  start_ns = start.time_since_epoch().count();
  go.count_down();
  // The progress bar is redrawn while the workers run (pacing, not
  // synchronisation: the joins below wait for them).
  for (Clock::time_point now = Clock::now(); progress.enabled() && now < start + duration;
       now = Clock::now()) {
    const auto done = std::chrono::duration_cast<std::chrono::milliseconds>(now - start);
    progress.Update(progress_base + static_cast<uint64_t>(done.count()), detail);
    std::this_thread::sleep_for(
        std::min<Clock::duration>(std::chrono::milliseconds(100), start + duration - now));
  }
  for (std::thread& t : threads) t.join();
  std::vector<double> all;
  for (Worker& w : workers) {
    if (!w.status.ok()) return w.status;
    all.insert(all.end(), w.us.begin(), w.us.end());
  }
  const double seconds =
      std::chrono::duration<double>(Clock::time_point(Clock::duration(end_ns.load())) - start)
          .count();
  Point p;
  Summarize(all, std::max(seconds, 1e-9), 0, p);
  return p;
}

}  // namespace naarpc::cli::bench_internal

#endif  // NAARPC_TOOLS_NAARPC_BENCH_MEASURE_H_
