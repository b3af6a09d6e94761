// The emulated queue pair: SEND/RECV in order, send- and receive-queue
// depth, lengths, RNR (connection.cc, queue_pair.cc).
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

// ---- SEND / RECV ----------------------------------------------------------------

TEST(EmulatedTransport, SendRecvInOrder) {
  auto t = NewEmulatedTransport();
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  Buf rx = Reg(*p.server, 4 * 64);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(p.server->PostRecv(100 + i, rx.local(i * 64, 64)).ok());
  Buf tx = Reg(*p.client, 4 * 64);
  for (int i = 0; i < 4; ++i) std::memset(&tx.data[i * 64], 'a' + i, 64);
  ASSERT_TRUE(Post(*p.client, {Send(1, tx.local(0, 10)), Send(2, tx.local(64, 20)),
                               Send(3, tx.local(128, 0))})
                  .ok());
  ASSERT_TRUE(Post(*p.client, {Send(4, tx.local(192, 64))}).ok());

  Side c{p.client.get()}, s{p.server.get()};
  ASSERT_TRUE(RunUntil({&c, &s}, [&] { return c.got.size() == 4 && s.got.size() == 4; }));
  const uint32_t lens[4] = {10, 20, 0, 64};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(s.got[i].wr_id, 100u + i);
    EXPECT_EQ(s.got[i].opcode, WorkOpcode::kRecv);
    EXPECT_EQ(s.got[i].status, CompletionStatus::kSuccess);
    EXPECT_EQ(s.got[i].byte_len, lens[i]);
    EXPECT_FALSE(s.got[i].has_imm);
    EXPECT_EQ(c.got[i].wr_id, 1u + i);
    EXPECT_EQ(c.got[i].opcode, WorkOpcode::kSend);
    EXPECT_EQ(c.got[i].status, CompletionStatus::kSuccess);
  }
  EXPECT_EQ(rx.data[0], 'a');
  EXPECT_EQ(rx.data[9], 'a');
  EXPECT_EQ(rx.data[10], 0);  // only 10 bytes landed
  EXPECT_EQ(rx.data[64 + 19], 'b');
  EXPECT_EQ(rx.data[64 + 20], 0);
  EXPECT_EQ(rx.data[128], 0);
  EXPECT_EQ(rx.data[192 + 63], 'd');
  EXPECT_FALSE(c.down || s.down);
}

TEST(EmulatedTransport, ManyPipelinedMessagesWithRecycledReceives) {
  // The client runs ahead of the 32 receives: many RNR NAKs and go-back-N
  // resends, which must keep order. Unlimited retries: a descheduled server
  // thread must not fail the test.
  EmulatedOptions o;
  o.rnr_retry_count = -1;
  o.rnr_delay = 100us;
  o.send_queue_depth = 0;  // streams 20000 sends without polling in between
  auto t = NewEmulatedTransport(o);
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  constexpr int kMsgs = 20000, kRecvs = 32, kSize = 16;
  Buf rx = Reg(*p.server, kRecvs * kSize);
  for (int i = 0; i < kRecvs; ++i) ASSERT_TRUE(p.server->PostRecv(i, rx.local(i * kSize, kSize)).ok());
  std::atomic<bool> client_done{false};
  std::thread server([&] {
    for (int n = 0; n < kMsgs;) {
      Completion cs[16];
      auto r = p.server->PollCompletions(cs, Deadline::After(kTimeout));
      ASSERT_TRUE(r.ok() && *r > 0);
      for (size_t i = 0; i < *r; ++i, ++n) {
        ASSERT_EQ(cs[i].status, CompletionStatus::kSuccess);
        const int slot = static_cast<int>(cs[i].wr_id);
        ASSERT_EQ(slot, n % kRecvs);
        uint32_t v;
        std::memcpy(&v, &rx.data[slot * kSize], 4);
        ASSERT_EQ(v, static_cast<uint32_t>(n));
        ASSERT_TRUE(p.server->PostRecv(slot, rx.local(slot * kSize, kSize)).ok());
      }
    }
    // Keep acknowledging until the client saw its last completion.
    Completion c[1];
    while (!client_done) {
      auto r = p.server->PollCompletions(c, Deadline::After(1ms));
      ASSERT_TRUE(r.ok());
      ASSERT_EQ(*r, 0u);
    }
  });
  Buf tx = Reg(*p.client, kMsgs * 4);
  int signaled = 0;
  for (int i = 0; i < kMsgs; ++i) {
    uint32_t v = static_cast<uint32_t>(i);
    std::memcpy(&tx.data[i * 4], &v, 4);
    bool sig = (i % 64 == 63) || i == kMsgs - 1;
    signaled += sig;
    ASSERT_TRUE(Post(*p.client, {Send(i, tx.local(i * 4, 4), sig)}).ok());
  }
  auto got = PollN(*p.client, signaled, 30s);
  client_done = true;
  server.join();
  ASSERT_EQ(got.size(), static_cast<size_t>(signaled));
  for (int i = 0; i < signaled; ++i) {
    EXPECT_EQ(got[i].status, CompletionStatus::kSuccess);
    EXPECT_EQ(got[i].wr_id, static_cast<uint64_t>(i == signaled - 1 ? kMsgs - 1 : i * 64 + 63));
  }
}

// Like an RC send queue: unsignaled requests hold their slots until the
// completion of a later signaled one has been polled.
TEST(EmulatedTransport, SendQueueSlotsAreFreedOnlyByPolledCompletions) {
  EmulatedOptions o;
  o.send_queue_depth = 4;
  auto t = NewEmulatedTransport(o);
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  EXPECT_EQ(p.client->send_queue_depth(), 4u);
  Buf dst = Reg(*p.server, 64);
  Buf src = Reg(*p.client, 64, kAccessLocalWrite, 0x5c);
  // The target acknowledges only while it polls.
  std::atomic<bool> done{false};
  std::thread server([&] {
    Completion c[1];
    while (!done) ASSERT_TRUE(p.server->PollCompletions(c, Deadline::After(1ms)).ok());
  });
  auto write = [&](uint64_t id, bool signaled) {
    return Write(id, src.local(0, 8), dst.addr(), dst.mr->rkey(), signaled);
  };
  ASSERT_TRUE(Post(*p.client, {write(1, false), write(2, false), write(3, false)}).ok());
  ASSERT_TRUE(Post(*p.client, {write(4, true)}).ok());
  // Full: even after the writes landed, nothing was polled yet.
  Status full = Post(*p.client, {write(5, true)});
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted) << full.ToString();
  EXPECT_NE(full.message().find("send queue full (depth 4, 4 posted"), std::string::npos)
      << full.message();
  auto got = PollN(*p.client, 1);
  EXPECT_EQ(got.size(), 1u);
  if (!got.empty()) {
    EXPECT_EQ(got[0].wr_id, 4u);
  }
  // The polled completion of 4 freed 1..4.
  EXPECT_TRUE(Post(*p.client, {write(5, false), write(6, false), write(7, false), write(8, true)})
                  .ok());
  got = PollN(*p.client, 1);
  done = true;
  server.join();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 8u);
}

TEST(EmulatedTransport, ReceiveTooSmallIsALengthError) {
  auto t = NewEmulatedTransport();
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  Buf rx = Reg(*p.server, 16);
  ASSERT_TRUE(p.server->PostRecv(7, rx.local(0, 8)).ok());
  ASSERT_TRUE(p.server->PostRecv(8, rx.local(8, 8)).ok());
  Buf tx = Reg(*p.client, 16, kAccessLocalWrite, 0xab);
  ASSERT_TRUE(Post(*p.client, {Send(1, tx.local(0, 16))}).ok());
  auto sc = PollUntilDown(*p.server);
  ASSERT_EQ(sc.size(), 2u);
  EXPECT_EQ(sc[0].wr_id, 7u);
  EXPECT_EQ(sc[0].status, CompletionStatus::kLocalLengthError);
  EXPECT_EQ(sc[1].wr_id, 8u);
  EXPECT_EQ(sc[1].status, CompletionStatus::kFlushed);
  EXPECT_EQ(rx.data[0], 0);
  auto cc = PollUntilDown(*p.client);
  ASSERT_EQ(cc.size(), 1u);
  EXPECT_EQ(cc[0].wr_id, 1u);
  EXPECT_EQ(cc[0].status, CompletionStatus::kRemoteInvalidRequest);
  EXPECT_EQ(cc[0].vendor_err, kEmuErrRecvTooSmall);
}

// ---- RNR ------------------------------------------------------------------------

// The RNR outcome both transports share is //tests/transport:connection_test's;
// here the emulated requester's timing (every retry waits its rnr_delay) and
// the connection it then breaks.
TEST(EmulatedTransport, RnrRetriesWaitTheirDelayThenBreakTheConnection) {
  auto t = NewEmulatedTransport(FastRnr());  // 3 retries x 20 ms
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  Buf src = Reg(*p.client, 64);
  Buf target = Reg(*p.server, 64);
  const auto start = Clock::now();
  ASSERT_TRUE(Post(*p.client, {Write(1, src.local(0, 8), target.addr(), target.mr->rkey()),
                               Send(2, src.local(0, 8)), Send(3, src.local(0, 8))})
                  .ok());
  Side s{p.server.get()};
  std::thread server([&] { RunUntil({&s}, [&] { return s.down.has_value(); }); });
  auto cc = PollUntilDown(*p.client);
  const auto elapsed = Clock::now() - start;
  server.join();
  ASSERT_EQ(cc.size(), 3u);
  EXPECT_EQ(cc[0].status, CompletionStatus::kSuccess);
  EXPECT_EQ(cc[1].wr_id, 2u);
  EXPECT_EQ(cc[1].status, CompletionStatus::kRnrRetryExceeded);
  EXPECT_EQ(cc[2].status, CompletionStatus::kFlushed);
  // Each of the 3 retries waited its rnr_delay: never sooner.
  EXPECT_GE(elapsed, 60ms);
  EXPECT_EQ(target.data[0], 0);  // WRITE of zeros; still zero, but it landed
  EXPECT_TRUE(s.got.empty());
}

TEST(EmulatedTransport, RnrSucceedsWhenReceiveIsPostedInTime) {
  EmulatedOptions o;
  o.rnr_retry_count = 100;
  o.rnr_delay = 10ms;  // 1 s budget
  auto t = NewEmulatedTransport(o);
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  Buf src = Reg(*p.client, 64, kAccessLocalWrite, 0x5d);
  Buf rx = Reg(*p.server, 64);
  ASSERT_TRUE(Post(*p.client, {Send(1, src.local(0, 8))}).ok());
  std::thread server([&] {
    // Nothing can arrive without a receive: the poll times out (the late
    // receive is the point of this test).
    Completion c[4];
    auto r = p.server->PollCompletions(c, Deadline::After(50ms));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, 0u);
    ASSERT_TRUE(p.server->PostRecv(10, rx.local(0, 64)).ok());
    auto got = PollN(*p.server, 1);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].status, CompletionStatus::kSuccess);
    EXPECT_EQ(got[0].byte_len, 8u);
    p.server->PollCompletions(c, Deadline::After(20ms)).status().IgnoreError();  // ack
  });
  auto cc = PollN(*p.client, 1);
  server.join();
  ASSERT_EQ(cc.size(), 1u);
  EXPECT_EQ(cc[0].status, CompletionStatus::kSuccess);
  EXPECT_EQ(rx.data[7], 0x5d);
}

TEST(EmulatedTransport, WorkAfterAnRnrNakDoesNotOvertakeIt) {
  auto t = NewEmulatedTransport();  // default: 6 retries x 1 ms
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  Buf src = Reg(*p.client, 64, kAccessLocalWrite, 0x66);
  Buf target = Reg(*p.server, 64);
  Buf rx = Reg(*p.server, 64);
  ASSERT_TRUE(Post(*p.client, {Send(1, src.local(0, 4)),
                               Write(2, src.local(0, 8), target.addr(), target.mr->rkey())})
                  .ok());
  // The server processes both frames with no receive posted: the SEND is
  // NAKed and the WRITE behind it dropped (it must not land first).
  Side s{p.server.get()};
  s.Step(20ms);
  EXPECT_TRUE(s.got.empty());
  EXPECT_EQ(target.data[0], 0);
  ASSERT_TRUE(p.server->PostRecv(10, rx.local(0, 64)).ok());
  Side c{p.client.get()};
  ASSERT_TRUE(RunUntil({&c, &s}, [&] { return c.got.size() == 2 && s.got.size() == 1; }));
  EXPECT_EQ(s.got[0].wr_id, 10u);
  EXPECT_EQ(s.got[0].byte_len, 4u);
  EXPECT_EQ(c.got[0].wr_id, 1u);
  EXPECT_EQ(c.got[0].status, CompletionStatus::kSuccess);
  EXPECT_EQ(c.got[1].wr_id, 2u);
  EXPECT_EQ(c.got[1].status, CompletionStatus::kSuccess);
  EXPECT_EQ(target.data[7], 0x66);
  EXPECT_EQ(rx.data[3], 0x66);
}

TEST(EmulatedTransport, WriteWithImmAlsoNeedsAReceive) {
  auto t = NewEmulatedTransport(FastRnr());
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  Buf src = Reg(*p.client, 64, kAccessLocalWrite, 1);
  Buf target = Reg(*p.server, 64);
  ASSERT_TRUE(Post(*p.client, {WriteImm(1, src.local(0, 8), target.addr(), target.mr->rkey(), 3)}).ok());
  Side s{p.server.get()};
  std::thread server([&] { RunUntil({&s}, [&] { return s.down.has_value(); }); });
  auto cc = PollUntilDown(*p.client);
  server.join();
  ASSERT_EQ(cc.size(), 1u);
  EXPECT_EQ(cc[0].status, CompletionStatus::kRnrRetryExceeded);
  EXPECT_EQ(target.data[0], 0);  // nothing landed
}

}  // namespace
}  // namespace naarpc
