// CycleClock: the timestamps that per-call statistics and interceptors take
// twice per call on each side, in nanoseconds on the steady clock's
// timeline. Where the x86 time-stamp counter is invariant and the kernel
// keeps time with it (clocksource "tsc"), it is read directly: ~37 ns in a
// VM against ~88 ns for clock_gettime, and more where the clocksource is
// slow. Its rate is calibrated against the steady clock over the first
// 50 ms after first use; until then, and on other machines, the steady clock
// is read. For durations, not for deadlines. Internal to the runtime and generated code.
#ifndef NAARPC_RUNTIME_CYCLE_CLOCK_H_
#define NAARPC_RUNTIME_CYCLE_CLOCK_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>

#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

namespace naarpc::internal {

class CycleClock {
 public:
  static int64_t NowNanos() {
#if defined(__x86_64__)
    Calibration& c = Get();
    if (c.usable) {
      const double ns_per_tick = c.ns_per_tick.load(std::memory_order_relaxed);
      if (ns_per_tick > 0) {
        return c.base.ns +
               static_cast<int64_t>(static_cast<double>(__rdtsc() - c.base.ticks) * ns_per_tick);
      }
      const Sample now = Sample::Take();
      if (now.valid() && now.ns - c.base.ns >= kCalibrationNs && now.ticks > c.base.ticks) {
        c.ns_per_tick.store(static_cast<double>(now.ns - c.base.ns) /
                                static_cast<double>(now.ticks - c.base.ticks),
                            std::memory_order_relaxed);
      }
      return now.ns;
    }
#endif
    return SteadyNanos();
  }

  // True once NowNanos() reads the time-stamp counter (for tests).
  static bool Calibrated() {
#if defined(__x86_64__)
    return Get().ns_per_tick.load(std::memory_order_relaxed) > 0;
#else
    return false;
#endif
  }

 private:
  static constexpr int64_t kCalibrationNs = 50'000'000;

  static int64_t SteadyNanos() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

#if defined(__x86_64__)
  // The counter read between two steady reads, dated at their midpoint: a
  // thread preempted in between would skew the rate, so such a sample (a
  // bracket wider than 5 us) does not count.
  struct Sample {
    uint64_t ticks = 0;
    int64_t ns = 0;
    int64_t bracket = 0;
    bool valid() const { return bracket <= 5'000; }
    static Sample Take() {
      const int64_t before = SteadyNanos();
      const uint64_t ticks = __rdtsc();
      const int64_t after = SteadyNanos();
      return {ticks, before + (after - before) / 2, after - before};
    }
  };

  struct Calibration {
    Calibration() {
      unsigned a = 0, b = 0, c = 0, d = 0;
      // Invariant TSC: constant rate, runs in every C-state.
      const bool invariant = __get_cpuid(0x80000007, &a, &b, &c, &d) && (d & (1u << 8)) != 0;
      std::string source;
      std::ifstream("/sys/devices/system/clocksource/clocksource0/current_clocksource") >> source;
      usable = invariant && source == "tsc";  // the kernel found it synchronised across CPUs
      for (int i = 0; i < 100; ++i) {
        base = Sample::Take();
        if (base.valid()) return;
      }
      usable = false;  // never a tight bracket: keep to the steady clock
    }
    bool usable = false;
    Sample base;
    std::atomic<double> ns_per_tick{0};
  };

  static Calibration& Get() {
    static Calibration calibration;
    return calibration;
  }
#endif
};

}  // namespace naarpc::internal

#endif  // NAARPC_RUNTIME_CYCLE_CLOCK_H_
