// EventEngine: a few threads that drive many connections through their
// readiness descriptors (Connection::notify_fd) with one epoll set, so that
// threads do not grow with connections and an idle connection costs no CPU.
//
// Each driven connection is registered one-shot: the thread that takes its
// event owns it until Drive() returns, so a connection is only ever used by
// one thread at a time (transport.h) and the owner may block in it (run a
// call, wait for a kernel). Before it blocks, the owner calls
// BeforeBlocking(): if no other thread is left waiting for events, one more
// is started, up to Options::max_threads, so a long call never holds up the
// others. The thread that took the event runs the call itself: no hand-over
// between threads on the call path. After a call the owner may stay with a
// busy connection for its next one (TryLinger); threads beyond
// Options::threads leave again once they have seen no event for a while.
//
// Deadlines: Drive() returns the connection's next deadline; once it passes,
// the connection is driven again (with or without an event). Internal to the
// runtime.
#ifndef NAARPC_RUNTIME_ENGINE_EVENT_ENGINE_H_
#define NAARPC_RUNTIME_ENGINE_EVENT_ENGINE_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "naarpc/deadline.h"
#include "naarpc/status.h"
#include "runtime/unique_fd.h"

namespace naarpc::internal {

// One connection the engine drives.
class Driven {
 public:
  virtual ~Driven() = default;
  // The descriptor to wait on; valid while the engine drives it.
  virtual int fd() const = 0;
  // Its descriptor was ready (possibly spuriously) or its deadline passed:
  // makes progress, and returns the next deadline (Deadline::Infinite() for
  // none) to be driven again, or nullopt once it has ended (the engine then
  // lets it go). Runs on one engine thread at a time, which may block in it.
  virtual std::optional<Deadline> Drive() = 0;
  // Safe from any thread, at any time: makes it end soon (its descriptor
  // becomes ready and its next Drive() returns nullopt).
  virtual void Interrupt() = 0;
  // Once, after Drive() returned nullopt and the engine stopped watching the
  // descriptor: it may be closed now.
  virtual void Ended() {}
};

class EventEngine {
 private:
  struct Entry;

 public:
  struct Options {
    size_t threads = 0;       // always waiting for events; 0 = one per core
    size_t max_threads = 64;  // with the ones started for blocked or lingering owners
    // A thread beyond `threads` that has had no event for this long leaves.
    std::chrono::milliseconds spare_idle{5000};
  };

  static Result<std::unique_ptr<EventEngine>> Start(Options options);
  ~EventEngine();  // Stop()
  EventEngine(const EventEngine&) = delete;
  EventEngine& operator=(const EventEngine&) = delete;

  // Drives `driven` from now on; first on its descriptor or at `deadline`.
  Status Add(std::shared_ptr<Driven> driven, Deadline deadline);
  // REQUIRES: called from Drive(). The caller is about to block: makes sure
  // another thread waits for events (starts one if none does and fewer
  // than max_threads run).
  void BeforeBlocking();
  // REQUIRES: called from Drive(). The caller would like to stay with its
  // connection a while (wait there for its next event rather than in the
  // epoll set): true if it may, i.e. fewer than max_threads - 1 others stay
  // with theirs and another thread waits for events (one is started if
  // none does), so one always serves the rest. Then EndLinger() when it
  // stops.
  bool TryLinger();
  void EndLinger();

  // An owner blocked in Drive() (a kernel that may overrun its time limit)
  // that another thread may give up: its connection and its thread.
  class Owner {
   private:
    friend class EventEngine;
    std::shared_ptr<Entry> entry;
    std::thread::id thread;
    bool lingering = false;
  };
  // REQUIRES: called from Drive(), before the caller blocks.
  Owner CurrentOwner() const;
  // From another thread, while the owner is still blocked in its Drive():
  // lets its connection go (the descriptor unwatched, then Ended(), on this
  // thread) and its thread (no longer counted, linger included; Stop does not
  // join it; a replacement starts if fewer than Options::threads remain).
  // The owner, once unblocked, calls LeaveGivenUp() and returns from Drive()
  // without touching the engine, the connection, or anything they own: both
  // may be gone. REQUIRES: before Stop().
  void GiveUp(const Owner& owner);
  // The calling owner thread has been given up (GiveUp): its Drive() returns
  // whatever, and its thread leaves the engine at once.
  static void LeaveGivenUp();
  static bool GivenUp();
  // Interrupts every driven connection and waits until all have ended.
  void InterruptAll();
  // Stops and joins the threads. REQUIRES: nothing driven (InterruptAll).
  void Stop();

  // Running now: Options::threads, and those started for blocked or
  // lingering owners until they have had no event for a while.
  size_t threads() const;
  size_t driven() const;

 private:
  // A driven connection: who owns it now (kWaiting: armed in the epoll set).
  enum : uint8_t { kWaiting, kOwned, kOwnedAgain, kGone };
  struct Entry {
    uint64_t id = 0;
    std::shared_ptr<Driven> driven;
    int fd = -1;
    std::atomic<uint8_t> state{kOwned};
    // Its place in timers_ (guarded by timer_mu_), if has_timer.
    std::multimap<Deadline::Clock::time_point, uint64_t>::iterator timer;
    bool has_timer = false;  // guarded by timer_mu_
    // When its timer expires (ns since the clock's epoch; INT64_MAX: none).
    // Written under timer_mu_; read without it by the owner (SetTimer).
    std::atomic<int64_t> timer_at{INT64_MAX};
  };

  explicit EventEngine(Options options) : options_(options) {}
  Status StartThread();  // REQUIRES: mu_ held
  void Loop();
  // A thread beyond Options::threads whose wait timed out: true if it left
  // (moved to retired_), another thread still waiting for events.
  bool RetireIfSpare();
  void JoinRetiredLocked();  // REQUIRES: mu_ held
  std::shared_ptr<Entry> Find(uint64_t id);
  // Claims `e` for this thread; false if another owns it (that owner is
  // then asked to drive it once more).
  static bool Claim(Entry& e);
  // Drives a claimed entry until it can wait again, re-arming it, or lets
  // it go once it has ended.
  void Run(const std::shared_ptr<Entry>& e);
  // Lazy: a timer already set for the same time or earlier stays (when it
  // fires, Drive() returns the later deadline), so a deadline that only
  // moves later, as an idle deadline does with every call, costs nothing.
  void SetTimer(Entry& e, Deadline deadline);
  void Remove(const std::shared_ptr<Entry>& e);
  // On the timer descriptor's event: drives the entries whose deadline has
  // passed, the descriptor armed for the next one first.
  void RunTimers();
  // Sets timer_fd_ to the earliest deadline. REQUIRES: timer_mu_ held.
  void ArmTimerFdLocked();

  // The entry this thread drives now (Run), its linger, whether it was given up.
  static thread_local const std::shared_ptr<Entry>* current_;
  static thread_local bool lingering_here_;
  static thread_local bool given_up_;

  const Options options_;
  UniqueFd epoll_, wake_;
  UniqueFd timer_fd_;  // expires at the earliest deadline (or earlier)
  std::atomic<bool> stopping_{false};
  std::atomic<size_t> waiting_{0};  // threads between events
  std::atomic<size_t> lingering_{0};
  std::atomic<size_t> running_{0};  // threads_.size(), read without mu_
  mutable std::mutex mu_;
  std::condition_variable none_driven_;
  std::list<std::thread> threads_;                                  // guarded by mu_
  std::list<std::thread> retired_;  // left Loop(), joined later; guarded by mu_
  std::unordered_map<uint64_t, std::shared_ptr<Entry>> entries_;  // guarded by mu_
  uint64_t next_id_ = 2;                                          // guarded by mu_
  std::mutex timer_mu_;
  std::multimap<Deadline::Clock::time_point, uint64_t> timers_;  // guarded by timer_mu_
  // When timer_fd_ expires; max: disarmed. A later deadline leaves it early
  // (one spurious wake-up) rather than a system call per change.
  Deadline::Clock::time_point timer_fd_at_ = Deadline::Clock::time_point::max();
};

}  // namespace naarpc::internal

#endif  // NAARPC_RUNTIME_ENGINE_EVENT_ENGINE_H_
