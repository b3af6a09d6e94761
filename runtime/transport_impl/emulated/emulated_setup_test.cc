// The emulated transport's connection set-up: addresses, refusals, the
// listener, and the wire's hello and frame checks (listener.cc, sockets.cc,
// frame.cc).
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
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

// ---- connection set-up --------------------------------------------------------

TEST(EmulatedTransport, ConnectAcceptAndKeys) {
  auto t = NewEmulatedTransport();
  EXPECT_EQ(t->name(), "emulated");
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  EXPECT_NE(p.listener->port(), 0);
  EXPECT_NE(p.client->peer_name().find("127.0.0.1"), std::string::npos);
  EXPECT_NE(p.server->peer_name().find("127.0.0.1"), std::string::npos);

  Buf a = Reg(*p.client, 64), b = Reg(*p.client, 64), c = Reg(*p.server, 64);
  std::vector<uint32_t> keys = {a.mr->lkey(), a.mr->rkey(), b.mr->lkey(), b.mr->rkey()};
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_NE(keys[i], 0u);
    for (size_t j = i + 1; j < keys.size(); ++j) EXPECT_NE(keys[i], keys[j]);
  }
  EXPECT_EQ(a.mr->addr(), a.data.data());
  EXPECT_EQ(a.mr->length(), 64u);
  EXPECT_EQ(a.mr->remote_addr(), a.addr());

  uint8_t x[8];
  EXPECT_EQ(p.client->RegisterMemory(x, 8, kAccessRemoteWrite).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(p.client->RegisterMemory(x, 8, 0x100).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(p.client->RegisterMemory(x, 8, 0).ok());
}

bool HostHasIpv6Loopback() {
  int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

// The families `host` resolves to here (from /etc/hosts for "localhost").
std::set<int> FamiliesOf(const char* host) {
  std::set<int> families;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host, nullptr, &hints, &res) != 0) return families;
  for (const addrinfo* r = res; r != nullptr; r = r->ai_next) families.insert(r->ai_family);
  ::freeaddrinfo(res);
  return families;
}

// A WRITE_WITH_IMM from the client lands in the server's region.
void ExpectWriteWithImmLands(Pair& p) {
  Buf target = Reg(*p.server, 256);
  ASSERT_TRUE(p.server->PostRecv(7, LocalBuffer{}).ok());
  Buf src = Reg(*p.client, 256);
  FillPattern(src.data, 6);
  ASSERT_TRUE(
      Post(*p.client, {WriteImm(1, src.all(), target.addr(), target.mr->rkey(), 0x0a0b0c0d)}).ok());
  auto sc = PollN(*p.server, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, CompletionStatus::kSuccess);
  EXPECT_EQ(sc[0].imm_data, 0x0a0b0c0du);
  EXPECT_EQ(target.data, src.data);
}

TEST(EmulatedTransport, Ipv6LiteralsWithOrWithoutBrackets) {
  if (!HostHasIpv6Loopback()) GTEST_SKIP() << "this host has no IPv6 loopback (::1)";
  auto t = NewEmulatedTransport();
  for (const char* listen_on : {"::1", "[::1]", "::"}) {
    for (const char* connect_to : {"::1", "[::1]"}) {
      SCOPED_TRACE(std::string("listen on ") + listen_on + ", connect to " + connect_to);
      Pair p = MakePair(*t, listen_on, connect_to);
      ASSERT_TRUE(p.client && p.server);
      EXPECT_EQ(p.client->peer_name(), "[::1]:" + std::to_string(p.listener->port()));
      EXPECT_EQ(p.server->peer_name().rfind("[::1]:", 0), 0u) << p.server->peer_name();
      ExpectWriteWithImmLands(p);
    }
  }
}

TEST(EmulatedTransport, ANameReachesAListenerOnAnyOfItsAddresses) {
  // "localhost" usually names ::1 and 127.0.0.1: Connect tries each in turn.
  const std::set<int> families = FamiliesOf("localhost");
  if (families != std::set<int>{AF_INET, AF_INET6} || !HostHasIpv6Loopback()) {
    GTEST_SKIP() << "'localhost' does not name both ::1 and 127.0.0.1 here";
  }
  auto t = NewEmulatedTransport();
  for (const char* listen_on : {"127.0.0.1", "::1"}) {
    SCOPED_TRACE(std::string("listen on ") + listen_on);
    Pair p = MakePair(*t, listen_on, "localhost");
    ASSERT_TRUE(p.client && p.server);
    ExpectWriteWithImmLands(p);
  }
}

TEST(EmulatedTransport, ConnectRefusedOnEveryAddressNamesTheTarget) {
  if (!HostHasIpv6Loopback()) GTEST_SKIP() << "this host has no IPv6 loopback (::1)";
  EmulatedOptions o;
  o.connect_retries = 0;
  auto t = NewEmulatedTransport(o);
  uint16_t port;
  {
    auto l = t->Listen("::1", 0);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    port = (*l)->port();
  }
  auto c = t->Connect("::1", port, Deadline::After(kTimeout));
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(c.status().message().find("[::1]:" + std::to_string(port)), std::string::npos)
      << c.status().ToString();
  EXPECT_NE(c.status().message().find("refused"), std::string::npos) << c.status().ToString();
}

TEST(EmulatedTransport, ConnectRefusedIsUnavailable) {
  EmulatedOptions o;
  o.connect_retries = 0;
  // A retry, which connect_retries = 0 forbids, would sleep for an hour.
  o.connect_retry_delay = std::chrono::hours(1);
  std::shared_ptr<Transport> t = NewEmulatedTransport(o);
  uint16_t port;
  {
    auto l = t->Listen("127.0.0.1", 0);
    ASSERT_TRUE(l.ok());
    port = (*l)->port();
  }  // closed: nobody listens there now
  // No deadline: the refusal alone ends Connect (a retry never would).
  auto status = ReturnsWithinHangGuard(
      [t, port] { return t->Connect("127.0.0.1", port, Deadline::Infinite()).status(); });
  ASSERT_TRUE(status.has_value()) << "Connect did not return: it retried a refused connection";
  EXPECT_EQ(status->code(), StatusCode::kUnavailable) << status->ToString();
}

TEST(EmulatedTransport, ListenerShutdownUnblocksAccept) {
  auto t = NewEmulatedTransport();
  auto l = t->Listen("0.0.0.0", 0);
  ASSERT_TRUE(l.ok());
  Status accepted;
  std::atomic<bool> started{false};
  // Nobody connects: only Shutdown ends this Accept with kUnavailable. Its
  // deadline is a hang guard (it would end it with kDeadlineExceeded).
  std::thread th([&] {
    started = true;
    accepted = (*l)->Accept(Deadline::After(kTimeout)).status();
  });
  while (!started) std::this_thread::yield();
  // Not synchronisation: lets the thread block in Accept, so that Shutdown
  // has to wake it. If Shutdown comes first, Accept finds the listener shut
  // down at once: the test holds either way.
  std::this_thread::sleep_for(20ms);
  (*l)->Shutdown();
  th.join();
  EXPECT_EQ(accepted.code(), StatusCode::kUnavailable) << accepted.ToString();
  // Later calls fail at once too (not by their deadline).
  EXPECT_EQ((*l)->Accept(Deadline::After(kTimeout)).status().code(), StatusCode::kUnavailable);
}

// A raw socket speaking a foreign hello.
int RawConnect(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

TEST(EmulatedTransport, HelloWithBadMagicIsAProtocolError) {
  auto t = NewEmulatedTransport();
  auto l = t->Listen("127.0.0.1", 0);
  ASSERT_TRUE(l.ok());
  int fd = RawConnect((*l)->port());
  const char junk[16] = "GET / HTTP/1.0\n";
  ASSERT_EQ(::send(fd, junk, 16, 0), 16);
  auto s = (*l)->Accept(Deadline::After(kTimeout));
  EXPECT_EQ(s.status().code(), StatusCode::kProtocolError);
  EXPECT_NE(s.status().message().find("not an emulated-transport peer"), std::string::npos)
      << s.status().message();
  ::close(fd);
  // The listener is still usable.
  std::optional<Result<std::unique_ptr<Connection>>> c;
  std::thread th([&] { c.emplace(t->Connect("127.0.0.1", (*l)->port(), Deadline::After(kTimeout))); });
  EXPECT_TRUE((*l)->Accept(Deadline::After(kTimeout)).ok());
  th.join();
  EXPECT_TRUE(c->ok());
}

TEST(EmulatedTransport, MalformedFrameAfterHelloBreaksTheConnection) {
  auto t = NewEmulatedTransport();
  auto l = t->Listen("127.0.0.1", 0);
  ASSERT_TRUE(l.ok());
  int fd = RawConnect((*l)->port());
  uint8_t hello[16] = {0x45, 0x45, 0x41, 0x4e, 1, 0};  // magic "NAEE" LE, version 1
  ASSERT_EQ(::send(fd, hello, 16, 0), 16);
  auto s = (*l)->Accept(Deadline::After(kTimeout));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Buf rx = Reg(**s, 16);
  ASSERT_TRUE((*s)->PostRecv(1, rx.local(0, 16)).ok());
  uint8_t frame[32] = {0x99};  // unknown frame type
  ASSERT_EQ(::send(fd, frame, 32, 0), 32);
  std::vector<Completion> got;
  Completion c[4];
  Status down;
  for (;;) {
    auto r = (*s)->PollCompletions(c, Deadline::After(kTimeout));
    if (!r.ok()) {
      down = r.status();
      break;
    }
    ASSERT_GT(*r, 0u);
    got.insert(got.end(), c, c + *r);
  }
  EXPECT_EQ(down.code(), StatusCode::kDisconnected);
  EXPECT_NE(down.message().find("protocol error"), std::string::npos) << down.message();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, CompletionStatus::kFlushed);
  ::close(fd);
}

TEST(EmulatedTransport, SilentPeerTimesOutInAccept) {
  EmulatedOptions o;
  o.handshake_timeout = 50ms;
  auto t = NewEmulatedTransport(o);
  auto l = t->Listen("127.0.0.1", 0);
  ASSERT_TRUE(l.ok());
  int fd = RawConnect((*l)->port());  // never says hello
  auto s = (*l)->Accept(Deadline::After(kTimeout));
  // The handshake timeout ended it, not Accept's own deadline (a hang guard,
  // which would say "accept timed out").
  EXPECT_EQ(s.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.status().message().find("hello exchange with"), std::string::npos)
      << s.status().ToString();
  ::close(fd);
}

// Past max_pending_handshakes the oldest handshake is dropped, and Accept
// says so (the server logs it), naming the peer.
TEST(EmulatedTransport, DroppedHandshakesAreReported) {
  EmulatedOptions o;
  o.max_pending_handshakes = 2;
  o.handshake_timeout = kTimeout * 2;  // only the drop can end Accept
  auto t = NewEmulatedTransport(o);
  auto l = t->Listen("127.0.0.1", 0);
  ASSERT_TRUE(l.ok());
  std::vector<int> fds;
  for (int i = 0; i < 3; ++i) fds.push_back(RawConnect((*l)->port()));  // silent
  auto s = (*l)->Accept(Deadline::After(kTimeout));
  EXPECT_EQ(s.status().code(), StatusCode::kUnavailable) << s.status().ToString();
  EXPECT_NE(s.status().message().find("handshake with 127.0.0.1:"), std::string::npos)
      << s.status().ToString();
  EXPECT_NE(s.status().message().find("failed: dropped, the oldest of more than 2 in progress"),
            std::string::npos)
      << s.status().ToString();
  for (int fd : fds) ::close(fd);
}

// A notify_fd that cannot be created leaves errno saying why (transport.h).
TEST(EmulatedTransport, NotifyFdFailureKeepsErrno) {
  auto t = NewEmulatedTransport();
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.server);
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = std::min<rlim_t>(saved.rlim_cur, 1024);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> fillers;  // every descriptor taken
  for (int fd; (fd = ::dup(0)) >= 0;) fillers.push_back(fd);
  const int dup_err = errno;
  errno = 0;
  const int fd = p.server->notify_fd();
  const int err = errno;
  for (int f : fillers) ::close(f);
  ::setrlimit(RLIMIT_NOFILE, &saved);
  ASSERT_EQ(dup_err, EMFILE);
  EXPECT_EQ(fd, -1);
  EXPECT_EQ(err, EMFILE);
  EXPECT_GE(p.server->notify_fd(), 0);  // with descriptors again
}

TEST(EmulatedTransport, HelloVersionMismatchIsAProtocolError) {
  auto t = NewEmulatedTransport();
  // A fake server answering with version 99.
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(lfd, 1), 0);
  socklen_t len = sizeof(a);
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  std::thread th([&] {
    int fd = ::accept(lfd, nullptr, nullptr);
    uint8_t hello[16] = {0x45, 0x45, 0x41, 0x4e, 99, 0};  // magic "NAEE" LE, version 99
    (void)!::send(fd, hello, 16, 0);
    uint8_t in[16];
    (void)!::recv(fd, in, 16, MSG_WAITALL);
    ::close(fd);
  });
  auto c = t->Connect("127.0.0.1", ntohs(a.sin_port), Deadline::After(kTimeout));
  th.join();
  ::close(lfd);
  EXPECT_EQ(c.status().code(), StatusCode::kProtocolError);
  EXPECT_NE(c.status().message().find("version mismatch"), std::string::npos)
      << c.status().message();
}

}  // namespace
}  // namespace naarpc
