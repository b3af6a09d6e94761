// Deadline: an absolute point on the steady clock; Deadline::Infinite() never
// expires.
#ifndef NAARPC_RUNTIME_DEADLINE_H_
#define NAARPC_RUNTIME_DEADLINE_H_

#include <chrono>

namespace naarpc {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  static Deadline Infinite() { return Deadline(Clock::time_point::max()); }
  static Deadline After(std::chrono::nanoseconds d) {
    if (d >= std::chrono::hours(24 * 365)) return Infinite();
    return Deadline(Clock::now() + d);
  }
  static Deadline At(Clock::time_point t) { return Deadline(t); }

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

#endif  // NAARPC_RUNTIME_DEADLINE_H_
