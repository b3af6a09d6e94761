// File descriptors for the transports: ownership, and a timerfd set to a
// steady_clock time point.
#ifndef NAARPC_RUNTIME_UNIQUE_FD_H_
#define NAARPC_RUNTIME_UNIQUE_FD_H_

#include <sys/timerfd.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <utility>

namespace naarpc {

// A file descriptor, closed on destruction (-1: none).
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~UniqueFd() { Reset(); }
  int get() const { return fd_; }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Sets timerfd `fd` (CLOCK_MONOTONIC, which steady_clock is) to expire at
// `at`, or disarms it (nullopt); that also clears its expirations. False
// if timerfd_settime failed.
inline bool SetTimerFd(int fd, std::optional<std::chrono::steady_clock::time_point> at) {
  itimerspec its{};
  if (at) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(at->time_since_epoch());
    its.it_value.tv_sec = static_cast<time_t>(ns.count() / 1'000'000'000);
    its.it_value.tv_nsec = static_cast<long>(ns.count() % 1'000'000'000);
  }
  return ::timerfd_settime(fd, TFD_TIMER_ABSTIME, &its, nullptr) == 0;
}

}  // namespace naarpc

#endif  // NAARPC_RUNTIME_UNIQUE_FD_H_
