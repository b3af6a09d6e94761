#include "runtime/naa/kernel_workers.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <system_error>
#include <thread>
#include <vector>

namespace naarpc::internal {
namespace {

using Clock = Deadline::Clock;

TEST(KernelRaceTest, OnlyTheFirstCallerOfARoundWins) {
  KernelRace race;
  const KernelRace::Round round = race.Begin();
  EXPECT_TRUE(race.Win(round));
  EXPECT_FALSE(race.Win(round));
  EXPECT_FALSE(race.Win(round));
}

TEST(KernelRaceTest, ALateCallerOfAnEarlierRoundNeverWinsALaterOne) {
  KernelRace race;
  const KernelRace::Round first = race.Begin();
  EXPECT_TRUE(race.Win(first));  // the kernel returned in time
  const KernelRace::Round second = race.Begin();
  EXPECT_FALSE(race.Win(first));  // that call's watchdog, firing late
  EXPECT_TRUE(race.Win(second));
  EXPECT_FALSE(race.Win(KernelRace::Round{0}));  // never begun
}

TEST(KernelRaceTest, ExactlyOneOfTwoThreadsWinsEachRound) {
  KernelRace race;
  for (int i = 0; i < 100; ++i) {
    const KernelRace::Round round = race.Begin();
    std::atomic<int> winners{0};
    std::thread a([&] { winners += race.Win(round); });
    std::thread b([&] { winners += race.Win(round); });
    a.join();
    b.join();
    EXPECT_EQ(winners.load(), 1);
  }
}

// An alarm whose expiry runs `fn`.
class TestAlarm final : public KernelAlarm {
 public:
  explicit TestAlarm(std::function<void()> fn) : fn_(std::move(fn)) {}
  std::atomic<int> expired_calls{0};

 private:
  std::function<void()> Expired() override {
    ++expired_calls;
    return fn_;
  }
  std::function<void()> fn_;
};

TEST(KernelWatchdogTest, RunsTheExpiryOfALimitThatPassed) {
  KernelWatchdog watchdog;
  std::promise<std::thread::id> ran;
  TestAlarm alarm([&] { ran.set_value(std::this_thread::get_id()); });
  ASSERT_TRUE(watchdog.Arm(alarm, Clock::now()).ok());
  // On a thread of its own, not the caller's.
  EXPECT_NE(ran.get_future().get(), std::this_thread::get_id());
  watchdog.Stop();
  EXPECT_EQ(alarm.expired_calls.load(), 1);
  watchdog.Disarm(alarm);  // fired: nothing to do
}

TEST(KernelWatchdogTest, RunsEachDueExpiryOnceInAnyArmingOrder) {
  KernelWatchdog watchdog;
  std::atomic<int> runs[4] = {0, 0, 0, 0};
  std::promise<void> all;
  std::atomic<int> left{4};
  std::vector<std::unique_ptr<TestAlarm>> alarms;
  for (int i = 0; i < 4; ++i) {
    alarms.push_back(std::make_unique<TestAlarm>([&, i] {
      ++runs[i];
      if (--left == 0) all.set_value();
    }));
  }
  const auto now = Clock::now();
  // Later limits first, one in the middle, two equal: the earliest must
  // still wake the timer, and the list stays ordered.
  for (int i : {2, 0, 3, 1}) {
    ASSERT_TRUE(watchdog.Arm(*alarms[i], now + std::chrono::milliseconds(i == 3 ? 2 : i)).ok());
  }
  all.get_future().wait();
  watchdog.Stop();  // joins the expiries' threads
  for (const auto& r : runs) EXPECT_EQ(r.load(), 1);
}

TEST(KernelWatchdogTest, DisarmedOrNotYetDueAlarmsNeverFire) {
  std::atomic<int> runs{0};
  TestAlarm first([&] { ++runs; }), middle([&] { ++runs; }), last([&] { ++runs; });
  {
    KernelWatchdog watchdog;
    const auto far = Clock::now() + std::chrono::hours(1);
    ASSERT_TRUE(watchdog.Arm(first, far).ok());
    ASSERT_TRUE(watchdog.Arm(middle, far + std::chrono::seconds(1)).ok());
    ASSERT_TRUE(watchdog.Arm(last, far + std::chrono::seconds(2)).ok());
    watchdog.Disarm(middle);  // from the middle of the list
    watchdog.Disarm(first);   // its head
    ASSERT_TRUE(watchdog.Arm(first, far).ok());  // armed again: pending at Stop
    watchdog.Stop();
    ASSERT_TRUE(watchdog.Arm(middle, Clock::now()).ok());  // after Stop
  }
  EXPECT_EQ(runs.load(), 0);
  EXPECT_EQ(first.expired_calls.load() + middle.expired_calls.load() + last.expired_calls.load(), 0);
}

TEST(KernelWatchdogTest, AnAlarmArmedAgainAfterDisarmFiresOnce) {
  KernelWatchdog watchdog;
  std::promise<void> fired;
  std::atomic<int> runs{0};
  TestAlarm alarm([&] {
    if (++runs == 1) fired.set_value();
  });
  // Call after call, as a connection does: armed, disarmed in time.
  for (int call = 0; call < 1000; ++call) {
    ASSERT_TRUE(watchdog.Arm(alarm, Clock::now() + std::chrono::hours(1)).ok());
    watchdog.Disarm(alarm);
  }
  ASSERT_TRUE(watchdog.Arm(alarm, Clock::now()).ok());
  fired.get_future().wait();
  watchdog.Stop();
  EXPECT_EQ(runs.load(), 1);
}

TEST(KernelWatchdogTest, StopWaitsForAnExpiryThatIsRunning) {
  KernelWatchdog watchdog;
  std::promise<void> started, release;
  std::atomic<bool> finished{false};
  std::shared_future<void> released = release.get_future().share();
  TestAlarm alarm([&] {
    started.set_value();
    released.wait();
    finished = true;
  });
  ASSERT_TRUE(watchdog.Arm(alarm, Clock::now()).ok());
  started.get_future().wait();
  std::thread releaser([&] { release.set_value(); });
  watchdog.Stop();
  EXPECT_TRUE(finished.load());
  releaser.join();
}

TEST(KernelWatchdogTest, ArmFailsWithTheReasonWhenItsThreadCannotStart) {
  KernelWatchdog watchdog([](std::function<void()>) -> std::thread {
    throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
  });
  std::atomic<int> runs{0};
  TestAlarm alarm([&] { ++runs; });
  const Status s = watchdog.Arm(alarm, Clock::now());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("kernel watchdog's thread cannot start"), std::string::npos)
      << s.message();
  watchdog.Disarm(alarm);  // not armed: nothing to do
  watchdog.Stop();
  EXPECT_EQ(runs.load(), 0);
  EXPECT_EQ(alarm.expired_calls.load(), 0);
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
