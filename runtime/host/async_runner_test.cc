// AsyncRunner: the CallEngine's pool of helper threads (connect + MRSP,
// streaming calls): bounded, started on demand, retired when idle.
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "naarpc/impl/codegen_support.h"

namespace {

using namespace std::chrono_literals;
using naarpc::Status;
using naarpc::codegen::AsyncRunner;

// Hang guard only: every wait here ends on an event well before.
constexpr auto kHangGuard = 60s;
// Long enough that no thread retires while a test runs.
constexpr auto kNeverIdleLongEnough = std::chrono::hours(24);

// Holds every job that enters it until opened; counts how many are inside.
class Gate {
 public:
  Status Pass() {
    std::unique_lock<std::mutex> lock(mu_);
    ++inside_;
    max_inside_ = std::max(max_inside_, inside_);
    changed_.notify_all();
    changed_.wait(lock, [this] { return open_; });
    --inside_;
    return Status::Ok();
  }
  void AwaitInside(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    ASSERT_TRUE(changed_.wait_for(lock, kHangGuard, [&] { return inside_ == n; }));
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    changed_.notify_all();
  }
  int max_inside() {
    std::lock_guard<std::mutex> lock(mu_);
    return max_inside_;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  int inside_ = 0, max_inside_ = 0;
  bool open_ = false;
};

// Waits, without a timing assumption, until `condition` holds.
template <typename Condition>
bool Await(Condition condition) {
  const auto give_up = std::chrono::steady_clock::now() + kHangGuard;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::yield();
  }
  return true;
}
bool AwaitThreads(const AsyncRunner& runner, size_t n) {
  return Await([&] { return runner.threads() == n; });
}

TEST(AsyncRunnerTest, RunsEveryCallAndDeliversItsStatus) {
  AsyncRunner runner(2, kNeverIdleLongEnough);
  auto ok = runner.Run([] { return Status::Ok(); });
  auto failed = runner.Run([] { return naarpc::InvalidArgumentError("bad x"); });
  std::promise<Status> via_callback;
  runner.Run([] { return naarpc::NotFoundError("no y"); },
             [&](Status s) { via_callback.set_value(std::move(s)); });
  EXPECT_TRUE(ok.get().ok());
  Status f = failed.get();
  EXPECT_EQ(f.code(), naarpc::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.message(), "bad x");
  EXPECT_EQ(via_callback.get_future().get().code(), naarpc::StatusCode::kNotFound);
}

TEST(AsyncRunnerTest, StartsAThreadPerBlockedCallUpToTheLimit) {
  constexpr int kCalls = 7;
  AsyncRunner runner(3, kNeverIdleLongEnough);
  Gate gate;
  std::vector<std::future<Status>> calls;
  for (int i = 0; i < kCalls; ++i) calls.push_back(runner.Run([&] { return gate.Pass(); }));
  gate.AwaitInside(3);
  EXPECT_EQ(runner.threads(), 3u);
  for (auto& c : calls) EXPECT_EQ(c.wait_for(0s), std::future_status::timeout);
  gate.Open();
  for (auto& c : calls) EXPECT_TRUE(c.get().ok());
  EXPECT_EQ(gate.max_inside(), 3);
  EXPECT_EQ(runner.threads(), 3u);
}

TEST(AsyncRunnerTest, AnIdleThreadIsReusedBeforeItsIdleTimeout) {
  AsyncRunner runner(4, kNeverIdleLongEnough);
  std::set<std::thread::id> ran_on;
  for (int i = 0; i < 5; ++i) {
    std::thread::id id;
    ASSERT_TRUE(runner.Run([&] {
                  id = std::this_thread::get_id();
                  return Status::Ok();
                }).get().ok());
    ran_on.insert(id);
    // Its future is set before the thread is back waiting for work.
    ASSERT_TRUE(Await([&] { return runner.idle_threads() == 1; }));
  }
  EXPECT_EQ(ran_on.size(), 1u);  // one call at a time: one thread, kept
  EXPECT_EQ(runner.threads(), 1u);
}

TEST(AsyncRunnerTest, IdleThreadsExitAndTheNextCallStartsOneAgain) {
  AsyncRunner runner(4, 0ms);  // a thread with nothing queued exits at once
  Gate gate;
  std::vector<std::future<Status>> calls;
  for (int i = 0; i < 4; ++i) calls.push_back(runner.Run([&] { return gate.Pass(); }));
  gate.AwaitInside(4);
  EXPECT_EQ(runner.threads(), 4u);
  gate.Open();
  for (auto& c : calls) EXPECT_TRUE(c.get().ok());
  ASSERT_TRUE(AwaitThreads(runner, 0)) << runner.threads() << " threads still running";
  // Retired threads are joined, not leaked: a new call still runs.
  EXPECT_TRUE(runner.Run([] { return Status::Ok(); }).get().ok());
  ASSERT_TRUE(AwaitThreads(runner, 0));
}

TEST(AsyncRunnerTest, DestroyingTheRunnerFinishesTheQueuedCalls) {
  Gate gate;
  std::vector<std::future<Status>> calls;
  std::thread opener;
  {
    AsyncRunner runner(1, kNeverIdleLongEnough);
    for (int i = 0; i < 4; ++i) calls.push_back(runner.Run([&] { return gate.Pass(); }));
    gate.AwaitInside(1);
    opener = std::thread([&] { gate.Open(); });
  }  // waits for the running call and the three queued behind it
  opener.join();
  for (auto& c : calls) {
    ASSERT_EQ(c.wait_for(0s), std::future_status::ready);
    EXPECT_TRUE(c.get().ok());
  }
}

}  // namespace
