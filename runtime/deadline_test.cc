#include "naarpc/deadline.h"

#include <gtest/gtest.h>
#include <time.h>

#include <chrono>

namespace naarpc {
namespace {

using std::chrono::milliseconds;
using Clock = Deadline::Clock;

// CLOCK_MONOTONIC_COARSE read directly, as a Clock time point.
Clock::time_point RawCoarse() {
  timespec ts;
  EXPECT_EQ(clock_gettime(CLOCK_MONOTONIC_COARSE, &ts), 0);
  return Clock::time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
}

// The coarse clock lags the precise one by up to a kernel tick (<= 10 ms),
// but only while the tick runs on time: a loaded VM can delay it. This guard
// is 100x the tick and still catches a clock on another timeline or in
// other units (off by the uptime or more); how far behind the coarse clock
// is, is the kernel's figure, not asserted here.
constexpr auto kCoarseLagGuard = std::chrono::seconds(1);

TEST(DeadlineTest, CoarseClockIsTheSameTimelineNeverAhead) {
  for (int i = 0; i < 100; ++i) {
    const auto before = Clock::now();
    const auto raw_before = RawCoarse();
    const auto coarse = Deadline::CoarseNow();
    const auto raw_after = RawCoarse();
    const auto after = Clock::now();
    // Exactly the coarse clock (seconds and nanoseconds converted right)...
    EXPECT_LE(raw_before, coarse);
    EXPECT_LE(coarse, raw_after);
    // ...never ahead of the precise clock, and on its timeline.
    EXPECT_LE(coarse, after);
    EXPECT_GE(coarse, before - kCoarseLagGuard);
  }
}

TEST(DeadlineTest, LongDeadlinesEndAtMostATickEarly) {
  // An hour: long enough that no scheduling delay can make it expire
  // within this test.
  constexpr auto kLong = std::chrono::hours(1);
  const auto before = Clock::now();
  const auto raw_before = RawCoarse();
  const Deadline d = Deadline::After(kLong);
  const auto raw_after = RawCoarse();
  const auto after = Clock::now();
  // Starts from the coarse clock, so it is never late and at most the
  // coarse clock's lag (a tick) early.
  EXPECT_LE(raw_before + kLong, d.when());
  EXPECT_LE(d.when(), raw_after + kLong);
  EXPECT_LE(d.when(), after + kLong);
  EXPECT_GE(d.when(), before + kLong - kCoarseLagGuard);
  EXPECT_FALSE(d.expired());
  EXPECT_FALSE(d.infinite());
}

TEST(DeadlineTest, ShortDeadlinesArePrecise) {
  const auto before = Clock::now();
  const Deadline d = Deadline::After(milliseconds(20));
  const auto after = Clock::now();
  // From the precise clock: exactly 20 ms after a moment within the call.
  EXPECT_GE(d.when(), before + milliseconds(20));
  EXPECT_LE(d.when(), after + milliseconds(20));
  // Not expired before its time. Checked only if this thread got here
  // before it (a loaded machine may deschedule it for longer than 20 ms).
  const bool expired_early = d.expired();
  if (Clock::now() < d.when()) {
    EXPECT_FALSE(expired_early);
  }
  while (!d.expired()) {}
  EXPECT_GE(Clock::now(), before + milliseconds(20));
  EXPECT_EQ(d.PollTimeoutMs(), 0);
}

TEST(DeadlineTest, HugeDeadlinesAreInfinite) {
  EXPECT_TRUE(Deadline::After(std::chrono::hours(24 * 366)).infinite());
  EXPECT_FALSE(Deadline::Infinite().expired());
  EXPECT_EQ(Deadline::Infinite().PollTimeoutMs(), -1);
}

}  // namespace
}  // namespace naarpc
