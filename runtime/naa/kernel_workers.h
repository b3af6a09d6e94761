// Kernels with a time limit (NaaHandler::KernelTimeout): the watchdog that
// enforces it, and the count of kernels running. Internal to the NAA room.
//
// A kernel runs on the engine thread that took its call (no hand-over to
// another thread: that cost more than the call). The watchdog is a timer; if
// a kernel is still running at its time limit, the watchdog's callback takes
// the connection over (answers kNaaStatusKernelTimeout, ends the
// connection) and the engine gives the kernel's thread up: it finishes the
// kernel by itself, then leaves. KernelRace decides, once, which of the two
// came first.
#ifndef NAARPC_RUNTIME_NAA_KERNEL_WORKERS_H_
#define NAARPC_RUNTIME_NAA_KERNEL_WORKERS_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>

#include "naarpc/deadline.h"

namespace naarpc::internal {

// Whether a kernel returned in time or its watchdog fired first.
class KernelRace {
 public:
  // True for the first caller only (the kernel's thread when it returns, the
  // watchdog when it fires); the winner owns the connection from then on.
  bool Win() { return !decided_.exchange(true, std::memory_order_acq_rel); }

 private:
  std::atomic<bool> decided_{false};
};

// One timer for a server's kernels with a time limit: runs a callback when
// a kernel's limit passes unless the kernel disarmed it first. Sleeps until
// the earliest limit; arming a later one (every call of a routine with a
// fixed limit) wakes nothing. A callback runs on a thread of its own (it
// may block: it answers the host), joined by Stop().
class KernelWatchdog {
 public:
  using Id = uint64_t;

  KernelWatchdog() = default;
  ~KernelWatchdog() { Stop(); }
  KernelWatchdog(const KernelWatchdog&) = delete;
  KernelWatchdog& operator=(const KernelWatchdog&) = delete;

  // Runs `on_expiry` once `at` has passed, unless Disarm(id) comes first;
  // nullopt if the timer's thread cannot start (nothing is armed). After
  // Stop(): never runs it.
  std::optional<Id> Arm(Deadline::Clock::time_point at, std::function<void()> on_expiry);
  void Disarm(Id id);
  // Stops the timer (callbacks not yet due never run) and joins the
  // callbacks' threads. Not from a callback.
  void Stop();

 private:
  using Timers = std::multimap<Deadline::Clock::time_point, std::pair<Id, std::function<void()>>>;
  struct Expiry {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };

  void Loop();
  // Starts `fn` on a thread of its own (runs it here if none can start).
  // REQUIRES: mu_ held; it is released while `fn` runs here.
  void StartExpiryLocked(std::unique_lock<std::mutex>& lock, std::function<void()> fn);

  std::mutex mu_;
  std::condition_variable cv_;
  Timers timers_;                                  // guarded by mu_
  std::unordered_map<Id, Timers::iterator> by_id_;  // guarded by mu_
  Id next_id_ = 1;                                 // guarded by mu_
  // When Loop() wakes next; max: not before it is notified. Guarded by mu_.
  Deadline::Clock::time_point wake_at_ = Deadline::Clock::time_point::max();
  bool stopped_ = false;      // guarded by mu_
  std::thread thread_;        // started by the first Arm; guarded by mu_
  std::list<Expiry> expiries_;  // guarded by mu_
};

// Kernels with a time limit running, those given up included. Shared: a
// kernel given up may outlive the server.
struct RunningKernels {
  std::mutex mu;
  std::condition_variable cv;
  size_t count = 0;  // guarded by mu
  void Add();
  void Done();
  // Waits until none runs or `grace` passes; returns how many still run.
  size_t WaitNone(std::chrono::milliseconds grace);
};

}  // namespace naarpc::internal

#endif  // NAARPC_RUNTIME_NAA_KERNEL_WORKERS_H_
