// The emulated transport's memory keys: RDMA WRITE through rkeys and
// windows, bounds and access checks, regions going away, local BIND_MW /
// LOCAL_INV (memory_table.cc, queue_pair.cc).
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
#include "runtime/transport_impl/emulated/connection.h"
#include "runtime/transport_impl/emulated/emulated_test_util.h"
#include "runtime/transport_impl/emulated/emulated_transport.h"
#include "tests/testing/hang_guard.h"
#include "tests/testing/notify_loop.h"

namespace naarpc {
namespace {

using namespace std::chrono_literals;
using namespace naarpc::emulated_testing;

// ---- RDMA WRITE ------------------------------------------------------------------

TEST(EmulatedTransport, WriteThenWriteWithImmVisibleAtImmCompletion) {
  auto t = NewEmulatedTransport();
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  Buf target = Reg(*p.server, 8192);
  ASSERT_TRUE(p.server->PostRecv(55, LocalBuffer{}).ok());
  Buf src = Reg(*p.client, 8192);
  FillPattern(src.data, 1);
  ASSERT_TRUE(Post(*p.client, {Write(1, src.local(0, 4096), target.addr(0), target.mr->rkey(),
                                     /*signaled=*/false),
                               WriteImm(2, src.local(4096, 100), target.addr(4096),
                                        target.mr->rkey(), 0xdeadbeef)})
                  .ok());
  auto sc = PollN(*p.server, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].wr_id, 55u);
  EXPECT_EQ(sc[0].opcode, WorkOpcode::kRecvRdmaWithImm);
  EXPECT_EQ(sc[0].status, CompletionStatus::kSuccess);
  EXPECT_TRUE(sc[0].has_imm);
  EXPECT_EQ(sc[0].imm_data, 0xdeadbeefu);
  EXPECT_EQ(sc[0].byte_len, 100u);
  EXPECT_EQ(0, std::memcmp(target.data.data(), src.data.data(), 4096 + 100));
  EXPECT_EQ(target.data[4196], 0);

  // The server acks while it polls (for nothing).
  Side s{p.server.get()};
  Side c{p.client.get()};
  ASSERT_TRUE(RunUntil({&c, &s}, [&] { return c.got.size() == 1; }));
  EXPECT_EQ(c.got[0].wr_id, 2u);  // the unsignaled WRITE produced no completion
  EXPECT_EQ(c.got[0].opcode, WorkOpcode::kRdmaWriteWithImm);
  EXPECT_EQ(c.got[0].status, CompletionStatus::kSuccess);
  // A plain WRITE produces no completion at the target.
  ASSERT_TRUE(Post(*p.client, {Write(3, src.local(0, 16), target.addr(100), target.mr->rkey())}).ok());
  ASSERT_TRUE(RunUntil({&c, &s}, [&] { return c.got.size() == 2; }));
  EXPECT_EQ(c.got[1].wr_id, 3u);
  EXPECT_EQ(c.got[1].opcode, WorkOpcode::kRdmaWrite);
  s.Step(20ms);
  EXPECT_TRUE(s.got.empty());
  EXPECT_FALSE(s.down);
}

// A large payload is received straight into its target: only what came in
// the receive that carried its header (into staging) is copied, under
// kStagingRead per frame, whatever the payload's size.
TEST(EmulatedTransport, LargeWritesAreReceivedStraightIntoTheirTarget) {
  auto t = NewEmulatedTransport();
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  constexpr size_t kFirst = 1 << 20, kSecond = 3 << 20;
  Buf target = Reg(*p.server, kFirst + kSecond);
  ASSERT_TRUE(p.server->PostRecv(9, LocalBuffer{}).ok());
  Buf src = Reg(*p.client, kFirst + kSecond);
  FillPattern(src.data, 7);
  ASSERT_TRUE(Post(*p.client, {Write(1, src.local(0, kFirst), target.addr(0), target.mr->rkey(),
                                     /*signaled=*/false),
                               WriteImm(2, src.local(kFirst, kSecond), target.addr(kFirst),
                                        target.mr->rkey(), 0x5eed)})
                  .ok());
  // Both sides polled: the client's bytes leave as the socket takes them.
  Side s{p.server.get()};
  Side c{p.client.get()};
  ASSERT_TRUE(RunUntil({&c, &s}, [&] { return s.got.size() == 1 || s.down || c.down; }));
  ASSERT_EQ(s.got.size(), 1u) << (s.down ? s.down->ToString() : c.down->ToString());
  EXPECT_EQ(s.got[0].status, CompletionStatus::kSuccess);
  EXPECT_EQ(s.got[0].byte_len, kSecond);
  EXPECT_TRUE(target.data == src.data);
  const auto* server = dynamic_cast<const emulated::EmuConnection*>(p.server.get());
  ASSERT_NE(server, nullptr);
  EXPECT_LE(server->payload_bytes_staged(), 2 * emulated::kStagingRead)
      << "of " << kFirst + kSecond << " payload bytes in two frames";
}

TEST(EmulatedTransport, ZeroLengthWritesAreLegal) {
  auto t = NewEmulatedTransport();
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  Buf target = Reg(*p.server, 64);
  ASSERT_TRUE(p.server->PostRecv(9, LocalBuffer{}).ok());
  ASSERT_TRUE(Post(*p.client, {Write(1, LocalBuffer{}, 0, 0),
                               WriteImm(2, LocalBuffer{}, target.addr(), target.mr->rkey(), 42)})
                  .ok());
  Side c{p.client.get()}, s{p.server.get()};
  ASSERT_TRUE(RunUntil({&c, &s}, [&] { return c.got.size() == 2 && s.got.size() == 1; }));
  EXPECT_EQ(c.got[0].status, CompletionStatus::kSuccess);
  EXPECT_EQ(c.got[1].status, CompletionStatus::kSuccess);
  EXPECT_EQ(s.got[0].opcode, WorkOpcode::kRecvRdmaWithImm);
  EXPECT_EQ(s.got[0].byte_len, 0u);
  EXPECT_EQ(s.got[0].imm_data, 42u);
}

enum class Violation { kBadRkey, kLkeyAsRkey, kBeyondEnd, kBeforeStart, kNoRemoteWrite, kDeregistered };

class RemoteAccessTest : public ::testing::TestWithParam<Violation> {};

TEST_P(RemoteAccessTest, WriterGetsRemoteAccessErrorAndTargetIsUntouched) {
  auto t = NewEmulatedTransport();
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  Buf target = Reg(*p.server, 256, GetParam() == Violation::kNoRemoteWrite
                                       ? kAccessLocalWrite
                                       : kAccessLocalWrite | kAccessRemoteWrite,
                   0x11);
  ASSERT_TRUE(p.server->PostRecv(77, LocalBuffer{}).ok());
  uint64_t raddr = target.addr();
  uint32_t rkey = target.mr->rkey(), len = 64;
  uint32_t vendor = kEmuErrBadRkey;
  switch (GetParam()) {
    case Violation::kBadRkey: rkey ^= 0x100; break;
    case Violation::kLkeyAsRkey: rkey = target.mr->lkey(); break;
    case Violation::kBeyondEnd: raddr = target.addr(256 - 63); vendor = kEmuErrRemoteBounds; break;
    case Violation::kBeforeStart: raddr = target.addr() - 1; vendor = kEmuErrRemoteBounds; break;
    case Violation::kNoRemoteWrite: vendor = kEmuErrNoRemoteWrite; break;
    case Violation::kDeregistered: target.mr.reset(); break;
  }
  Buf src = Reg(*p.client, 64, kAccessLocalWrite, 0xee);
  ASSERT_TRUE(Post(*p.client, {WriteImm(1, src.local(0, len), raddr, rkey, 5, /*signaled=*/false),
                               Send(2, src.local(0, 1))})
                  .ok());
  std::vector<Completion> sc;
  std::thread server([&] { sc = PollUntilDown(*p.server); });
  auto cc = PollUntilDown(*p.client);
  server.join();
  ASSERT_EQ(cc.size(), 2u);
  EXPECT_EQ(cc[0].wr_id, 1u);
  EXPECT_EQ(cc[0].status, CompletionStatus::kRemoteAccessError);
  EXPECT_EQ(cc[0].vendor_err, vendor);
  EXPECT_EQ(cc[1].wr_id, 2u);
  EXPECT_EQ(cc[1].status, CompletionStatus::kFlushed);
  ASSERT_EQ(sc.size(), 1u);  // the receive is flushed, not consumed
  EXPECT_EQ(sc[0].wr_id, 77u);
  EXPECT_EQ(sc[0].status, CompletionStatus::kFlushed);
  for (uint8_t b : target.data) ASSERT_EQ(b, 0x11);
  // Both sides are in the error state now.
  EXPECT_EQ(p.client->PostSend(std::vector<SendRequest>{Send(3, src.local(0, 1))}).code(),
            StatusCode::kDisconnected);
  EXPECT_EQ(p.server->PostRecv(1, LocalBuffer{}).code(), StatusCode::kDisconnected);
}

INSTANTIATE_TEST_SUITE_P(Violations, RemoteAccessTest,
                         ::testing::Values(Violation::kBadRkey, Violation::kLkeyAsRkey,
                                           Violation::kBeyondEnd, Violation::kBeforeStart,
                                           Violation::kNoRemoteWrite, Violation::kDeregistered));

TEST(EmulatedTransport, WriteToLastByteOfRegionIsAllowed) {
  auto t = NewEmulatedTransport();
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  Buf target = Reg(*p.server, 256);
  Buf src = Reg(*p.client, 64, kAccessLocalWrite, 0x3c);
  ASSERT_TRUE(Post(*p.client, {Write(1, src.local(0, 64), target.addr(192), target.mr->rkey())}).ok());
  Side c{p.client.get()}, s{p.server.get()};
  ASSERT_TRUE(RunUntil({&c, &s}, [&] { return !c.got.empty(); }));
  EXPECT_EQ(c.got[0].status, CompletionStatus::kSuccess);
  EXPECT_EQ(target.data[191], 0);
  EXPECT_EQ(target.data[192], 0x3c);
  EXPECT_EQ(target.data[255], 0x3c);
}

TEST(EmulatedTransport, BadLkeyIsALocalProtectionError) {
  auto t = NewEmulatedTransport();
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  Buf src = Reg(*p.client, 64);
  Buf target = Reg(*p.server, 64);
  LocalBuffer bad = src.local(0, 64);
  bad.lkey = src.mr->rkey();
  LocalBuffer oob = src.local(32, 64);
  ASSERT_TRUE(Post(*p.client, {Write(1, src.local(0, 8), target.addr(), target.mr->rkey(), false),
                               Write(2, bad, target.addr(), target.mr->rkey(), false),
                               Write(3, oob, target.addr(), target.mr->rkey())})
                  .ok());
  Side s{p.server.get()};
  std::thread server([&] { RunUntil({&s}, [&] { return s.down.has_value(); }); });
  auto cc = PollUntilDown(*p.client);
  server.join();
  ASSERT_EQ(cc.size(), 2u);
  EXPECT_EQ(cc[0].wr_id, 2u);
  EXPECT_EQ(cc[0].status, CompletionStatus::kLocalProtectionError);
  EXPECT_EQ(cc[1].wr_id, 3u);
  EXPECT_EQ(cc[1].status, CompletionStatus::kFlushed);
}

// A connection remembers the regions it has checked (MrTable::Cache): a
// region deregistered after it was used is refused all the same.
TEST(EmulatedTransport, ARegionUsedBeforeIsRefusedOnceDeregistered) {
  auto t = NewEmulatedTransport();
  for (const bool local : {true, false}) {
    SCOPED_TRACE(local ? "the local region" : "the remote region");
    Pair p = MakePair(*t);
    ASSERT_TRUE(p.client && p.server);
    Buf target = Reg(*p.server, 64);
    Buf src = Reg(*p.client, 64, kAccessLocalWrite, 0x3c);
    const LocalBuffer from = src.local(0, 64);
    const uint64_t to = target.addr();
    const uint32_t rkey = target.mr->rkey();
    ASSERT_TRUE(Post(*p.client, {Write(1, from, to, rkey)}).ok());
    Side c{p.client.get()}, s{p.server.get()};
    ASSERT_TRUE(RunUntil({&c, &s}, [&] { return !c.got.empty(); }));
    ASSERT_EQ(c.got[0].status, CompletionStatus::kSuccess);
    (local ? src : target).mr.reset();
    ASSERT_TRUE(Post(*p.client, {Write(2, from, to, rkey)}).ok());
    ASSERT_TRUE(RunUntil({&c, &s}, [&] { return c.got.size() >= 2; }));
    EXPECT_EQ(c.got[1].wr_id, 2u);
    EXPECT_EQ(c.got[1].status, local ? CompletionStatus::kLocalProtectionError
                                     : CompletionStatus::kRemoteAccessError);
    EXPECT_EQ(c.got[1].vendor_err, local ? kEmuErrBadLkey : kEmuErrBadRkey);
  }
}

TEST(EmulatedTransport, UnsignaledErrorsStillComplete) {
  auto t = NewEmulatedTransport();
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  Buf target = Reg(*p.server, 64);
  Buf src = Reg(*p.client, 64);
  ASSERT_TRUE(Post(*p.client, {Write(1, src.local(0, 8), target.addr(), target.mr->rkey(), false),
                               Write(2, src.local(0, 8), target.addr(), 0xbad, false)})
                  .ok());
  Side s{p.server.get()};
  std::thread server([&] { RunUntil({&s}, [&] { return s.down.has_value(); }); });
  auto cc = PollUntilDown(*p.client);
  server.join();
  ASSERT_EQ(cc.size(), 1u);
  EXPECT_EQ(cc[0].wr_id, 2u);
  EXPECT_EQ(cc[0].status, CompletionStatus::kRemoteAccessError);
}

TEST(EmulatedTransport, RegionDeregisteredWhileDataArrives) {
  auto t = NewEmulatedTransport();
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  constexpr size_t kBig = 32 << 20;
  Buf target = Reg(*p.server, kBig);
  Buf src = Reg(*p.client, kBig, kAccessLocalWrite, 0x77);
  // The client does not poll yet: only what fits in the socket buffers
  // (far less than 32 MiB) is on its way.
  ASSERT_TRUE(Post(*p.client, {Write(1, src.all(), target.addr(), target.mr->rkey())}).ok());
  Completion c[1];
  for (int i = 0; i < 10000 && target.data[0] == 0; ++i) {
    auto r = p.server->PollCompletions(c, Deadline::After(1ms));
    ASSERT_TRUE(r.ok());
  }
  ASSERT_EQ(target.data[0], 0x77);
  ASSERT_NE(target.data[kBig - 1], 0x77);  // not complete yet
  target.mr.reset();  // deregister mid-write
  std::thread client([&] {
    auto cc = PollUntilDown(*p.client);
    ASSERT_EQ(cc.size(), 1u);
    EXPECT_EQ(cc[0].status, CompletionStatus::kRemoteAccessError);
    EXPECT_EQ(cc[0].vendor_err, kEmuErrRegionGone);
  });
  PollUntilDown(*p.server);
  client.join();
}

// Binds and invalidates alone (no frame) execute at once, and a coalesced
// ack stays coalesced: it leaves with the next frame, not alone (a lone ack
// would wake the peer for nothing; per-call windows post them every call).
TEST(EmulatedTransport, LocalRequestsAloneExecuteAtOnceAndSendNoLoneAck) {
  auto t = NewEmulatedTransport();
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  Buf target = Reg(*p.server, 4096);
  Buf windowed = Reg(*p.server, 4096, kAccessLocalWrite | kAccessMwBind);
  auto w = p.server->AllocateWindow();
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  Buf src = Reg(*p.client, 4096);
  Buf reply = Reg(*p.client, 64);
  ASSERT_TRUE(p.server->PostRecv(55, LocalBuffer{}).ok());
  ASSERT_TRUE(p.client->PostRecv(66, reply.all()).ok());
  ASSERT_TRUE(Post(*p.client, {WriteImm(1, src.all(), target.addr(), target.mr->rkey(), 7)}).ok());
  auto landed = PollN(*p.server, 1);  // its ack is now owed, coalesced
  ASSERT_EQ(landed.size(), 1u);
  EXPECT_EQ(landed[0].wr_id, 55u);

  SendRequest bind;
  bind.wr_id = 2;
  bind.opcode = WorkOpcode::kBindWindow;
  bind.window = w->get();
  bind.window_region = windowed.mr.get();
  bind.local = windowed.all();
  bind.window_access = kAccessRemoteWrite;
  ASSERT_TRUE(Post(*p.server, {bind}).ok());
  SendRequest inv;
  inv.wr_id = 3;
  inv.opcode = WorkOpcode::kLocalInvalidate;
  inv.rkey = (*w)->rkey();  // the key the bind gave it
  ASSERT_TRUE(Post(*p.server, {inv}).ok());
  // Executed within PostSend: both completions are there without progress.
  Completion c[4];
  auto n = p.server->TryPollCompletions(c);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  ASSERT_EQ(*n, 2u);
  EXPECT_EQ(c[0].wr_id, 2u);
  EXPECT_EQ(c[0].opcode, WorkOpcode::kBindWindow);
  EXPECT_EQ(c[1].wr_id, 3u);
  EXPECT_EQ(c[1].opcode, WorkOpcode::kLocalInvalidate);
  EXPECT_EQ(c[1].status, CompletionStatus::kSuccess);
  // A refused one names its work request and the problem.
  SendRequest empty = bind;
  empty.wr_id = 9;
  empty.local.length = 0;
  Status refused = Post(*p.server, {empty});
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument) << refused.ToString();
  EXPECT_NE(refused.ToString().find("wr_id 9: BIND_MW of 0 bytes"), std::string::npos)
      << refused.ToString();
  // Nothing was sent for them: the client has no ack to complete its write.
  auto none = p.client->TryPollCompletions(c);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(*none, 0u);

  // The ack leaves with the server's next frame: the write and the SEND
  // complete at the client together.
  Buf msg = Reg(*p.server, 64);
  ASSERT_TRUE(Post(*p.server, {Send(4, msg.all(), /*signaled=*/false)}).ok());
  auto got = PollN(*p.client, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].wr_id, 1u);
  EXPECT_EQ(got[0].status, CompletionStatus::kSuccess);
  EXPECT_EQ(got[1].wr_id, 66u);
}

}  // namespace
}  // namespace naarpc
