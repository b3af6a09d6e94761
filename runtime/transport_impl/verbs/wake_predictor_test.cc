#include "runtime/transport_impl/verbs/wake_predictor.h"

#include <gtest/gtest.h>

#include <chrono>

namespace naarpc {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using Plan = WakePredictor::Plan;

TEST(WakePredictorTest, NoPlanUntilEnoughWaitsWereSeen) {
  WakePredictor p;
  EXPECT_FALSE(p.PlanWait());
  p.OnCompleted(milliseconds(15));
  EXPECT_FALSE(p.PlanWait());  // one wait is not a pattern
  p.OnCompleted(milliseconds(15));
  EXPECT_TRUE(p.PlanWait());
}

TEST(WakePredictorTest, WakesAMarginBeforeTheShortestAndSpinsPastTheLongest) {
  WakePredictor p;
  p.OnCompleted(microseconds(15'200));
  p.OnCompleted(microseconds(14'800));
  p.OnCompleted(microseconds(15'000));
  auto plan = p.PlanWait();
  ASSERT_TRUE(plan);
  // margin = min(14.8 ms / 8, 1 ms) = 1 ms.
  EXPECT_EQ(plan->wake_after, microseconds(13'800));
  EXPECT_EQ(plan->spin_until, microseconds(16'200));
}

TEST(WakePredictorTest, MarginScalesWithShortWaitsAndHasAFloor) {
  WakePredictor p;
  p.OnCompleted(microseconds(1'600));
  p.OnCompleted(microseconds(1'600));
  auto plan = p.PlanWait();
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->wake_after, microseconds(1'400));  // margin 1.6 ms / 8 = 200 us
  EXPECT_EQ(plan->spin_until, microseconds(1'800));

  WakePredictor q;
  q.OnCompleted(microseconds(400));
  q.OnCompleted(microseconds(400));
  plan = q.PlanWait();
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->wake_after, microseconds(300));  // 50 us -> the 100 us floor
  EXPECT_EQ(plan->spin_until, microseconds(500));
}

TEST(WakePredictorTest, WaitsTooShortToSleepThroughAreNotPlanned) {
  WakePredictor p;
  p.OnCompleted(microseconds(250));
  p.OnCompleted(microseconds(5'000));
  EXPECT_FALSE(p.PlanWait());  // the shortest recent wait decides
}

TEST(WakePredictorTest, SpinIsBoundedWhenWaitsVaryWidely) {
  WakePredictor p;
  p.OnCompleted(milliseconds(10));
  p.OnCompleted(milliseconds(900));
  auto plan = p.PlanWait();
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->wake_after, milliseconds(9));
  EXPECT_EQ(plan->spin_until - plan->wake_after,
            WakePredictor::kMaxSpinMargins * WakePredictor::kMaxMargin);
}

TEST(WakePredictorTest, RemembersOnlyTheRecentWindow) {
  WakePredictor p;
  p.OnCompleted(milliseconds(2));  // pushed out by the next kWindow waits
  for (size_t i = 0; i < WakePredictor::kWindow; ++i) p.OnCompleted(milliseconds(30));
  EXPECT_EQ(p.samples(), WakePredictor::kWindow);
  auto plan = p.PlanWait();
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->wake_after, milliseconds(29));
  EXPECT_EQ(plan->spin_until, milliseconds(31));
}

TEST(WakePredictorTest, ALastingChangeIsLearntWithinTheWindow) {
  WakePredictor p;
  for (size_t i = 0; i < WakePredictor::kWindow; ++i) p.OnCompleted(milliseconds(4));
  // Waits now take 150 ms: planned from the 4 ms ones until those are gone.
  for (size_t i = 0; i < WakePredictor::kWindow; ++i) {
    auto plan = p.PlanWait();
    ASSERT_TRUE(plan);
    EXPECT_EQ(plan->wake_after, microseconds(3'500)) << "wait " << i;
    p.OnCompleted(milliseconds(150));
  }
  auto plan = p.PlanWait();
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->wake_after, milliseconds(149));
  EXPECT_EQ(plan->spin_until, milliseconds(151));
}

TEST(WakePredictorTest, NegativeWaitCountsAsZero) {
  WakePredictor p;
  p.OnCompleted(microseconds(-5));
  p.OnCompleted(milliseconds(10));
  EXPECT_FALSE(p.PlanWait());  // shortest is 0
}

}  // namespace
}  // namespace naarpc
