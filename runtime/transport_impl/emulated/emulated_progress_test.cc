// Progress of emulated connections: deadlines, disconnects, notify_fd for
// event loops, big transfers and many threads (connection.cc, frame_io.cc).
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

// ---- deadlines / disconnects ---------------------------------------------------------

TEST(EmulatedTransport, DeadlineExpiryReturnsZeroCompletions) {
  auto t = NewEmulatedTransport();
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  Completion c[4];
  {
    // Nothing can arrive on this idle connection: only the deadline ends
    // each wait, with 0 completions, and never before it. Short deadlines
    // wait in ppoll, long ones in recv with a coarse timeout (SO_RCVTIMEO);
    // a wait that ignored its deadline would be ended by the hang guard's
    // Disconnect, and fail. How close to its deadline a wait returns is a
    // performance figure (bench/), not asserted here.
    HangGuard guard([&] { p.client->Disconnect().IgnoreError(); });
    for (auto wait : {2ms, 50ms, 300ms}) {
      const auto start = Clock::now();
      auto r = p.client->PollCompletions(c, Deadline::After(wait));
      const auto elapsed = Clock::now() - start;
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ(*r, 0u);
      EXPECT_GE(elapsed, wait);
    }
  }
  // An already expired deadline still makes progress (non-blocking poll):
  // such polls alone receive the message (without progress they would run
  // into the hang guard).
  Buf rx = Reg(*p.server, 8);
  ASSERT_TRUE(p.server->PostRecv(1, rx.local(0, 8)).ok());
  Buf tx = Reg(*p.client, 8, kAccessLocalWrite, 4);
  ASSERT_TRUE(Post(*p.client, {Send(2, tx.local(0, 8))}).ok());
  std::vector<Completion> got;
  for (const Deadline guard = Deadline::After(kTimeout); got.empty() && !guard.expired();) {
    auto r = p.server->PollCompletions(c, Deadline::After(0ms));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    got.insert(got.end(), c, c + *r);
    if (got.empty()) std::this_thread::yield();
  }
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 1u);
  EXPECT_EQ(p.client->PollCompletions({}, Deadline::After(0ms)).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(EmulatedTransport, DisconnectFlushesAndIsIdempotent) {
  auto t = NewEmulatedTransport();
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  Buf rx = Reg(*p.client, 64);
  ASSERT_TRUE(p.client->PostRecv(1, rx.local(0, 64)).ok());
  ASSERT_TRUE(p.client->PostRecv(2, rx.local(0, 64)).ok());
  Buf srx = Reg(*p.server, 64);
  ASSERT_TRUE(p.server->PostRecv(3, srx.local(0, 64)).ok());
  EXPECT_TRUE(p.client->Disconnect().ok());
  EXPECT_TRUE(p.client->Disconnect().ok());
  auto cc = PollUntilDown(*p.client);
  ASSERT_EQ(cc.size(), 2u);
  EXPECT_EQ(cc[0].wr_id, 1u);
  EXPECT_EQ(cc[0].status, CompletionStatus::kFlushed);
  EXPECT_EQ(cc[1].wr_id, 2u);
  // Keeps returning kDisconnected.
  Completion c[1];
  EXPECT_EQ(p.client->PollCompletions(c, Deadline::Infinite()).status().code(),
            StatusCode::kDisconnected);
  EXPECT_EQ(p.client->PostRecv(4, rx.local(0, 64)).code(), StatusCode::kDisconnected);
  // The peer sees the disconnect (its deadline is a hang guard).
  auto sc = PollUntilDown(*p.server);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, CompletionStatus::kFlushed);
  EXPECT_TRUE(p.client->Disconnect().ok());
}

TEST(EmulatedTransport, PeerDisconnectMidTransferFlushesPromptly) {
  auto t = NewEmulatedTransport();
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  constexpr size_t kBig = 64 << 20;
  Buf target = Reg(*p.server, kBig);
  Buf src = Reg(*p.client, kBig);
  Buf rx = Reg(*p.client, 64);
  ASSERT_TRUE(p.client->PostRecv(9, rx.local(0, 64)).ok());
  // The server never polls, so the transfer stalls once the socket buffers
  // are full; then the server goes away.
  ASSERT_TRUE(Post(*p.client, {Write(1, src.all(), target.addr(), target.mr->rkey()),
                               Write(2, src.local(0, 1), target.addr(), target.mr->rkey())})
                  .ok());
  std::vector<Completion> got;
  std::promise<void> polling;
  std::thread th([&] {
    Completion c[1];
    auto r = p.client->PollCompletions(c, Deadline::After(30ms));
    EXPECT_TRUE(r.ok() && *r == 0);  // still stuck mid-transfer
    polling.set_value();
    // The peer going away ends the stalled transfer: flushed work, then
    // kDisconnected (the deadline is a hang guard; PollUntilDown fails if
    // the transfer stays stuck until then).
    got = PollUntilDown(*p.client);
  });
  polling.get_future().wait();
  p.server.reset();
  th.join();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].wr_id, 1u);
  EXPECT_EQ(got[0].status, CompletionStatus::kFlushed);
  EXPECT_EQ(got[1].wr_id, 2u);
  EXPECT_EQ(got[1].status, CompletionStatus::kFlushed);
  EXPECT_EQ(got[2].wr_id, 9u);
  EXPECT_EQ(got[2].opcode, WorkOpcode::kRecv);
  EXPECT_EQ(got[2].status, CompletionStatus::kFlushed);
}

// ---- event loops (notify_fd) ------------------------------------------------------

// An event raised inside a call that did not consume it (here a
// TryPollCompletions that also took the completion) stays pending until
// WaitNotify takes it.
TEST(EmulatedTransport, AnEventLeftPendingIsTakenByWaitNotifyBeforeSleeping) {
  auto t = NewEmulatedTransport();
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  Buf src = Reg(*p.client, 64, kAccessLocalWrite, 1);
  Buf target = Reg(*p.server, 64);
  ASSERT_TRUE(p.server->PostRecv(3, target.local(0, 0)).ok());
  NotifyLoop loop(*p.server);
  loop.Settle();  // armed
  ASSERT_TRUE(Post(*p.client, {WriteImm(1, src.local(0, 8), target.addr(), target.mr->rkey(), 2)}).ok());
  Completion c[4];
  size_t n = 0;
  for (const Deadline guard = Deadline::After(kTimeout); n == 0;) {
    ASSERT_TRUE(loop.Sleep(guard));
    auto r = p.server->TryPollCompletions(c);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    n = *r;
  }
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(c[0].wr_id, 3u);
  // The event the completion raised is still pending: the last call before
  // sleeping (transport.h) reports it, and the fd is then quiet.
  auto ev = p.server->WaitNotify(Deadline::Now());
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  EXPECT_TRUE(*ev);
  EXPECT_FALSE(loop.Readable());  // the client only waits for our ack, sent
}

// A write larger than the socket buffers leaves as the peer reads it: the
// writer's loop is woken by room in the socket (EPOLLOUT while bytes are
// queued). Both sides run loops, so acknowledgements leave too.
TEST(EmulatedTransport, NotifyFdWaitsForRoomToPushALargeWrite) {
  auto t = NewEmulatedTransport();
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  constexpr size_t kBig = 16 << 20;
  Buf src = Reg(*p.client, kBig, kAccessLocalWrite);
  FillPattern(src.data, 11);
  Buf target = Reg(*p.server, kBig);
  ASSERT_TRUE(p.server->PostRecv(3, target.local(0, 0)).ok());
  NotifyLoop writer(*p.client), reader(*p.server);
  ASSERT_TRUE(Post(*p.client, {WriteImm(1, src.all(), target.addr(), target.mr->rkey(), 4)}).ok());
  writer.Settle();
  reader.Settle();
  bool reader_ran = false;
  std::thread th([&] { reader_ran = reader.Run([&] { return !reader.got.empty(); }); });
  const bool writer_ran = writer.Run([&] { return !writer.got.empty(); });
  th.join();
  ASSERT_TRUE(writer_ran && reader_ran);
  ASSERT_EQ(writer.got.size(), 1u);
  EXPECT_EQ(writer.got[0].status, CompletionStatus::kSuccess);
  ASSERT_EQ(reader.got.size(), 1u);
  EXPECT_EQ(reader.got[0].wr_id, 3u);
  EXPECT_EQ(reader.got[0].byte_len, kBig);
  EXPECT_TRUE(target.data == src.data);
}

// The requester's loop resends after an RNR NAK when notify_fd's timer
// fires: the target had no receive posted when the request arrived, and
// posts one only then. (The 40-byte frame leaves in one send, so the
// target's first readiness brings all of it and it is NAKed; its payload
// was dropped.)
TEST(EmulatedTransport, NotifyFdTimerDrivesAnRnrResend) {
  EmulatedOptions o;
  o.rnr_retry_count = -1;  // retries until the receive comes
  o.rnr_delay = 5ms;
  auto t = NewEmulatedTransport(o);
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  Buf src = Reg(*p.client, 64, kAccessLocalWrite, 0x71);
  Buf target = Reg(*p.server, 64);
  NotifyLoop requester(*p.client), responder(*p.server);
  ASSERT_TRUE(Post(*p.client, {WriteImm(1, src.local(0, 8), target.addr(), target.mr->rkey(), 5)}).ok());
  requester.Settle();  // the NAK cannot have come: the responder made no progress yet
  // The request arrives; the responder, with no receive posted, NAKs it.
  ASSERT_TRUE(responder.Sleep(Deadline::After(kTimeout)));
  responder.Settle();
  ASSERT_FALSE(responder.down);
  EXPECT_TRUE(responder.got.empty());
  EXPECT_EQ(target.data[0], 0);  // NAKed: nothing landed
  // Only the requester's loop can resend, once its RNR timer fires.
  ASSERT_TRUE(p.server->PostRecv(10, target.local(0, 0)).ok());
  bool responder_ran = false;
  std::thread th([&] { responder_ran = responder.Run([&] { return !responder.got.empty(); }); });
  const bool requester_ran = requester.Run([&] { return !requester.got.empty(); });
  th.join();
  ASSERT_TRUE(requester_ran && responder_ran);
  ASSERT_EQ(requester.got.size(), 1u);
  EXPECT_EQ(requester.got[0].wr_id, 1u);
  EXPECT_EQ(requester.got[0].status, CompletionStatus::kSuccess);
  ASSERT_EQ(responder.got.size(), 1u);
  EXPECT_EQ(responder.got[0].wr_id, 10u);
  EXPECT_EQ(responder.got[0].imm_data, 5u);
  EXPECT_EQ(target.data[7], 0x71);
}

// ---- big transfers ----------------------------------------------------------------

TEST(EmulatedTransport, BigTransfersKeepIntegrity) {
  auto t = NewEmulatedTransport();
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  constexpr size_t kBig = 64 << 20, kSendSize = 8 << 20;
  Buf target = Reg(*p.server, kBig);
  Buf rx = Reg(*p.server, kSendSize);
  ASSERT_TRUE(p.server->PostRecv(1, LocalBuffer{}).ok());
  ASSERT_TRUE(p.server->PostRecv(2, rx.all()).ok());
  Buf src = Reg(*p.client, kBig);
  FillPattern(src.data, 7);
  std::thread server([&] {
    auto got = PollN(*p.server, 2, 60s);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].opcode, WorkOpcode::kRecvRdmaWithImm);
    EXPECT_EQ(got[0].byte_len, kBig);
    EXPECT_EQ(got[1].opcode, WorkOpcode::kRecv);
    EXPECT_EQ(got[1].byte_len, kSendSize);
    Completion c[1];
    p.server->PollCompletions(c, Deadline::After(0ms)).status().IgnoreError();  // ack
  });
  ASSERT_TRUE(Post(*p.client, {WriteImm(1, src.all(), target.addr(), target.mr->rkey(), 1),
                               Send(2, src.local(kBig - kSendSize, kSendSize))})
                  .ok());
  auto cc = PollN(*p.client, 2, 60s);
  server.join();
  ASSERT_EQ(cc.size(), 2u);
  EXPECT_EQ(cc[1].status, CompletionStatus::kSuccess);
  EXPECT_TRUE(target.data == src.data);
  EXPECT_EQ(0, std::memcmp(rx.data.data(), &src.data[kBig - kSendSize], kSendSize));
}

// Thousands of writes of 1 B to 4 KiB (the ones sent with one send() from a
// copy, some as gather lists) posted while the peer reads nothing: the
// socket fills, sends go out in part and resume mid-frame, and every byte
// still lands where it was written.
TEST(EmulatedTransport, SmallWritesThroughAFullSocketArriveWhole) {
  EmulatedOptions options;
  options.send_queue_depth = 0;  // unbounded: unsignaled writes pile up
  auto t = NewEmulatedTransport(options);
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  constexpr int kWrites = 12000;  // ~24 MiB: more than the sockets hold
  std::vector<uint32_t> offsets, lengths;
  size_t total = 0;
  for (int i = 0; i < kWrites; ++i) {
    const uint32_t len = 1 + static_cast<uint32_t>((uint64_t{static_cast<uint32_t>(i)} * 2654435761u) % 4096);
    offsets.push_back(static_cast<uint32_t>(total));
    lengths.push_back(len);
    total += len;
  }
  Buf src = Reg(*p.client, total);
  FillPattern(src.data, 11);
  Buf target = Reg(*p.server, total);
  ASSERT_TRUE(p.server->PostRecv(1, LocalBuffer{}).ok());
  std::vector<LocalBuffer> pieces;  // every third write: three gather entries
  pieces.reserve(3 * kWrites);
  for (int i = 0; i < kWrites; ++i) {
    SendRequest w = Write(10 + static_cast<uint64_t>(i), src.local(offsets[i], lengths[i]),
                          target.addr(offsets[i]), target.mr->rkey(), /*signaled=*/false);
    if (i % 3 == 0 && lengths[i] >= 3) {
      const uint32_t a = lengths[i] / 3, b = lengths[i] / 3;
      const size_t first = pieces.size();
      pieces.push_back(src.local(offsets[i], a));
      pieces.push_back(src.local(offsets[i] + a, b));
      pieces.push_back(src.local(offsets[i] + a + b, lengths[i] - a - b));
      w.sg_list = std::span<const LocalBuffer>(&pieces[first], 3);
    }
    ASSERT_TRUE(Post(*p.client, {w}).ok()) << "write " << i;
  }
  ASSERT_TRUE(Post(*p.client, {WriteImm(2, src.local(0, 1), target.addr(0), target.mr->rkey(), 7)})
                  .ok());
  std::thread server([&] {
    auto got = PollN(*p.server, 1, 60s);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].opcode, WorkOpcode::kRecvRdmaWithImm);
    EXPECT_EQ(got[0].imm_data, 7u);
    Completion c[1];
    p.server->PollCompletions(c, Deadline::After(0ms)).status().IgnoreError();  // ack
  });
  auto cc = PollN(*p.client, 1, 60s);
  server.join();
  ASSERT_EQ(cc.size(), 1u);
  EXPECT_EQ(cc[0].wr_id, 2u);
  EXPECT_EQ(cc[0].status, CompletionStatus::kSuccess);
  EXPECT_TRUE(target.data == src.data);
}

TEST(EmulatedTransport, TwoPeersWritingLargeDataAtOnceDoNotDeadlock) {
  auto t = NewEmulatedTransport();
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  constexpr size_t kBig = 64 << 20;
  Connection* conns[2] = {p.client.get(), p.server.get()};
  Buf src[2], dst[2];
  for (int i = 0; i < 2; ++i) {
    src[i] = Reg(*conns[i], kBig);
    FillPattern(src[i].data, 100 + i);
    dst[i] = Reg(*conns[i], kBig);
    ASSERT_TRUE(conns[i]->PostRecv(1, LocalBuffer{}).ok());
  }
  // Exchange addresses out of band (same process).
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      const Buf& remote = dst[1 - i];
      ASSERT_TRUE(Post(*conns[i], {Write(1, src[i].local(0, kBig / 2), remote.addr(),
                                         remote.mr->rkey(), false),
                                   WriteImm(2, src[i].local(kBig / 2, kBig / 2),
                                            remote.addr(kBig / 2), remote.mr->rkey(), i)})
                      .ok());
      auto got = PollN(*conns[i], 2, 60s);  // own send + peer's write-with-imm
      ASSERT_EQ(got.size(), 2u);
      for (const Completion& c : got) EXPECT_EQ(c.status, CompletionStatus::kSuccess);
      // Keep acking until the peer is done too.
      Completion c[1];
      conns[i]->PollCompletions(c, Deadline::After(50ms)).status().IgnoreError();
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_TRUE(dst[1].data == src[0].data);
  EXPECT_TRUE(dst[0].data == src[1].data);
}

TEST(EmulatedTransport, IndependentConnectionsOnManyThreads) {
  auto t = NewEmulatedTransport();
  auto l = t->Listen("127.0.0.1", 0);
  ASSERT_TRUE(l.ok());
  constexpr int kConns = 4, kRounds = 500;
  // Every 32nd SEND is signaled, so the send queue's slots come back.
  auto signaled = [](int r) { return r % 32 == 31; };
  // The next receive completion (send completions in between are skipped).
  auto next_receive = [](Connection& c) {
    for (;;) {
      auto got = PollN(c, 1);
      if (got.size() != 1u || got[0].opcode == WorkOpcode::kRecv) return got;
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < kConns; ++i) {
    threads.emplace_back([&] {  // server: echo kRounds SENDs back as SENDs
      auto c = (*l)->Accept(Deadline::After(kTimeout));
      ASSERT_TRUE(c.ok());
      Buf b = Reg(**c, 64);
      for (int r = 0; r < kRounds; ++r) {
        ASSERT_TRUE((*c)->PostRecv(r, b.local(0, 64)).ok());
        auto got = next_receive(**c);
        ASSERT_EQ(got.size(), 1u);
        ASSERT_TRUE(Post(**c, {Send(r, b.local(0, got[0].byte_len), signaled(r))}).ok());
      }
      PollUntilDown(**c);
    });
    threads.emplace_back([&, i] {
      auto c = t->Connect("127.0.0.1", (*l)->port(), Deadline::After(kTimeout));
      ASSERT_TRUE(c.ok());
      Buf tx = Reg(**c, 64), rx = Reg(**c, 64);
      for (int r = 0; r < kRounds; ++r) {
        uint32_t v = static_cast<uint32_t>(i * 100000 + r);
        std::memcpy(tx.data.data(), &v, 4);
        ASSERT_TRUE((*c)->PostRecv(r, rx.local(0, 64)).ok());
        ASSERT_TRUE(Post(**c, {Send(r, tx.local(0, 4), signaled(r))}).ok());
        auto got = next_receive(**c);
        ASSERT_EQ(got.size(), 1u);
        ASSERT_EQ(got[0].wr_id, static_cast<uint64_t>(r));
        ASSERT_EQ(0, std::memcmp(rx.data.data(), &v, 4));
      }
      EXPECT_TRUE((*c)->Disconnect().ok());
    });
  }
  for (auto& th : threads) th.join();
}

}  // namespace
}  // namespace naarpc
