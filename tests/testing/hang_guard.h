// HangGuard: turns a wait that must end by itself into a failure instead of
// a hang. If the scope has not ended within `after`, runs `unblock`
// (Disconnect, Shutdown: calls any thread may make), so that the wait ends
// with an error status. It times nothing, and is generous so that no loaded
// machine (or TCG guest) reaches it. For the transports' own tests.
#ifndef NAARPC_TESTS_TESTING_HANG_GUARD_H_
#define NAARPC_TESTS_TESTING_HANG_GUARD_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

namespace naarpc::testing {

class HangGuard {
 public:
  explicit HangGuard(std::function<void()> unblock,
                     std::chrono::milliseconds after = std::chrono::seconds(60))
      : thread_([this, after, unblock = std::move(unblock)] {
          std::unique_lock<std::mutex> lock(mu_);
          if (!cv_.wait_for(lock, after, [this] { return done_; })) unblock();
        }) {}
  ~HangGuard() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  HangGuard(const HangGuard&) = delete;
  HangGuard& operator=(const HangGuard&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: starts once the members it uses exist
};

}  // namespace naarpc::testing

#endif  // NAARPC_TESTS_TESTING_HANG_GUARD_H_
