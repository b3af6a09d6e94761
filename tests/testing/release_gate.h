// ReleaseGate: kernels that return only when the test lets them, so that a
// call which must end another way (a deadline, a watchdog, a killed peer)
// can end no other way, however the machine schedules the test's threads.
// Wait() takes one permit, blocking until there is one; Release(n) gives n,
// for kernels waiting now or later.
#ifndef NAARPC_TESTS_TESTING_RELEASE_GATE_H_
#define NAARPC_TESTS_TESTING_RELEASE_GATE_H_

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace naarpc::testing {

class ReleaseGate {
 public:
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    released_.wait(lock, [this] { return permits_ > 0; });
    --permits_;
  }
  void Release(uint64_t n = 1) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      permits_ += n;
    }
    released_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable released_;
  uint64_t permits_ = 0;
};

}  // namespace naarpc::testing

#endif  // NAARPC_TESTS_TESTING_RELEASE_GATE_H_
