// NotifyLoop: drives one connection as an event loop does (transport.h,
// notify_fd): drain, arm, drain again, WaitNotify(now); sleep in epoll_wait
// on notify_fd (level-triggered) only once all that found nothing. For the
// transports' own tests.
#ifndef NAARPC_TESTS_TESTING_NOTIFY_LOOP_H_
#define NAARPC_TESTS_TESTING_NOTIFY_LOOP_H_

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "naarpc/deadline.h"
#include "naarpc/status.h"
#include "naarpc/transport.h"

namespace naarpc::testing {

class NotifyLoop {
 public:
  explicit NotifyLoop(Connection& c, std::chrono::milliseconds hang_guard = std::chrono::seconds(60))
      : c_(c), hang_guard_(hang_guard), fd_(c.notify_fd()), ep_(::epoll_create1(EPOLL_CLOEXEC)) {
    EXPECT_GE(fd_, 0);
    epoll_event ev{};
    ev.events = EPOLLIN;
    EXPECT_EQ(::epoll_ctl(ep_, EPOLL_CTL_ADD, fd_, &ev), 0);
  }
  ~NotifyLoop() { ::close(ep_); }

  // Takes everything queued and arms, until WaitNotify(now) finds nothing
  // (or the connection is down: `down`).
  void Settle() {
    while (!down) {
      if (Drain() > 0 || down) continue;
      ASSERT_TRUE(c_.RequestNotify(NotifyMode::kNextCompletion).ok());
      if (Drain() > 0 || down) continue;
      auto ev = c_.WaitNotify(Deadline::Now());
      if (!ev.ok()) down = ev.status();
      if (!ev.ok() || !*ev) return;
    }
  }
  // Sleeps until notify_fd is readable; false at the hang guard.
  bool Sleep(Deadline guard) {
    sleeps.fetch_add(1);
    epoll_event ev;
    int n;
    do {
      n = ::epoll_wait(ep_, &ev, 1, guard.PollTimeoutMs());
    } while (n < 0 && errno == EINTR);
    if (n > 0) ++wakeups;
    return n > 0;
  }
  // Sleep, Settle until done() holds or the connection is down; false at
  // the hang guard. REQUIRES: Settle() ran since the last call on it.
  bool Run(const std::function<bool()>& done) {
    const Deadline guard = Deadline::After(hang_guard_);
    while (!done() && !down) {
      if (!Sleep(guard)) return false;
      Settle();
    }
    return true;
  }
  // From another thread, while Run runs: returns once the loop has begun
  // to sleep, or at the hang guard. Not synchronisation: the loop may not
  // be asleep yet; tests hold either way.
  void AwaitFirstSleep() const {
    for (const Deadline guard = Deadline::After(hang_guard_);
         sleeps.load() == 0 && !guard.expired();) {
      std::this_thread::yield();
    }
  }
  // What poll(2) says now: does the owner have to act?
  bool Readable() const {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
  }

  std::vector<Completion> got;
  std::optional<Status> down;  // why TryPollCompletions/WaitNotify failed
  int wakeups = 0;              // epoll_wait returns with the fd readable
  std::atomic<int> sleeps{0};   // epoll_wait calls begun

 private:
  size_t Drain() {
    size_t n = 0;
    for (;;) {
      Completion buf[8];
      auto r = c_.TryPollCompletions(buf);
      if (!r.ok()) down = r.status();
      if (!r.ok() || *r == 0) return n;
      got.insert(got.end(), buf, buf + *r);
      n += *r;
    }
  }

  Connection& c_;
  const std::chrono::milliseconds hang_guard_;
  const int fd_;
  const int ep_;
};

}  // namespace naarpc::testing

#endif  // NAARPC_TESTS_TESTING_NOTIFY_LOOP_H_
