#include "runtime/engine/send_queue_budget.h"

#include <gtest/gtest.h>

namespace naarpc {
namespace {

TEST(SendQueueBudget, UnknownDepthSignalsEverySequence) {
  SendQueueBudget budget;
  for (uint64_t id = 1; id <= 100; ++id) {
    ASSERT_TRUE(budget.ShouldSignal(1));
    EXPECT_FALSE(budget.NeedsReclaim(1));
    budget.OnPosted(1, true, id);
    budget.OnSendCompleted(id);
  }
}

// A host that waits for each signaled sequence within its call: the queue
// never holds more than half its depth, and one call in (depth/2 - max) is
// signaled.
TEST(SendQueueBudget, SignalsOncePerBudgetAndNeverOverfills) {
  const uint32_t depth = 64, max_seq = 2;
  SendQueueBudget budget(depth, max_seq);
  int signaled = 0;
  for (uint64_t id = 1; id <= 1000; ++id) {
    const uint32_t n = id % 3 == 0 ? 2 : 1;
    ASSERT_FALSE(budget.NeedsReclaim(n));
    const bool s = budget.ShouldSignal(n);
    budget.OnPosted(n, s, id);
    ASSERT_LE(budget.unfreed(), depth / 2) << "call " << id;
    if (s) {
      ++signaled;
      budget.OnSendCompleted(id);
      EXPECT_EQ(budget.unfreed(), 0u);
    }
  }
  // ~1.33 requests per call, a signal per <= 31 requests.
  EXPECT_GE(signaled, 1000 * 4 / 3 / 32);
  EXPECT_LE(signaled, 1000 / 10);
}

TEST(SendQueueBudget, SequenceLargerThanBudgetIsAlwaysSignaled) {
  SendQueueBudget budget(16, 20);
  EXPECT_TRUE(budget.ShouldSignal(20));
  EXPECT_TRUE(budget.ShouldSignal(1));
}

// An NAA that does not wait for its signaled reply: later sequences go
// unsignaled until the queue is full, then it must reclaim first; seeing the
// pending completion frees everything posted up to it.
TEST(SendQueueBudget, LateCompletionForcesReclaimAtFullDepth) {
  const uint32_t depth = 8;
  SendQueueBudget budget(depth, 1);
  uint64_t id = 1;
  // 0 + 1 + 1 > 4 only from unfreed 3: three unsignaled, the fourth signaled.
  for (; id <= 3; ++id) {
    ASSERT_FALSE(budget.ShouldSignal(1));
    budget.OnPosted(1, false, id);
  }
  ASSERT_TRUE(budget.ShouldSignal(1));
  budget.OnPosted(1, true, id);
  const uint64_t pending_id = id++;
  EXPECT_TRUE(budget.signal_pending());
  // Its completion has not been seen: the next ones go unsignaled...
  for (; budget.unfreed() < depth; ++id) {
    ASSERT_FALSE(budget.NeedsReclaim(1));
    ASSERT_FALSE(budget.ShouldSignal(1));
    budget.OnPosted(1, false, id);
  }
  // ...until the queue is full.
  EXPECT_TRUE(budget.NeedsReclaim(1));
  budget.OnSendCompleted(pending_id + 100);  // not the pending one: no effect
  EXPECT_TRUE(budget.NeedsReclaim(1));
  budget.OnSendCompleted(pending_id);
  EXPECT_FALSE(budget.signal_pending());
  EXPECT_EQ(budget.unfreed(), depth - 4);  // those posted after the signaled one
  EXPECT_FALSE(budget.NeedsReclaim(1));
  EXPECT_TRUE(budget.ShouldSignal(1));
}

}  // namespace
}  // namespace naarpc
