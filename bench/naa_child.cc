#include "bench/naa_child.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>

namespace naarpc::bench {

std::optional<NaaChild> NaaChild::Start(size_t port_count,
                                        const std::function<void(const ReportPorts&)>& serve) {
  int fds[2];
  if (pipe(fds) != 0) {
    std::perror("pipe");
    return std::nullopt;
  }
  // Nothing buffered may be written twice (by the child too).
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) {
    std::perror("fork");
    close(fds[0]);
    close(fds[1]);
    return std::nullopt;
  }
  if (pid == 0) {
    close(fds[0]);
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives the benchmark
    bool reported = false;
    serve([&](const std::vector<uint16_t>& ports) {
      const ssize_t bytes = static_cast<ssize_t>(ports.size() * sizeof(uint16_t));
      if (reported || ports.size() != port_count || write(fds[1], ports.data(), bytes) != bytes) {
        _exit(1);
      }
      close(fds[1]);
      reported = true;
    });
    _exit(reported ? 0 : 1);
  }
  close(fds[1]);
  std::vector<uint16_t> ports(port_count);
  const size_t want = port_count * sizeof(uint16_t);
  size_t got = 0;
  auto* out = reinterpret_cast<char*>(ports.data());
  while (got < want) {
    const ssize_t n = read(fds[0], out + got, want - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fds[0]);
  NaaChild child(pid, std::move(ports));
  if (got != want) return std::nullopt;  // ~NaaChild reaps it
  return child;
}

NaaChild::NaaChild(NaaChild&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), ports_(std::move(other.ports_)) {}

NaaChild& NaaChild::operator=(NaaChild&& other) noexcept {
  if (this != &other) {
    Stop();
    pid_ = std::exchange(other.pid_, -1);
    ports_ = std::move(other.ports_);
  }
  return *this;
}

void NaaChild::Kill() { End(SIGKILL); }

void NaaChild::Stop() { End(SIGTERM); }

void NaaChild::End(int signal) {
  if (pid_ <= 0) return;
  kill(pid_, signal);
  if (signal != SIGKILL) {
    // Bounded: a child that ignores SIGTERM is killed. Polled, since valgrind
    // (a reason to stop with SIGTERM) does not know pidfd_open.
    const auto until = std::chrono::steady_clock::now() + kStopGrace;
    for (;;) {
      const pid_t r = waitpid(pid_, nullptr, WNOHANG);
      if (r == pid_ || (r < 0 && errno != EINTR)) {
        pid_ = -1;
        return;
      }
      if (std::chrono::steady_clock::now() >= until) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // teardown, not a test's sync
    }
    kill(pid_, SIGKILL);
  }
  while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

}  // namespace naarpc::bench
