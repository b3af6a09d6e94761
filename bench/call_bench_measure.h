// call_bench's timed loop: a call repeated for a minimum time and count,
// each one timestamped (RDTSCP where it exists), summarised as percentiles.
#ifndef NAARPC_BENCH_CALL_BENCH_MEASURE_H_
#define NAARPC_BENCH_CALL_BENCH_MEASURE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <vector>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "bench/call_bench.h"

namespace naarpc::bench::call_bench {

using Clock = std::chrono::steady_clock;

struct Stats {
  double median_us = 0, min_us = 0, mean_us = 0;
  double p10_us = 0, p90_us = 0, p99_us = 0;
  size_t iterations = 0;
};

// Sorts `us` and summarises it (not empty).
Stats Summarize(std::vector<double>& us);

// Timed calls per payload size: --iterations, else 4000 up to 4 KiB, 400 up
// to 1 MiB and 12 above.
size_t IterationsFor(const Options& o, size_t bytes);

// Per-call timestamps. Like perftest's get_cycles(), the x86 time-stamp
// counter where RDTSCP exists: clock_gettime costs ~0.8 us in a QEMU TCG
// guest (HPET clocksource), which would inflate every sample. RDTSCP also
// names the CPU, so a sample that migrated between CPUs (whose counters need
// not agree) is dropped. Ticks become microseconds with a rate calibrated
// against steady_clock over the whole measurement.
class CallTimer {
 public:
  explicit CallTimer(bool steady) : use_tsc_(!steady && HasRdtscp()) {}
  struct Stamp {
    uint64_t ticks;
    uint32_t cpu;
  };
  Stamp Now() const {
#if defined(__x86_64__)
    if (use_tsc_) {
      unsigned aux = 0;
      uint64_t t = __rdtscp(&aux);
      return {t, aux};
    }
#endif
    return {uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                         Clock::now().time_since_epoch()).count()),
            0};
  }
  const char* source() const { return use_tsc_ ? "rdtscp" : "steady_clock"; }

 private:
  static bool HasRdtscp();
  bool use_tsc_;
};

// Times `one()` (false: failed, stop) for at least o.min_time and
// IterationsFor(bytes) runs; without `warm_up` (a block of --blocks after
// the first) the timed calls start at once. With `samples`, appends each
// call's microseconds to it.
template <typename F>
Stats Measure(const Options& o, size_t bytes, F&& one, bool warm_up = true,
              std::vector<double>* samples = nullptr) {
  // Warm-up: a few calls, and for small sizes at least 50 ms (caches, and
  // code translation in emulated CPUs such as the Soft-RoCE guest).
  const int warmup = !warm_up ? 0 : bytes > (1u << 20) ? 1 : 3;
  for (int i = 0; i < warmup; ++i) one();
  if (warm_up && bytes <= (1u << 16)) {
    const auto warm_end = Clock::now() + std::chrono::milliseconds(50);
    for (int i = 0; Clock::now() < warm_end && i < 100000; ++i) one();
  }
  const CallTimer timer(o.steady_timer);
  std::vector<uint64_t> ticks;
  const size_t want = IterationsFor(o, bytes);
  ticks.reserve(want);
  const auto start = Clock::now();
  const CallTimer::Stamp first = timer.Now();
  double elapsed = 0;
  size_t dropped = 0;
  for (size_t i = 0;; ++i) {
    // The clock is read every 16 calls only (see CallTimer).
    if (i % 16 == 0) {
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      if (ticks.size() >= want && elapsed >= o.min_time) break;
      if (ticks.size() >= 100 * want) break;
    }
    const CallTimer::Stamp t0 = timer.Now();
    if (!one()) break;
    const CallTimer::Stamp t1 = timer.Now();
    if (t0.cpu == t1.cpu && t1.ticks >= t0.ticks) {
      ticks.push_back(t1.ticks - t0.ticks);
    } else {
      ++dropped;
    }
  }
  const CallTimer::Stamp last = timer.Now();
  const double span_us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  const double us_per_tick =
      last.ticks > first.ticks ? span_us / double(last.ticks - first.ticks) : 0.0;
  std::vector<double> us;
  us.reserve(ticks.size());
  for (uint64_t t : ticks) us.push_back(double(t) * us_per_tick);
  if (us.empty()) us.push_back(0);
  if (samples != nullptr) samples->insert(samples->end(), us.begin(), us.end());
  if (dropped > us.size() / 10) {
    std::fprintf(stderr, "call_bench: %zu samples dropped (CPU migration); pin the client\n",
                 dropped);
  }
  return Summarize(us);
}

}  // namespace naarpc::bench::call_bench

#endif  // NAARPC_BENCH_CALL_BENCH_MEASURE_H_
