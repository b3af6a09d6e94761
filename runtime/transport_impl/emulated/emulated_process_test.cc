// The emulated transport between two processes (fork): an echo across
// them, and a peer killed mid-transfer.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/transport_impl/emulated/emulated_test_util.h"
#include "runtime/transport_impl/emulated/emulated_transport.h"
#include "tests/testing/hang_guard.h"
#include "tests/testing/notify_loop.h"

namespace naarpc {
namespace {

using namespace std::chrono_literals;
using namespace naarpc::emulated_testing;

// ---- a real second process --------------------------------------------------------------

// Child: echo server. Each SEND carries {addr u64, rkey u32} + data; the data
// is written back reversed with WRITE_WITH_IMM (imm = data length).
[[noreturn]] void RunEchoChild(int port_pipe) {
  alarm(60);  // hang guard: never outlive a hung test (SIGALRM fails it)
  auto t = NewEmulatedTransport();
  auto l = t->Listen("127.0.0.1", 0);
  if (!l.ok()) _exit(10);
  uint16_t port = (*l)->port();
  if (::write(port_pipe, &port, sizeof(port)) != sizeof(port)) _exit(11);
  auto cr = (*l)->Accept(Deadline::After(kTimeout));
  if (!cr.ok()) _exit(12);
  Connection& c = **cr;
  constexpr size_t kMax = 16 << 20;
  std::vector<uint8_t> in(kMax + 12), out(kMax);
  auto min = c.RegisterMemory(in.data(), in.size(), kAccessLocalWrite);
  auto mout = c.RegisterMemory(out.data(), out.size(), kAccessLocalWrite);
  if (!min.ok() || !mout.ok()) _exit(13);
  if (!c.PostRecv(0, {reinterpret_cast<uintptr_t>(in.data()), static_cast<uint32_t>(in.size()),
                      (*min)->lkey()})
           .ok()) {
    _exit(14);
  }
  for (;;) {
    Completion comp[4];
    auto r = c.PollCompletions(comp, Deadline::After(kTimeout));
    if (!r.ok()) _exit(r.status().code() == StatusCode::kDisconnected ? 0 : 15);
    for (size_t i = 0; i < *r; ++i) {
      if (comp[i].status == CompletionStatus::kFlushed) continue;  // parent left
      if (comp[i].status != CompletionStatus::kSuccess) _exit(16);
      if (comp[i].opcode != WorkOpcode::kRecv) continue;
      uint64_t addr;
      uint32_t rkey;
      std::memcpy(&addr, in.data(), 8);
      std::memcpy(&rkey, in.data() + 8, 4);
      uint32_t n = comp[i].byte_len - 12;
      for (uint32_t k = 0; k < n; ++k) out[k] = in[12 + n - 1 - k];
      // Post the next receive before replying (as the NAA does).
      if (!c.PostRecv(0, {reinterpret_cast<uintptr_t>(in.data()),
                          static_cast<uint32_t>(in.size()), (*min)->lkey()})
               .ok()) {
        _exit(17);
      }
      SendRequest w = WriteImm(1, {reinterpret_cast<uintptr_t>(out.data()), n, (*mout)->lkey()},
                               addr, rkey, n, /*signaled=*/false);
      if (!c.PostSend(std::span<const SendRequest>(&w, 1)).ok()) _exit(18);
    }
  }
}

TEST(EmulatedTransport, CrossProcessEcho) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    RunEchoChild(fds[1]);
  }
  ::close(fds[1]);
  uint16_t port = 0;
  ASSERT_EQ(::read(fds[0], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
  ::close(fds[0]);

  auto t = NewEmulatedTransport();
  auto cr = t->Connect("127.0.0.1", port, Deadline::After(kTimeout));
  ASSERT_TRUE(cr.ok()) << cr.status().ToString();
  Connection& c = **cr;
  Buf msg = Reg(c, (16 << 20) + 12, kAccessLocalWrite);
  Buf back = Reg(c, 16 << 20);
  const uint32_t sizes[] = {1, 100, 4096, 1 << 20, 16 << 20, 7};
  for (uint32_t n : sizes) {
    uint64_t a = back.addr();
    uint32_t k = back.mr->rkey();
    std::memcpy(msg.data.data(), &a, 8);
    std::memcpy(msg.data.data() + 8, &k, 4);
    for (uint32_t i = 0; i < n; ++i) msg.data[12 + i] = static_cast<uint8_t>(i * 7 + n);
    ASSERT_TRUE(c.PostRecv(n, LocalBuffer{}).ok());
    ASSERT_TRUE(Post(c, {Send(n, msg.local(0, n + 12))}).ok());
    auto got = PollN(c, 2, 30s);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].opcode, WorkOpcode::kSend);
    EXPECT_EQ(got[0].status, CompletionStatus::kSuccess);
    EXPECT_EQ(got[1].opcode, WorkOpcode::kRecvRdmaWithImm);
    EXPECT_EQ(got[1].imm_data, n);
    EXPECT_EQ(got[1].byte_len, n);
    for (uint32_t i = 0; i < n; ++i) {
      ASSERT_EQ(back.data[i], msg.data[12 + n - 1 - i]) << "size " << n << " byte " << i;
    }
  }
  EXPECT_TRUE(c.Disconnect().ok());
  // The child sees the disconnect and exits by itself; if it does not, its
  // alarm (a hang guard) kills it with SIGALRM.
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child did not exit by itself (signal "
                                 << (WIFSIGNALED(status) ? WTERMSIG(status) : 0) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(EmulatedTransport, PeerProcessKilledMidTransfer) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    alarm(30);
    auto t = NewEmulatedTransport();
    auto l = t->Listen("127.0.0.1", 0);
    if (!l.ok()) _exit(10);
    uint64_t port = (*l)->port();
    if (::write(fds[1], &port, sizeof(port)) != sizeof(port)) _exit(11);
    static std::vector<uint8_t> target(64 << 20);
    auto c = (*l)->Accept(Deadline::After(kTimeout));
    if (!c.ok()) _exit(12);
    auto mr = (**c).RegisterMemory(target.data(), target.size(),
                                   kAccessLocalWrite | kAccessRemoteWrite);
    if (!mr.ok()) _exit(13);
    uint64_t info[2] = {reinterpret_cast<uintptr_t>(target.data()), (*mr)->rkey()};
    if (::write(fds[1], info, sizeof(info)) != sizeof(info)) _exit(14);
    for (;;) pause();  // never polls; gets killed
  }
  ::close(fds[1]);
  uint64_t port = 0, info[2] = {};
  ASSERT_EQ(::read(fds[0], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
  auto t = NewEmulatedTransport();
  auto cr = t->Connect("127.0.0.1", static_cast<uint16_t>(port), Deadline::After(kTimeout));
  ASSERT_TRUE(cr.ok()) << cr.status().ToString();
  ASSERT_EQ(::read(fds[0], info, sizeof(info)), static_cast<ssize_t>(sizeof(info)));
  ::close(fds[0]);
  Connection& c = **cr;
  Buf src = Reg(c, 64 << 20);
  ASSERT_TRUE(Post(c, {Write(1, src.all(), info[0], static_cast<uint32_t>(info[1]))}).ok());
  Completion comp[1];
  auto r = c.PollCompletions(comp, Deadline::After(30ms));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 0u);  // stuck: the child does not poll
  ::kill(pid, SIGKILL);
  // The peer's death ends the stalled transfer (the deadline is a hang guard).
  auto got = PollUntilDown(c);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, CompletionStatus::kFlushed);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status));
}

}  // namespace
}  // namespace naarpc
