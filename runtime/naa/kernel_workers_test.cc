#include "runtime/naa/kernel_workers.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

namespace naarpc::internal {
namespace {

using Clock = Deadline::Clock;

TEST(KernelRaceTest, OnlyTheFirstCallerWins) {
  KernelRace race;
  EXPECT_TRUE(race.Win());
  EXPECT_FALSE(race.Win());
  EXPECT_FALSE(race.Win());
}

TEST(KernelRaceTest, ExactlyOneOfTwoThreadsWins) {
  for (int round = 0; round < 100; ++round) {
    KernelRace race;
    std::atomic<int> winners{0};
    std::thread a([&] { winners += race.Win(); });
    std::thread b([&] { winners += race.Win(); });
    a.join();
    b.join();
    EXPECT_EQ(winners.load(), 1);
  }
}

TEST(KernelWatchdogTest, RunsTheCallbackOfALimitThatPassed) {
  KernelWatchdog watchdog;
  std::promise<std::thread::id> ran;
  ASSERT_TRUE(watchdog.Arm(Clock::now(), [&] { ran.set_value(std::this_thread::get_id()); }));
  // On a thread of its own, not the caller's.
  EXPECT_NE(ran.get_future().get(), std::this_thread::get_id());
}

TEST(KernelWatchdogTest, RunsEachDueCallbackOnceInAnyArmingOrder) {
  KernelWatchdog watchdog;
  std::atomic<int> runs[3] = {0, 0, 0};
  std::promise<void> all;
  std::atomic<int> left{3};
  const auto now = Clock::now();
  // Later limits first: the earliest one must still wake the timer.
  for (int i : {2, 1, 0}) {
    ASSERT_TRUE(watchdog.Arm(now + std::chrono::milliseconds(i), [&, i] {
      ++runs[i];
      if (--left == 0) all.set_value();
    }));
  }
  all.get_future().wait();
  watchdog.Stop();  // joins the callbacks' threads
  for (const auto& r : runs) EXPECT_EQ(r.load(), 1);
}

TEST(KernelWatchdogTest, DisarmedOrNotYetDueCallbacksNeverRun) {
  std::atomic<int> runs{0};
  {
    KernelWatchdog watchdog;
    const auto far = Clock::now() + std::chrono::hours(1);
    std::optional<KernelWatchdog::Id> disarmed = watchdog.Arm(far, [&] { ++runs; });
    ASSERT_TRUE(disarmed);
    watchdog.Disarm(*disarmed);
    ASSERT_TRUE(watchdog.Arm(far, [&] { ++runs; }));  // pending at Stop
    watchdog.Stop();
    ASSERT_TRUE(watchdog.Arm(Clock::now(), [&] { ++runs; }));  // after Stop
  }
  EXPECT_EQ(runs.load(), 0);
}

TEST(KernelWatchdogTest, StopWaitsForACallbackThatIsRunning) {
  KernelWatchdog watchdog;
  std::promise<void> started, release;
  std::atomic<bool> finished{false};
  std::shared_future<void> released = release.get_future().share();
  ASSERT_TRUE(watchdog.Arm(Clock::now(), [&] {
    started.set_value();
    released.wait();
    finished = true;
  }));
  started.get_future().wait();
  std::thread releaser([&] { release.set_value(); });
  watchdog.Stop();
  EXPECT_TRUE(finished.load());
  releaser.join();
}

TEST(RunningKernelsTest, CountsAndWaitsForNone) {
  RunningKernels kernels;
  kernels.Add();
  kernels.Add();
  EXPECT_EQ(kernels.WaitNone(std::chrono::milliseconds(0)), 2u);
  kernels.Done();
  std::thread last([&] { kernels.Done(); });
  EXPECT_EQ(kernels.WaitNone(std::chrono::hours(1)), 0u);
  last.join();
}

}  // namespace
}  // namespace naarpc::internal
