#include "runtime/spin_budget.h"

#include <gtest/gtest.h>

#include <chrono>

namespace naarpc {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

TEST(SpinBudgetTest, ZeroBudgetNeverSpins) {
  SpinBudget spin(microseconds(0));
  EXPECT_FALSE(spin.Continue());
  EXPECT_EQ(spin.polls(), 0u);
}

TEST(SpinBudgetTest, FirstPollsReadNoClockAndAlwaysContinue) {
  // A limit in the past only takes effect at the first clock read.
  SpinBudget spin(milliseconds(10), Deadline::At({}));
  for (uint32_t i = 1; i < SpinBudget::kPollsPerClockRead; ++i) {
    ASSERT_TRUE(spin.Continue()) << "poll " << i;
  }
  EXPECT_FALSE(spin.Continue());
  EXPECT_EQ(spin.polls(), SpinBudget::kPollsPerClockRead);
}

TEST(SpinBudgetTest, EndsAfterItsBudget) {
  const auto start = Deadline::Clock::now();
  SpinBudget spin(milliseconds(2));
  while (spin.Continue()) {
  }
  EXPECT_GE(Deadline::Clock::now() - start, milliseconds(2));
  EXPECT_EQ(spin.polls() % SpinBudget::kPollsPerClockRead, 0u);
  EXPECT_GT(spin.polls(), SpinBudget::kPollsPerClockRead);
}

TEST(SpinBudgetTest, YieldingSpinEndsAfterItsBudgetToo) {
  const auto start = Deadline::Clock::now();
  SpinBudget spin(milliseconds(2), Deadline::Infinite(), /*yield_cpu=*/true);
  while (spin.Continue()) {
  }
  EXPECT_GE(Deadline::Clock::now() - start, milliseconds(2));
  EXPECT_GT(spin.polls(), SpinBudget::kPollsPerClockRead);
}

TEST(SpinBudgetTest, LimitCutsTheBudgetShort) {
  const auto start = Deadline::Clock::now();
  SpinBudget spin(std::chrono::hours(1), Deadline::After(milliseconds(2)));
  while (spin.Continue()) {
  }
  const auto took = Deadline::Clock::now() - start;
  EXPECT_GE(took, milliseconds(2));
  // Generous: only proves the one-hour budget was not used.
  EXPECT_LT(took, std::chrono::seconds(60));
}

}  // namespace
}  // namespace naarpc
