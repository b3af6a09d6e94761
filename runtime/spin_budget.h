// SpinBudget: bounds a busy-poll loop by time while reading the clock only
// once every kPollsPerClockRead iterations.
//
// Clock reads are not free everywhere: in a VM whose clocksource is an
// emulated HPET (e.g. QEMU TCG guests) clock_gettime is a system call plus an
// emulated device access, ~0.8 us each, and it serialises the vCPUs on the
// emulator's lock. The budget starts at its first clock read, so a poll that
// succeeds within the first kPollsPerClockRead iterations reads no clock at
// all; the loop then runs at most `budget` plus kPollsPerClockRead polls.
//
//   SpinBudget spin(std::chrono::microseconds(50), deadline);
//   while (!Ready() && spin.Continue()) {}
#ifndef NAARPC_RUNTIME_SPIN_BUDGET_H_
#define NAARPC_RUNTIME_SPIN_BUDGET_H_

#include <sched.h>

#include <chrono>
#include <cstdint>

#include "naarpc/deadline.h"

namespace naarpc {

class SpinBudget {
 public:
  static constexpr uint32_t kPollsPerClockRead = 32;

  // Spins for `budget`, but never past `limit`. With `yield_cpu`, each
  // clock read also offers the CPU to other runnable threads (sched_yield):
  // a peer process sharing this CPU gets to run instead of waiting for the
  // spin to end. Costs one cheap system call per kPollsPerClockRead polls.
  explicit SpinBudget(std::chrono::nanoseconds budget, Deadline limit = Deadline::Infinite(),
                      bool yield_cpu = false)
      : budget_(budget), limit_(limit), yield_cpu_(yield_cpu) {}

  // True while the loop may poll again. Call once per poll.
  bool Continue() {
    if (budget_ <= std::chrono::nanoseconds::zero()) return false;
    Relax();
    if (++polls_ % kPollsPerClockRead != 0) return true;
    if (yield_cpu_) sched_yield();
    const Deadline::Clock::time_point now = Deadline::Clock::now();
    if (!started_) {
      started_ = true;
      end_ = now + budget_;
      if (limit_.when() < end_) end_ = limit_.when();
    }
    return now < end_;
  }

  // Polls made so far (for tests and diagnostics).
  uint64_t polls() const { return polls_; }

 private:
  static void Relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  std::chrono::nanoseconds budget_;
  Deadline limit_;
  Deadline::Clock::time_point end_{};
  uint64_t polls_ = 0;
  bool started_ = false;
  bool yield_cpu_;
};

}  // namespace naarpc

#endif  // NAARPC_RUNTIME_SPIN_BUDGET_H_
