// Another process of a multi-process test (a host or an NAA of its own),
// started with posix_spawn (fork() after verbs registrations is unsafe) and
// driven over its stdin/stdout: it says where it is ("port N", "READY x"),
// the test waits for those lines, never sleeps.
#ifndef NAARPC_TESTS_TESTING_PEER_PROCESS_H_
#define NAARPC_TESTS_TESTING_PEER_PROCESS_H_

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "naarpc/deadline.h"

extern char** environ;

namespace naarpc::testing {

// The path of `binary` of `package`: from the test's runfiles, or, when
// the test runs directly (e.g. in the Soft-RoCE guest), next to it.
inline std::string PeerBinaryPath(const std::string& binary,
                                  const std::string& package = "tests/e2e") {
  if (const char* srcdir = std::getenv("TEST_SRCDIR")) {
    const char* ws = std::getenv("TEST_WORKSPACE");
    std::string p = std::string(srcdir) + "/" + (ws != nullptr ? ws : "naarpc") +
                    "/" + package + "/" + binary;
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return binary;
  std::string path(self, size_t(n));
  return path.substr(0, path.rfind('/') + 1) + binary;
}

class PeerProcess {
 public:
  // Starts `binary` (a file of `package`, e.g. "peer_process") with
  // `args`; its stdin and stdout are pipes to us.
  static std::unique_ptr<PeerProcess> Start(const std::string& binary,
                                            const std::vector<std::string>& args,
                                            const std::string& package = "tests/e2e") {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0) return nullptr;
    if (pipe2(out, O_CLOEXEC) != 0) {
      close(in[0]);
      close(in[1]);
      return nullptr;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    const std::string path = PeerBinaryPath(binary, package);
    std::vector<std::string> all = {path};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, path.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(in[0]);
    close(out[1]);
    if (rc != 0) {
      ADD_FAILURE() << "cannot start " << path << ": " << std::strerror(rc);
      close(in[1]);
      close(out[0]);
      return nullptr;
    }
    return std::unique_ptr<PeerProcess>(new PeerProcess(pid, in[1], out[0]));
  }

  ~PeerProcess() {
    CloseStdin();
    if (pid_ > 0) {
      kill(pid_, SIGKILL);  // also ends a stopped process
      Wait();
    }
    close(stdout_);
  }

  // Waits until the peer printed `line` (lines printed meanwhile stay
  // available to later calls, so the order of independent lines does not
  // matter).
  ::testing::AssertionResult Expect(const std::string& line) {
    std::string got;
    return ExpectPrefix(line, got, /*exact=*/true);
  }
  // Waits for a line starting with `prefix`; `line` gets all of it.
  ::testing::AssertionResult ExpectPrefix(const std::string& prefix, std::string& line,
                                          bool exact = false) {
    const Deadline deadline = Deadline::After(std::chrono::seconds(30));  // hang guard
    size_t next = 0;
    for (;;) {
      for (; next < lines_.size(); ++next) {
        const std::string& l = lines_[next];
        if (exact ? l == prefix : l.rfind(prefix, 0) == 0) {
          line = l;
          lines_.erase(lines_.begin() + std::ptrdiff_t(next));
          return ::testing::AssertionSuccess();
        }
      }
      if (!ReadLine(deadline)) {
        std::string seen;
        for (const auto& l : lines_) seen += " '" + l + "'";
        return ::testing::AssertionFailure()
               << "the peer did not print '" << prefix << "'" << (exact ? "" : "...")
               << " (unclaimed lines:" << seen << ")";
      }
    }
  }

  void Send(const std::string& command) {
    const std::string line = command + "\n";
    ASSERT_EQ(write(stdin_, line.data(), line.size()), ssize_t(line.size()));
  }
  void Kill(int sig) {
    if (pid_ > 0) kill(pid_, sig);
  }
  // SIGSTOP, and waits until the process is stopped.
  ::testing::AssertionResult Freeze() {
    if (pid_ <= 0) return ::testing::AssertionFailure() << "no process";
    kill(pid_, SIGSTOP);
    int status = 0;
    if (waitpid(pid_, &status, WUNTRACED) != pid_ || !WIFSTOPPED(status)) {
      return ::testing::AssertionFailure() << "the peer did not stop (status " << status << ")";
    }
    return ::testing::AssertionSuccess();
  }
  void CloseStdin() {
    if (stdin_ >= 0) close(stdin_);
    stdin_ = -1;
  }
  // Exit status (128 + signal if killed).
  int Wait() {
    if (pid_ <= 0) return exit_status_;
    int status = 0;
    if (waitpid(pid_, &status, 0) == pid_) {
      exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    pid_ = -1;
    return exit_status_;
  }

 private:
  PeerProcess(pid_t pid, int in, int out) : pid_(pid), stdin_(in), stdout_(out) {}

  // Reads one more line into lines_; false on EOF or deadline.
  bool ReadLine(Deadline deadline) {
    for (;;) {
      if (size_t nl = buffered_.find('\n'); nl != std::string::npos) {
        lines_.push_back(buffered_.substr(0, nl));
        buffered_.erase(0, nl + 1);
        return true;
      }
      pollfd pfd = {stdout_, POLLIN, 0};
      if (poll(&pfd, 1, deadline.PollTimeoutMs()) <= 0) return false;
      char buf[256];
      const ssize_t n = read(stdout_, buf, sizeof buf);
      if (n <= 0) return false;
      buffered_.append(buf, size_t(n));
    }
  }

  pid_t pid_;
  int stdin_;
  int stdout_;
  int exit_status_ = -1;
  std::string buffered_;
  std::deque<std::string> lines_;
};


}  // namespace naarpc::testing

#endif  // NAARPC_TESTS_TESTING_PEER_PROCESS_H_
