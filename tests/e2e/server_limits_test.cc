// Server-wide limits and hostile peers (ServerOptions): the memory budget
// across connections, the connection limit, the idle timeout, the log rate
// limit, and handshakes that never finish or carry garbage, which must not
// keep a legitimate host from calling. No sleeps: waits end on the awaited
// event; deadlines only bound them.
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "naarpc/client_session.h"
#include "naarpc/impl/codegen_support.h"
#include "naarpc/naa_server.h"
#include "runtime/transport_impl/emulated/emulated_transport.h"
#include "runtime/transport_impl/emulated/fault_injection.h"
#include "tests/testing/log_capture.h"
#include "tests/testing/test_transport.h"

namespace naarpc {
namespace {

using namespace std::chrono_literals;

constexpr uint8_t kEcho = 1;

constexpr uint8_t kBlock = 2;  // waits until Release(), then echoes

class Echo final : public NaaHandler {
 public:
  uint8_t Handle(NaaCall& call) override {
    if (call.function_code == kBlock) {
      std::unique_lock<std::mutex> lock(mu_);
      ++blocked_;
      cv_.notify_all();
      cv_.wait(lock, [this] { return released_; });
    }
    auto in = call.params[0].data, out = call.params[1].data;
    std::memcpy(out.data(), in.data(), std::min(in.size(), out.size()));
    return kNaaStatusSuccess;
  }
  // Waits until `n` kernels block (bounded by a safety deadline).
  bool WaitBlocked(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(30), [&] { return blocked_ >= n; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int blocked_ = 0;       // guarded by mu_
  bool released_ = false;  // guarded by mu_
};

std::vector<RegionSpec> EchoLayout(uint64_t bytes) {
  return {{"in", Direction::kIn, bytes}, {"out", Direction::kOut, bytes}};
}

class ServerLimitsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    testing::TestTransport t = testing::MakeTestTransport(GetParam());
    if (!t.unavailable.empty()) GTEST_SKIP() << t.unavailable;
    transport_ = std::move(t.transport);
    address_ = t.address;
  }
  void Start(ServerOptions options) {
    options.log = lines_.Sink();
    auto s = NaaServer::Start(*transport_, address_, 0, echo_, options);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
  }
  Result<std::unique_ptr<ClientSession>> Open(uint64_t bytes) {
    return ClientSession::Open(*transport_, address_, server_->port(), EchoLayout(bytes));
  }
  void ExpectEcho(ClientSession& s, uint8_t seed) {
    auto in = s.buffer(0);
    for (size_t i = 0; i < in.size(); ++i) in[i] = std::byte(uint8_t(seed + i));
    Status st = s.Call(kEcho, Deadline::After(20s));
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(std::memcmp(s.buffer(1).data(), in.data(), in.size()), 0);
  }

  std::string address_ = "127.0.0.1";
  std::unique_ptr<Transport> transport_;
  Echo echo_;
  testing::LogCapture lines_;
  std::unique_ptr<NaaServer> server_;
};

TEST_P(ServerLimitsTest, MemoryBudgetSpansConnectionsAndIsFreedWithThem) {
  ServerOptions options;
  options.max_total_bytes = 3 << 20;  // each session below asks for 2 MiB
  Start(options);
  auto a = Open(1 << 20);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = Open(1 << 20);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kMrspError) << b.status().ToString();
  EXPECT_EQ(b.status().wire_code(), std::optional<uint8_t>(0x01));
  // 2 MiB of parameters (+ the spec dialect's 8-byte metadata region).
  EXPECT_TRUE(lines_.WaitFor("bytes requested; the server's memory budget 3145728 has 20971"))
      << lines_.All();
  EXPECT_EQ(lines_.Count("the memory budget has"), 0u) << lines_.All();  // said once
  ExpectEcho(**a, 1);  // the first is unaffected
  ASSERT_TRUE((*a)->Close().ok());
  ASSERT_TRUE(server_->WaitForOpenConnectionsAtMost(0, Deadline::After(20s)));
  auto c = Open(1 << 20);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ExpectEcho(**c, 2);
}

TEST_P(ServerLimitsTest, ConnectionLimitClosesTheExtraOneAndServesTheOthers) {
  ServerOptions options;
  options.max_connections = 2;
  Start(options);
  auto a = Open(64), b = Open(64);
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = Open(64);
  EXPECT_FALSE(c.ok());
  EXPECT_TRUE(lines_.WaitFor("connection limit 2 reached")) << lines_.All();
  ExpectEcho(**a, 3);
  ExpectEcho(**b, 4);
  ASSERT_TRUE((*a)->Close().ok());
  ASSERT_TRUE(server_->WaitForOpenConnectionsAtMost(1, Deadline::After(20s)));
  auto d = Open(64);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ExpectEcho(**d, 5);
}

// A refused connection is closed by the NAA before its MRSP answer: the
// host's error says so, keeps kDisconnected and the transport's detail.
TEST_P(ServerLimitsTest, ARefusedConnectionIsNamedInTheHostsError) {
  ServerOptions options;
  options.max_connections = 1;
  Start(options);
  auto a = Open(64);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = Open(64);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kDisconnected) << b.status().ToString();
  EXPECT_NE(b.status().message().find(
                "the connection ended during the MRSP handshake, before the NAA answered it: the "
                "NAA may have refused the connection at one of its limits"),
            std::string::npos)
      << b.status().ToString();
  EXPECT_NE(b.status().message().find("NAA at "), std::string::npos) << b.status().ToString();
  EXPECT_TRUE(lines_.WaitFor("connection limit 1 reached")) << lines_.All();
  ExpectEcho(**a, 6);
}

TEST_P(ServerLimitsTest, IdleTimeoutClosesAnIdleConnection) {
  ServerOptions options;
  options.idle_timeout = 1ms;
  Start(options);
  auto a = Open(64);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(lines_.WaitFor("closing the connection (ServerOptions::idle_timeout 1 ms)"))
      << lines_.All();
  ASSERT_TRUE(server_->WaitForOpenConnectionsAtMost(0, Deadline::After(20s)));
  Status st = (*a)->Call(kEcho, Deadline::After(20s));
  EXPECT_FALSE(st.ok());
  EXPECT_EQ((*a)->state(), CommState::kError);
}

TEST_P(ServerLimitsTest, LogIsRateLimitedAndCountsWhatItDrops) {
  if (GetParam() != "emulated") {
    GTEST_SKIP() << "needs more refused connections per second than the log limit; a refused "
                    "verbs connection in the TCG guest takes longer than that (the limiter is "
                    "the same code on both transports)";
  }
  ServerOptions options;
  options.max_log_lines_per_second = 2;
  options.max_total_bytes = 64;  // every Open below is refused, one log line each
  Start(options);
  // Refusals until a line reports the ones dropped before it (it passes in
  // a later one-second window than the drops).
  const Deadline end = Deadline::After(20s);
  int refusals = 0;
  while (!lines_.WaitFor("log lines suppressed", 50ms)) {
    ASSERT_FALSE(end.expired()) << "no suppression report after " << refusals << " refusals:\n"
                                << lines_.All();
    for (int i = 0; i < 5; ++i, ++refusals) ASSERT_FALSE(Open(64).ok());
  }
  const std::string all = lines_.All();
  size_t logged = 0;
  for (size_t p = 0; (p = all.find("memory budget", p)) != std::string::npos; ++p) ++logged;
  EXPECT_LT(logged, static_cast<size_t>(refusals)) << all;
  // The report is an entry of its own: every entry is one line.
  EXPECT_EQ(lines_.Count("\n"), 0u) << all;
  EXPECT_EQ(lines_.Count("log lines suppressed)"), lines_.Count("naarpc NAA: ("));
}

// Emulated transport only: raw TCP peers that never finish the hello, or
// send garbage, while a legitimate host connects and calls.
TEST_P(ServerLimitsTest, SilentAndGarbageHandshakesDoNotDelayALegitimateHost) {
  if (GetParam() != "emulated") {
    GTEST_SKIP() << "raw TCP peers exist only for the emulated transport (rdma_cm handles "
                    "the verbs handshake in the kernel)";
  }
  Start({});
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(server_->port());
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  std::vector<int> fds;
  // More silent peers than EmulatedOptions::max_pending_handshakes (64), and
  // some that send garbage instead of a hello.
  for (int i = 0; i < 100; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    if (i % 10 == 0) {
      const char junk[] = "GET / HTTP/1.1\r\n\r\n";
      ASSERT_GT(::send(fd, junk, sizeof(junk), 0), 0);
    }
    fds.push_back(fd);
  }
  auto a = Open(4096);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ExpectEcho(**a, 6);
  for (int fd : fds) ::close(fd);
  EXPECT_TRUE(lines_.WaitFor("handshake with 127.0.0.1:")) << lines_.All();
  EXPECT_NE(lines_.All().find("is not an emulated-transport peer"), std::string::npos)
      << lines_.All();
  // The silent ones past the 64 in progress were dropped, and said so.
  EXPECT_TRUE(lines_.WaitFor("failed: dropped, the oldest of more than 64 in progress"))
      << lines_.All();
  // "accept failed" is for running out of descriptors (docs/server.md).
  EXPECT_EQ(lines_.Count("accept failed"), 0u) << lines_.All();
}

// Threads of this process (the test's and the server's).
size_t ProcessThreads() {
  size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}

// 1,000 sessions on one NAA with default options (50 on verbs: a Soft-RoCE
// connection in the TCG guest takes a large part of a second): all served,
// on a bounded number of threads (the NAA's engine threads drive every
// connection).
TEST_P(ServerLimitsTest, ManySessionsAreServedOnBoundedThreads) {
  const size_t count = GetParam() == "emulated" ? 1000 : 50;
  ServerOptions defaults;
  ASSERT_GE(defaults.max_connections, count);
  const size_t threads_before = ProcessThreads();
  Start(defaults);
  std::vector<std::unique_ptr<ClientSession>> sessions;
  auto open_and_call = [&](size_t n) {
    while (sessions.size() < n) {
      auto s = Open(64);
      ASSERT_TRUE(s.ok()) << sessions.size() << ": " << s.status().ToString();
      sessions.push_back(std::move(s).value());
      ExpectEcho(*sessions.back(), uint8_t(sessions.size()));
    }
  };
  open_and_call(count);
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(server_->connections_open(), count);
  // Every session is served again, the first ones included.
  for (size_t i = 0; i < sessions.size(); ++i) {
    ExpectEcho(*sessions[i], uint8_t(i * 7));
    ASSERT_FALSE(HasFatalFailure()) << "session " << i;
  }
  // The accept thread and the engine's threads: at most max_threads, started
  // only while calls overlapped other work, never one per session.
  const size_t server_threads = ProcessThreads() - threads_before;
  EXPECT_LE(server_threads, 1 + defaults.max_threads);
  RecordProperty("server_threads", std::to_string(server_threads));
}

// Kernels that block hold only their own calls: with one engine thread,
// three connections' kernels block and a fourth connection is still served
// (the engine starts a thread for each owner about to block).
TEST_P(ServerLimitsTest, BlockedKernelsDoNotStallOtherConnections) {
  ServerOptions options;
  options.engine_threads = 1;
  Start(options);
  std::vector<std::unique_ptr<ClientSession>> blocked;
  std::vector<std::future<Status>> calls;
  for (int i = 0; i < 3; ++i) {
    auto s = Open(64);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    blocked.push_back(std::move(s).value());
    ClientSession* session = blocked.back().get();
    calls.push_back(std::async(std::launch::async, [session] {
      return session->Call(kBlock, Deadline::After(60s));
    }));
  }
  ASSERT_TRUE(echo_.WaitBlocked(3));
  auto free = Open(64);
  ASSERT_TRUE(free.ok()) << free.status().ToString();
  ExpectEcho(**free, 11);
  echo_.Release();
  for (auto& call : calls) EXPECT_TRUE(call.get().ok());
}

// No single peer can deny service to another (docs/server.md, "What one
// peer can hold"), with the server's default options: peer A (127.0.0.1)
// takes what it can, then peer B (127.0.0.2, the emulated transport's
// source address) is served. Emulated only: a second peer address on the
// verbs side needs a second device (the guest's rxe1).
class OnePeerCannotStarveAnother : public ServerLimitsTest {
 protected:
  void SetUp() override {
    if (GetParam() != "emulated") GTEST_SKIP() << "a second peer address: emulated only";
    ServerLimitsTest::SetUp();
    EmulatedOptions b;
    b.source_address = "127.0.0.2";
    peer_b_ = NewEmulatedTransport(b);
  }
  // Peer B opens a session and calls: served.
  void ExpectPeerBServed(uint64_t bytes, uint8_t seed) {
    auto b = ClientSession::Open(*peer_b_, address_, server_->port(), EchoLayout(bytes));
    ASSERT_TRUE(b.ok()) << b.status().ToString() << "\n" << lines_.All();
    ExpectEcho(**b, seed);
  }
  std::unique_ptr<Transport> peer_b_;
};

TEST_P(OnePeerCannotStarveAnother, IdleSessionsHoldingEverySlot) {
  ServerOptions defaults;
  Start(defaults);
  // A holds every slot with sessions that finished the MRSP and went silent
  // (or whose process was stopped: the same to the NAA).
  std::vector<std::unique_ptr<ClientSession>> hog;
  for (size_t i = 0; i < defaults.max_connections; ++i) {
    auto a = Open(64);
    ASSERT_TRUE(a.ok()) << i << ": " << a.status().ToString();
    hog.push_back(std::move(a).value());
  }
  auto one_more = Open(64);  // A cannot take one of its own
  EXPECT_FALSE(one_more.ok());
  EXPECT_TRUE(lines_.WaitFor("connection limit " + std::to_string(defaults.max_connections) +
                              " reached"))
      << lines_.All();
  ExpectPeerBServed(64, 7);
  EXPECT_TRUE(lines_.WaitFor("reclaimed: an idle session of the peer holding the most"))
      << lines_.All();
  ExpectPeerBServed(64, 8);  // again: A still holds more than B would
  // A's sessions that were not reclaimed still work.
  ExpectEcho(*hog.back(), 9);
}

// A generated client's pooled session reclaimed while idle: its next call
// opens a fresh session instead of failing, once the NAA has a slot.
TEST_P(OnePeerCannotStarveAnother, APooledSessionReclaimedWhileIdleIsReopened) {
  ServerOptions options;
  options.max_connections = 4;
  Start(options);
  auto pool = std::make_shared<codegen::SessionPool>(*transport_, address_, server_->port(),
                                                     "Echo", kEcho, EchoLayout(64),
                                                     codegen::StubOptions{});
  auto call = [&] {
    auto lease = pool->Acquire(Deadline::After(20s));
    if (!lease.ok()) return lease.status();
    return lease->Call(kEcho, Deadline::After(20s), {});
  };
  ASSERT_TRUE(call().ok());  // the pool's session, now the least recently used
  std::vector<std::unique_ptr<ClientSession>> others;
  for (int i = 0; i < 3; ++i) {
    auto a = Open(64);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    others.push_back(std::move(a).value());
  }
  ExpectPeerBServed(64, 12);  // takes the pool's idle session
  ASSERT_TRUE(lines_.WaitFor("reclaimed: an idle session")) << lines_.All();
  // B has closed its session again: A's three are left, one slot is free.
  ASSERT_TRUE(server_->WaitForOpenConnectionsAtMost(3, Deadline::After(20s)));
  Status st = call();
  EXPECT_TRUE(st.ok()) << st.ToString();
}

TEST_P(OnePeerCannotStarveAnother, ConnectionsThatNeverStartTheirMrsp) {
  const ServerOptions defaults;
  const std::string cap = std::to_string(defaults.max_handshakes_per_peer);
  Start(defaults);
  // A connects (the transport's hello) and sends nothing more, many times.
  std::vector<std::unique_ptr<Connection>> silent;
  for (int i = 0; i < 1000; ++i) {
    auto c = transport_->Connect(address_, server_->port(), Deadline::After(20s));
    if (c.ok()) silent.push_back(std::move(c).value());
  }
  EXPECT_TRUE(lines_.WaitFor("peer 127.0.0.1 has " + cap +
                             " connections in their MRSP handshake (limit per peer " + cap + ")"))
      << lines_.All();
  ExpectPeerBServed(4096, 10);
  EXPECT_LE(server_->connections_open(), defaults.max_handshakes_per_peer + 1);
}

TEST_P(OnePeerCannotStarveAnother, SessionsHoldingTheWholeMemoryBudget) {
  ServerOptions options;
  options.max_total_bytes = 64 << 20;
  Start(options);
  // A's four sessions ask for (almost) the whole budget (in + out: 2 x 8
  // MiB each, less the spec dialect's metadata region), then write nothing.
  std::vector<std::unique_ptr<ClientSession>> hog;
  for (int i = 0; i < 4; ++i) {
    auto a = Open((8 << 20) - 64);
    ASSERT_TRUE(a.ok()) << i << ": " << a.status().ToString();
    hog.push_back(std::move(a).value());
  }
  auto one_more = Open(1 << 20);  // A cannot reclaim its own
  EXPECT_FALSE(one_more.ok());
  EXPECT_TRUE(lines_.WaitFor("bytes requested; the server's memory budget 67108864 has"))
      << lines_.All();
  ExpectPeerBServed(1 << 20, 11);
  EXPECT_TRUE(lines_.WaitFor("reclaimed: an idle session of the peer holding the most"))
      << lines_.All();
}

// A call whose request stops in the middle of its data (the host announced
// a large write, sent part of it, and went silent): the NAA breaks the
// connection after EmulatedOptions::stall_timeout and frees its memory, so
// a peer that needs the whole budget is served.
TEST_P(OnePeerCannotStarveAnother, ACallThatStopsInTheMiddleOfItsData) {
  ServerOptions options;
  options.max_total_bytes = 64 << 20;
  EmulatedOptions naa;
  // Short enough to wait for once (A's stall); long enough that B's 32 MiB
  // each way, watched by the same timeout, never trips it on a loaded
  // machine (its bytes only pause while its threads wait for a CPU).
  naa.stall_timeout = 5s;
  transport_ = NewEmulatedTransport(naa);  // the NAA's
  Start(options);
  FaultRule stall;
  stall.opcode = WorkOpcode::kRdmaWriteWithImm;
  stall.action = FaultAction::StallMidMessage(1 << 20);
  EmulatedOptions a;
  a.faults = std::make_shared<ScriptedFaultInjector>(std::vector<FaultRule>{stall});
  auto peer_a = NewEmulatedTransport(a);
  // Its request: 32 MiB in, 32 MiB out (less the metadata region): the budget.
  auto session = ClientSession::Open(*peer_a, address_, server_->port(),
                                     EchoLayout((32 << 20) - 64));
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  // A's own deadline is far away: only the NAA can end this call soon.
  std::future<Status> call = std::async(std::launch::async, [&] {
    return (*session)->Call(kEcho, Deadline::After(600s));
  });
  EXPECT_TRUE(server_->WaitForOpenConnectionsAtMost(0, Deadline::After(60s)))
      << "the stalled call still holds its connection";
  ExpectPeerBServed((32 << 20) - 64, 13);
  const Status st = call.get();
  EXPECT_EQ(st.code(), StatusCode::kDisconnected) << st.ToString();  // the NAA gave up on it
  EXPECT_TRUE(lines_.WaitFor("]: disconnected: the peer stopped sending in the middle of a "
                             "message: 1048576 of its"))
      << lines_.All();
}

INSTANTIATE_TEST_SUITE_P(Transports, OnePeerCannotStarveAnother,
                         ::testing::Values("emulated", "verbs"),
                         [](const auto& info) { return info.param; });

INSTANTIATE_TEST_SUITE_P(Transports, ServerLimitsTest, ::testing::Values("emulated", "verbs"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace naarpc
