// Kernels with a time limit (NaaHandler::KernelTimeout): the watchdog that
// enforces it, and the count of kernels running. Internal to the NAA room.
//
// A kernel runs on the engine thread that took its call (no hand-over to
// another thread: that cost more than the call). The watchdog is a timer; if
// a kernel is still running at its time limit, the alarm's expiry takes
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
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "naarpc/deadline.h"
#include "naarpc/status.h"

namespace naarpc::internal {

// Whether a kernel returned in time or its watchdog fired first, decided
// once per call (round). One per connection, reused call after call: a
// watchdog that fired late for an earlier round cannot win a later one.
class KernelRace {
 public:
  using Round = uint64_t;
  // Starts the next round, undecided. REQUIRES: the previous one decided or
  // abandoned; one caller at a time (the connection's call).
  Round Begin() {
    const Round round = next_round_++;
    state_.store(round << 1, std::memory_order_release);
    return round;
  }
  // True for the first caller of `round` only (the kernel's thread when it
  // returns, the watchdog when it fires); the winner owns the connection
  // from then on. False for any other round.
  bool Win(Round round) {
    uint64_t undecided = round << 1;
    return state_.compare_exchange_strong(undecided, undecided | 1, std::memory_order_acq_rel);
  }

 private:
  std::atomic<uint64_t> state_{1};  // (round << 1) | decided
  Round next_round_ = 1;            // the caller's
};

// What a kernel with a time limit arms: intrusive, so arming and disarming
// allocate nothing. Its owner disarms it (or sees it fire) before it goes.
class KernelAlarm {
 public:
  KernelAlarm() = default;
  KernelAlarm(const KernelAlarm&) = delete;
  KernelAlarm& operator=(const KernelAlarm&) = delete;

 protected:
  ~KernelAlarm() = default;

 private:
  friend class KernelWatchdog;
  // At the limit, under the watchdog's lock, the alarm still armed (so its
  // owner is alive): what to run on a thread of its own. It must hold
  // whatever it uses: the owner may go once the watchdog's lock is free.
  virtual std::function<void()> Expired() = 0;

  Deadline::Clock::time_point at_{};
  KernelAlarm* prev_ = nullptr;  // earlier or equal limit; guarded by the watchdog's mu_
  KernelAlarm* next_ = nullptr;
  bool armed_ = false;
};

// One timer for a server's kernels with a time limit: runs an alarm's
// expiry when its limit passes unless the kernel disarmed it first. Sleeps
// until the earliest limit; arming a later one (every call of a routine with
// a fixed limit) wakes nothing. An expiry runs on a thread of its own (it
// may block: it answers the host), joined by Stop().
class KernelWatchdog {
 public:
  // How the timer's thread starts; throws std::system_error if it cannot
  // (tests inject that).
  using ThreadStart = std::thread (*)(std::function<void()> body);
  static std::thread StartThread(std::function<void()> body) { return std::thread(std::move(body)); }

  explicit KernelWatchdog(ThreadStart start_thread = &StartThread) : start_thread_(start_thread) {}
  ~KernelWatchdog() { Stop(); }
  KernelWatchdog(const KernelWatchdog&) = delete;
  KernelWatchdog& operator=(const KernelWatchdog&) = delete;

  // Arms `alarm` for `at`: its expiry runs once `at` has passed, unless
  // Disarm(alarm) comes first. Not OK (nothing armed) if the timer's thread
  // cannot start. After Stop(): OK, and it never fires.
  // REQUIRES: `alarm` not armed.
  Status Arm(KernelAlarm& alarm, Deadline::Clock::time_point at);
  // Nothing if it has fired (or was never armed).
  void Disarm(KernelAlarm& alarm);
  // Stops the timer (alarms not yet due never fire) and joins the expiries'
  // threads. Not from an expiry.
  void Stop();

 private:
  struct Expiry {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };

  void Loop();
  void UnlinkLocked(KernelAlarm& alarm);
  // Starts `fn` on a thread of its own (runs it here if none can start).
  // REQUIRES: mu_ held; it is released while `fn` runs here.
  void StartExpiryLocked(std::unique_lock<std::mutex>& lock, std::function<void()> fn);

  const ThreadStart start_thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  // Armed alarms, earliest limit first (a new one is linked from the back:
  // with fixed limits per routine, at the back). Guarded by mu_.
  KernelAlarm* first_ = nullptr;
  KernelAlarm* last_ = nullptr;
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
