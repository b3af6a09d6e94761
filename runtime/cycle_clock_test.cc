#include "runtime/cycle_clock.h"

#include <chrono>

#include <gtest/gtest.h>

namespace naarpc::internal {
namespace {

int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

TEST(CycleClock, NeverGoesBackwardsOnOneThread) {
  int64_t last = CycleClock::NowNanos();
  for (int i = 0; i < 200000; ++i) {
    const int64_t now = CycleClock::NowNanos();
    ASSERT_GE(now, last) << "read " << i;
    last = now;
  }
}

// Before and after calibration, an interval read on both clocks agrees: the
// cycle clock's interval brackets the steady clock's (its reads are outside
// the steady reads), within 1% of the interval. A read preempted between
// the two clocks widens only the bracket, so of several attempts, one has
// a tight one on any machine.
TEST(CycleClock, AgreesWithTheSteadyClock) {
  bool agreed = false;
  for (int attempt = 0; attempt < 20 && !agreed; ++attempt) {
    const int64_t c0 = CycleClock::NowNanos();
    const int64_t s0 = SteadyNs();
    while (SteadyNs() - s0 < 60'000'000) {
      CycleClock::NowNanos();  // calibrates along the way on the first attempt
    }
    const int64_t s1 = SteadyNs();
    const int64_t c1 = CycleClock::NowNanos();
    const double steady = static_cast<double>(s1 - s0);
    const double cycle = static_cast<double>(c1 - c0);
    agreed = cycle >= steady * 0.99 && cycle <= steady * 1.01 + 20'000;
  }
  EXPECT_TRUE(agreed);
}

}  // namespace
}  // namespace naarpc::internal
