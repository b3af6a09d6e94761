// Transport semantics both transports share, tested once over each (as
// LevelDB's env_test runs one suite over every Env): connection set-up,
// RNR, disconnects and notify_fd event loops. The verbs cases skip without
// an RDMA device and run in the Soft-RoCE guest; what only one transport
// does stays in its own tests (emulated_*_test, verbs_*_test).
//
// Deadlines here are hang guards: they only turn a hang into a failure and
// are generous so that no loaded machine (or TCG guest) reaches them. Tests
// assert behaviour, never how long something took.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "naarpc/transport.h"
#include "runtime/transport_impl/emulated/emulated_transport.h"
#include "runtime/transport_impl/verbs/verbs_transport.h"
#include "tests/testing/connection_helpers.h"
#include "tests/testing/hang_guard.h"
#include "tests/testing/notify_loop.h"
#include "tests/testing/test_transport.h"

namespace naarpc {
namespace {

using namespace std::chrono_literals;
using naarpc::testing::Buf;
using naarpc::testing::HangGuard;
using naarpc::testing::NotifyLoop;
using naarpc::testing::PollN;
using naarpc::testing::PollUntilDown;
using naarpc::testing::Reg;
using naarpc::testing::Req;

constexpr auto kHangGuard = 60s;

class ConnectionTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    testing::TestTransport t = testing::MakeTestTransport(GetParam());
    if (!t.unavailable.empty()) GTEST_SKIP() << t.unavailable;
    transport_ = std::move(t.transport);
    address_ = t.address;
    auto l = transport_->Listen(address_, 0);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    listener_ = std::move(*l);
    ConnectPair(&client_, &server_);
  }

  void ConnectPair(std::unique_ptr<Connection>* client, std::unique_ptr<Connection>* server) {
    auto accepted = std::async(std::launch::async,
                               [&] { return listener_->Accept(Deadline::After(kHangGuard)); });
    auto c = transport_->Connect(address_, listener_->port(), Deadline::After(kHangGuard));
    auto s = accepted.get();
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    *client = std::move(*c);
    *server = std::move(*s);
  }

  // A transport of this test's kind that retries refused connects until the
  // Connect deadline.
  std::unique_ptr<Transport> RetryingTransport(std::chrono::milliseconds delay) {
    if (GetParam() == "verbs") {
      VerbsOptions o;
      o.connect_retries = std::numeric_limits<int>::max();
      o.connect_retry_delay = delay;
      auto t = NewVerbsTransport(o);
      EXPECT_TRUE(t.ok()) << t.status().ToString();
      return t.ok() ? std::move(*t) : nullptr;
    }
    EmulatedOptions o;
    o.connect_retries = std::numeric_limits<int>::max();
    o.connect_retry_delay = delay;
    return NewEmulatedTransport(o);
  }

  std::string address_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Listener> listener_;
  std::unique_ptr<Connection> client_, server_;
};

// ---- connection set-up ------------------------------------------------------

TEST_P(ConnectionTest, ConnectRetriesUntilServerListens) {
  const uint16_t port = listener_->port();
  listener_.reset();
  // Retries are bounded by the Connect deadline only (a hang guard): however
  // late the server starts on a loaded machine, it is in time.
  std::unique_ptr<Transport> t = RetryingTransport(20ms);
  ASSERT_TRUE(t);
  auto connected = std::async(std::launch::async, [&] {
    return t->Connect(address_, port, Deadline::After(kHangGuard));
  });
  // The server starts late on purpose, so that Connect is refused and
  // retries. Not synchronisation: if the first attempt comes after Listen,
  // it simply succeeds at once; the test holds either way.
  std::this_thread::sleep_for(100ms);
  auto l = transport_->Listen(address_, port);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  auto s = (*l)->Accept(Deadline::After(kHangGuard));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  auto c = connected.get();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE((*c)->peer_name().empty());
}

TEST_P(ConnectionTest, AcceptDeadline) {
  // Nobody connects: the deadline ends Accept, never before it. An Accept
  // that ignored its deadline would be shut down by the hang guard and
  // report kUnavailable instead.
  HangGuard guard([this] { listener_->Shutdown(); });
  const auto start = std::chrono::steady_clock::now();
  auto r = listener_->Accept(Deadline::After(100ms));
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  EXPECT_GE(std::chrono::steady_clock::now() - start, 100ms);
}

// ---- RNR --------------------------------------------------------------------

// A SEND with no receive posted at the target fails with RNR retry exceeded
// (after the transport's retries); work posted before it completes, work
// after it is flushed. The target is polled meanwhile (the emulated target
// makes progress only when called) and sees nothing.
TEST_P(ConnectionTest, RnrRetryExceededWithoutReceive) {
  Buf src = Reg(*client_, 64, kAccessLocalWrite);
  Buf target = Reg(*server_, 64);
  std::vector<SendRequest> reqs = {
      Req(1, WorkOpcode::kRdmaWrite, src.local(0, 8), target.addr(), target.mr->rkey()),
      Req(2, WorkOpcode::kSend, src.local(0, 8)), Req(3, WorkOpcode::kSend, src.local(0, 8))};
  ASSERT_TRUE(client_->PostSend(reqs).ok());
  std::atomic<bool> done{false};
  std::vector<Completion> target_got;
  std::thread polling([&] {
    while (!done) {
      Completion c[4];
      auto r = server_->PollCompletions(c, Deadline::After(1ms));
      if (!r.ok()) return;  // the emulated requester breaks the connection
      target_got.insert(target_got.end(), c, c + *r);
    }
  });
  auto cc = PollN(*client_, 3);
  done = true;
  polling.join();
  ASSERT_EQ(cc.size(), 3u);
  EXPECT_EQ(cc[0].wr_id, 1u);
  EXPECT_EQ(cc[0].status, CompletionStatus::kSuccess) << CompletionStatusName(cc[0].status);
  EXPECT_EQ(cc[1].wr_id, 2u);
  EXPECT_EQ(cc[1].status, CompletionStatus::kRnrRetryExceeded)
      << CompletionStatusName(cc[1].status);
  EXPECT_EQ(cc[2].wr_id, 3u);
  EXPECT_EQ(cc[2].status, CompletionStatus::kFlushed) << CompletionStatusName(cc[2].status);
  EXPECT_TRUE(target_got.empty());
}

// ---- disconnects -------------------------------------------------------------

TEST_P(ConnectionTest, DisconnectFromAnotherThreadUnblocksPoll) {
  Buf rx = Reg(*server_, 64, kAccessLocalWrite);
  ASSERT_TRUE(server_->PostRecv(40, rx.local(0, 64)).ok());
  // Nothing arrives: only Disconnect ends this poll with kDisconnected (its
  // deadline is a hang guard; PollUntilDown fails if that ends it).
  std::vector<Completion> got;
  std::thread th([&] { got = PollUntilDown(*server_); });
  // Not synchronisation: lets the thread block in PollCompletions, so that
  // Disconnect has to wake it. If Disconnect comes first, the poll finds the
  // connection down at once: the test holds either way.
  std::this_thread::sleep_for(50ms);
  EXPECT_TRUE(server_->Disconnect().ok());
  th.join();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 40u);
  EXPECT_EQ(got[0].status, CompletionStatus::kFlushed);
  // The peer sees the disconnect too.
  PollUntilDown(*client_);
}

// ---- event loops (notify_fd) --------------------------------------------------

// A WRITE_WITH_IMM from the peer (its own thread) reaches a loop asleep on
// notify_fd. Once the loop has taken it and WaitNotify(now) found nothing,
// the fd is quiet: the peer is done (its completion needed our
// acknowledgement), nothing is queued, no timer runs, so a readable fd
// would be a busy loop.
TEST_P(ConnectionTest, NotifyFdDrivesAnEventLoopAndIsQuietOnceDrained) {
  Buf src = Reg(*client_, 64, kAccessLocalWrite, 0x3c);
  Buf target = Reg(*server_, 64);
  ASSERT_TRUE(server_->PostRecv(7, target.local(0, 0)).ok());
  NotifyLoop loop(*server_);
  EXPECT_EQ(server_->notify_fd(), server_->notify_fd());  // one fd
  loop.Settle();
  EXPECT_FALSE(loop.Readable());
  std::vector<Completion> cc;
  std::thread peer([&] {
    SendRequest req = Req(1, WorkOpcode::kRdmaWriteWithImm, src.local(0, 32), target.addr(),
                          target.mr->rkey(), 0xabc);
    if (client_->PostSend({&req, 1}).ok()) cc = PollN(*client_, 1);
  });
  const bool ran = loop.Run([&] { return !loop.got.empty(); });
  peer.join();
  ASSERT_TRUE(ran);
  ASSERT_FALSE(loop.down) << loop.down->ToString();
  EXPECT_GE(loop.wakeups, 1);
  ASSERT_EQ(loop.got.size(), 1u);
  EXPECT_EQ(loop.got[0].wr_id, 7u);
  EXPECT_EQ(loop.got[0].opcode, WorkOpcode::kRecvRdmaWithImm);
  EXPECT_EQ(loop.got[0].imm_data, 0xabcu);
  EXPECT_EQ(loop.got[0].byte_len, 32u);
  EXPECT_EQ(target.data[31], 0x3c);
  ASSERT_EQ(cc.size(), 1u);
  EXPECT_EQ(cc[0].status, CompletionStatus::kSuccess);
  loop.Settle();
  EXPECT_FALSE(loop.Readable());
  EXPECT_TRUE(loop.got.size() == 1 && !loop.down);
}

// The peer disconnecting or going away wakes the loop: the posted receive
// completes flushed, then kDisconnected.
TEST_P(ConnectionTest, NotifyFdReportsAPeerDisconnectOrDestroyed) {
  for (bool destroy : {false, true}) {
    SCOPED_TRACE(destroy ? "peer destroyed" : "peer Disconnect");
    std::unique_ptr<Connection> client, server;
    ConnectPair(&client, &server);
    ASSERT_TRUE(client && server);
    Buf rx = Reg(*server, 64, kAccessLocalWrite);
    ASSERT_TRUE(server->PostRecv(30, rx.local(0, 64)).ok());
    NotifyLoop loop(*server);
    loop.Settle();
    EXPECT_FALSE(loop.Readable());
    if (destroy) {
      client.reset();
    } else {
      ASSERT_TRUE(client->Disconnect().ok());
    }
    ASSERT_TRUE(loop.Run([] { return false; }));
    EXPECT_GE(loop.wakeups, 1);
    ASSERT_TRUE(loop.down);
    EXPECT_EQ(loop.down->code(), StatusCode::kDisconnected) << loop.down->ToString();
    ASSERT_EQ(loop.got.size(), 1u);
    EXPECT_EQ(loop.got[0].wr_id, 30u);
    EXPECT_EQ(loop.got[0].status, CompletionStatus::kFlushed);
  }
}

// Disconnect from another thread wakes a loop asleep in epoll_wait.
TEST_P(ConnectionTest, NotifyFdWakesOnDisconnectFromAnotherThread) {
  Buf rx = Reg(*server_, 64, kAccessLocalWrite);
  ASSERT_TRUE(server_->PostRecv(40, rx.local(0, 64)).ok());
  NotifyLoop loop(*server_);
  loop.Settle();
  bool ran = false;
  std::thread th([&] { ran = loop.Run([] { return false; }); });
  // Disconnect should find the loop asleep; if it comes first, the loop
  // finds the connection down: the test holds either way.
  loop.AwaitFirstSleep();
  EXPECT_TRUE(server_->Disconnect().ok());
  th.join();
  ASSERT_TRUE(ran);
  ASSERT_TRUE(loop.down);
  EXPECT_EQ(loop.down->code(), StatusCode::kDisconnected) << loop.down->ToString();
  ASSERT_EQ(loop.got.size(), 1u);
  EXPECT_EQ(loop.got[0].wr_id, 40u);
  EXPECT_EQ(loop.got[0].status, CompletionStatus::kFlushed);
}

INSTANTIATE_TEST_SUITE_P(Transports, ConnectionTest, ::testing::Values("emulated", "verbs"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace naarpc
