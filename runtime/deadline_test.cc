#include "runtime/deadline.h"

#include <gtest/gtest.h>

#include <chrono>

namespace naarpc {
namespace {

using std::chrono::milliseconds;
using Clock = Deadline::Clock;

// One kernel tick is at most 10 ms (HZ >= 100); allow scheduling slack.
constexpr auto kTick = milliseconds(25);

TEST(DeadlineTest, CoarseClockIsTheSameTimelineNeverAhead) {
  for (int i = 0; i < 100; ++i) {
    const auto before = Clock::now();
    const auto coarse = Deadline::CoarseNow();
    const auto after = Clock::now();
    EXPECT_LE(coarse, after);
    EXPECT_GE(coarse, before - kTick);
  }
}

TEST(DeadlineTest, LongDeadlinesEndAtMostATickEarly) {
  const auto before = Clock::now();
  const Deadline d = Deadline::After(std::chrono::seconds(5));
  const auto after = Clock::now();
  EXPECT_LE(d.when(), after + std::chrono::seconds(5));
  EXPECT_GE(d.when(), before + std::chrono::seconds(5) - kTick);
  EXPECT_FALSE(d.expired());
}

TEST(DeadlineTest, ShortDeadlinesArePrecise) {
  const auto before = Clock::now();
  const Deadline d = Deadline::After(milliseconds(20));
  EXPECT_GE(d.when(), before + milliseconds(20));
  EXPECT_FALSE(d.expired());
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
