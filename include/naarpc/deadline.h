// Deadline: an absolute point on the steady clock; Deadline::Infinite() never
// expires.
#ifndef NAARPC_DEADLINE_H_
#define NAARPC_DEADLINE_H_

#include <time.h>

#include <chrono>

namespace naarpc {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  static Deadline Infinite() { return Deadline(Clock::time_point::max()); }
  // Deadlines of a second or more start from the coarse monotonic clock
  // (same timeline as Clock, one kernel tick of resolution, read without
  // leaving the vDSO): such a deadline may end up to one tick (1-10 ms) early,
  // at most 1% of it. The precise clock can cost ~1 us per read (VMs whose
  // clocksource is an emulated HPET), and stubs build a deadline per call.
  static constexpr std::chrono::nanoseconds kCoarseFrom = std::chrono::seconds(1);
  static Deadline After(std::chrono::nanoseconds d) {
    if (d >= std::chrono::hours(24 * 365)) return Infinite();
    if (d >= kCoarseFrom) return Deadline(CoarseNow() + d);
    return Deadline(Clock::now() + d);
  }
  // CLOCK_MONOTONIC_COARSE as a Clock time point (never ahead of Clock::now()).
  static Clock::time_point CoarseNow() {
    timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0) return Clock::now();
    return Clock::time_point(std::chrono::duration_cast<Clock::duration>(
        std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec)));
  }
  static Deadline At(Clock::time_point t) { return Deadline(t); }
  // Already expired: waits with it only take what is ready.
  static Deadline Now() { return Deadline(Clock::now()); }

  bool infinite() const { return when_ == Clock::time_point::max(); }
  bool expired() const { return !infinite() && Clock::now() >= when_; }
  Clock::time_point when() const { return when_; }

  // Milliseconds left, rounded up, for poll(2): -1 if infinite, 0 if expired.
  int PollTimeoutMs() const {
    if (infinite()) return -1;
    auto left = when_ - Clock::now();
    if (left <= Clock::duration::zero()) return 0;
    auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
    return ms > 1'000'000'000 ? 1'000'000'000 : static_cast<int>(ms);
  }

  static Deadline Earlier(Deadline a, Deadline b) { return a.when_ < b.when_ ? a : b; }

 private:
  explicit Deadline(Clock::time_point t) : when_(t) {}
  Clock::time_point when_;
};

}  // namespace naarpc

#endif  // NAARPC_DEADLINE_H_
