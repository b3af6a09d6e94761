// Fault injection on the emulated transport (fault_injection.h): drops,
// delays, corruption, lost immediates, duplicates, swaps, stalls.
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

// ---- fault injection -------------------------------------------------------------------

TEST(EmulatedTransport, FaultDropConnection) {
  auto faults = std::make_shared<ScriptedFaultInjector>();
  faults->AddRule(Rule(false, std::nullopt, 1, FaultAction::Drop()));
  EmulatedOptions o;
  o.faults = faults;
  auto t = NewEmulatedTransport(o);
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  Buf rx = Reg(*p.server, 64);
  ASSERT_TRUE(p.server->PostRecv(1, rx.local(0, 64)).ok());
  ASSERT_TRUE(p.server->PostRecv(2, rx.local(0, 64)).ok());
  Buf tx = Reg(*p.client, 64, kAccessLocalWrite, 9);
  Side c{p.client.get()}, s{p.server.get()};
  ASSERT_TRUE(Post(*p.client, {Send(10, tx.local(0, 4))}).ok());
  ASSERT_TRUE(RunUntil({&c, &s}, [&] { return c.got.size() == 1 && s.got.size() == 1; }));
  ASSERT_TRUE(Post(*p.client, {Send(11, tx.local(0, 4)), Send(12, tx.local(0, 4))}).ok());
  EXPECT_EQ(faults->injected(), 1u);
  ASSERT_TRUE(RunUntil({&c, &s}, [&] { return c.down && s.down; }));
  EXPECT_EQ(c.down->code(), StatusCode::kDisconnected);
  EXPECT_EQ(s.down->code(), StatusCode::kDisconnected);
  ASSERT_EQ(c.got.size(), 3u);
  EXPECT_EQ(c.got[1].wr_id, 11u);
  EXPECT_EQ(c.got[1].status, CompletionStatus::kFlushed);
  EXPECT_EQ(c.got[2].wr_id, 12u);
  EXPECT_EQ(c.got[2].status, CompletionStatus::kFlushed);
  ASSERT_EQ(s.got.size(), 2u);
  EXPECT_EQ(s.got[1].wr_id, 2u);
  EXPECT_EQ(s.got[1].status, CompletionStatus::kFlushed);
}

TEST(EmulatedTransport, FaultDelayKeepsOrder) {
  auto faults = std::make_shared<ScriptedFaultInjector>(std::vector<FaultRule>{
      Rule(false, WorkOpcode::kRdmaWrite, std::nullopt, FaultAction::Delay(300ms))});
  EmulatedOptions o;
  o.faults = faults;
  auto t = NewEmulatedTransport(o);
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  Buf target = Reg(*p.server, 64);
  ASSERT_TRUE(p.server->PostRecv(1, LocalBuffer{}).ok());
  Buf src = Reg(*p.client, 64, kAccessLocalWrite, 0x42);
  Side c{p.client.get()}, s{p.server.get()};
  const auto start = Clock::now();
  ASSERT_TRUE(Post(*p.client, {Write(1, src.local(0, 8), target.addr(), target.mr->rkey()),
                               WriteImm(2, src.local(0, 8), target.addr(8), target.mr->rkey(), 0)})
                  .ok());
  // PostSend does not block on the delay: it has returned while neither
  // WRITE can have left (the delayed one holds back the one behind it, and
  // the client makes progress only inside its own calls), so the target,
  // polled without waiting, has nothing. A PostSend that waited out the
  // delay would have sent both.
  s.Step(0us);
  EXPECT_TRUE(s.got.empty());
  EXPECT_EQ(target.data[0], 0);
  ASSERT_TRUE(RunUntil({&c, &s}, [&] { return s.got.size() == 1; }));
  EXPECT_GE(Clock::now() - start, 300ms);  // the delay was applied: never sooner
  EXPECT_EQ(target.data[0], 0x42);  // the delayed WRITE landed before the imm
  ASSERT_TRUE(RunUntil({&c, &s}, [&] { return c.got.size() == 2; }));
  EXPECT_EQ(c.got[0].wr_id, 1u);
  EXPECT_EQ(c.got[1].wr_id, 2u);
  auto seen = faults->seen();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].sequence, 0u);
  EXPECT_EQ(seen[0].length, 8u);
  EXPECT_EQ(seen[1].sequence, 1u);
  EXPECT_FALSE(seen[1].is_listener_side);
}

TEST(EmulatedTransport, FaultCorruptFlipsOneByteOnTheWire) {
  auto faults = std::make_shared<ScriptedFaultInjector>(
      std::vector<FaultRule>{Rule(true, std::nullopt, std::nullopt, FaultAction::Corrupt(5))});
  EmulatedOptions o;
  o.faults = faults;
  auto t = NewEmulatedTransport(o);
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  // Server -> client this time (the rule matches the accepted side).
  Buf target = Reg(*p.client, 64);
  Buf src = Reg(*p.server, 64);
  FillPattern(src.data, 3);
  const std::vector<uint8_t> orig = src.data;
  ASSERT_TRUE(Post(*p.server, {Write(1, src.local(0, 64), target.addr(), target.mr->rkey())}).ok());
  Side c{p.client.get()}, s{p.server.get()};
  ASSERT_TRUE(RunUntil({&c, &s}, [&] { return s.got.size() == 1; }));
  EXPECT_EQ(s.got[0].status, CompletionStatus::kSuccess);
  EXPECT_TRUE(src.data == orig);  // the sender's memory is untouched
  for (size_t i = 0; i < 64; ++i) {
    EXPECT_EQ(target.data[i], i == 5 ? (orig[i] ^ 0xff) : orig[i]) << i;
  }
  EXPECT_EQ(faults->injected(), 1u);
}

// A gather list is read piece by piece when its frame goes out (an HCA's
// DMA reads): a corrupted byte is the one at that offset of the packed
// payload, here inside the second piece; the sender's memory is untouched.
TEST(EmulatedTransport, FaultCorruptInAGatherListFlipsThatByteOfItsPiece) {
  auto faults = std::make_shared<ScriptedFaultInjector>(
      std::vector<FaultRule>{Rule(false, std::nullopt, std::nullopt, FaultAction::Corrupt(20))});
  EmulatedOptions o;
  o.faults = faults;
  auto t = NewEmulatedTransport(o);
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  Buf src = Reg(*p.client, 256);
  FillPattern(src.data, 9);
  const std::vector<uint8_t> orig = src.data;
  Buf target = Reg(*p.server, 116);
  SendRequest w = Write(1, {}, target.addr(), target.mr->rkey());
  const LocalBuffer pieces[] = {src.local(0, 10), src.local(100, 50), src.local(200, 56)};
  w.sg_list = pieces;
  ASSERT_TRUE(p.client->PostSend(std::span<const SendRequest>(&w, 1)).ok());
  Side c{p.client.get()}, s{p.server.get()};
  ASSERT_TRUE(RunUntil({&c, &s}, [&] { return c.got.size() == 1; }));
  EXPECT_EQ(c.got[0].status, CompletionStatus::kSuccess);
  std::vector<uint8_t> packed(orig.begin(), orig.begin() + 10);
  packed.insert(packed.end(), orig.begin() + 100, orig.begin() + 150);
  packed.insert(packed.end(), orig.begin() + 200, orig.end());
  packed[20] ^= 0xff;  // src[110]
  EXPECT_EQ(target.data, packed);
  EXPECT_EQ(src.data, orig);
  EXPECT_EQ(faults->injected(), 1u);
}

// A gather list of more entries than one sendmsg carries (64 iovecs) goes
// out over several, and lands packed and whole.
TEST(EmulatedTransport, AGatherListWiderThanOneSendmsgLandsWhole) {
  EmulatedOptions o;
  o.max_send_sge = 200;
  auto t = NewEmulatedTransport(o);
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  Buf src = Reg(*p.client, 200 * 7);
  FillPattern(src.data, 4);
  Buf target = Reg(*p.server, 200 * 3);
  SendRequest w = Write(1, {}, target.addr(), target.mr->rkey());
  std::vector<LocalBuffer> pieces;
  std::vector<uint8_t> packed;
  for (uint32_t i = 0; i < 200; ++i) {
    pieces.push_back(src.local(i * 7, 3));
    packed.insert(packed.end(), src.data.begin() + i * 7, src.data.begin() + i * 7 + 3);
  }
  w.sg_list = pieces;
  ASSERT_TRUE(p.client->PostSend(std::span<const SendRequest>(&w, 1)).ok());
  Side c{p.client.get()}, s{p.server.get()};
  ASSERT_TRUE(RunUntil({&c, &s}, [&] { return c.got.size() == 1; }));
  EXPECT_EQ(c.got[0].status, CompletionStatus::kSuccess);
  EXPECT_EQ(target.data, packed);
}

// A rule for the connecting side's WRITE_WITH_IMM that carries `imm`.
FaultRule OnClientImm(uint32_t imm, FaultAction action) {
  FaultRule r;
  r.listener_side = false;
  r.opcode = WorkOpcode::kRdmaWriteWithImm;
  r.match = [imm](const FaultPoint& p) { return p.has_imm && p.imm_data == imm; };
  r.action = action;
  return r;
}

// Client -> server WRITE_WITH_IMMs with faults on some of them. Message i
// (1 <= i < kMaxMessages) has wr_id i, immediate ImmOf(i), and 8 * i bytes
// of value i, written at offset 64 * i of the target.
struct ImmMessages {
  static constexpr uint32_t kMaxMessages = 8;
  static uint32_t ImmOf(uint32_t i) { return 0x1000 + i; }

  explicit ImmMessages(std::vector<FaultRule> rules)
      : faults(std::make_shared<ScriptedFaultInjector>(std::move(rules))) {
    EmulatedOptions o;
    o.faults = faults;
    transport = NewEmulatedTransport(o);
    pair = MakePair(*transport);
    if (!ok()) return;
    target = Reg(*pair.server, 64 * kMaxMessages);
    src = Reg(*pair.client, 64 * kMaxMessages, kAccessLocalWrite);
    for (uint32_t i = 1; i < kMaxMessages; ++i) {
      std::fill_n(src.data.begin() + 64 * i, 8 * i, static_cast<uint8_t>(i));
    }
  }
  bool ok() const { return pair.client && pair.server; }

  SendRequest Message(uint32_t i) const {
    return WriteImm(i, src.local(64 * i, 8 * i), target.addr(64 * i), target.mr->rkey(), ImmOf(i));
  }
  Status PostMessages(std::initializer_list<uint32_t> ids) {
    std::vector<SendRequest> v;
    for (uint32_t i : ids) v.push_back(Message(i));
    return pair.client->PostSend(v);
  }
  // Zero-length receives with wr_ids 100, 101, ...
  void PostReceives(int n) {
    for (int k = 0; k < n; ++k) {
      ASSERT_TRUE(pair.server->PostRecv(100 + k, LocalBuffer{}).ok());
    }
  }
  // Message i's data is at its place in the target (and nothing after it).
  bool Landed(uint32_t i) const {
    for (uint32_t k = 0; k < 64; ++k) {
      if (target.data[64 * i + k] != (k < 8 * i ? i : 0)) return false;
    }
    return true;
  }

  std::shared_ptr<ScriptedFaultInjector> faults;
  std::unique_ptr<Transport> transport;
  Pair pair;
  Buf target, src;
};

std::vector<uint32_t> Imms(const std::vector<Completion>& got) {
  std::vector<uint32_t> v;
  for (const Completion& c : got) {
    EXPECT_EQ(c.status, CompletionStatus::kSuccess);
    EXPECT_EQ(c.opcode, WorkOpcode::kRecvRdmaWithImm);
    EXPECT_TRUE(c.has_imm);
    v.push_back(c.imm_data);
  }
  return v;
}

std::vector<uint64_t> WrIds(const std::vector<Completion>& got) {
  std::vector<uint64_t> v;
  for (const Completion& c : got) v.push_back(c.wr_id);
  return v;
}

std::vector<uint32_t> ByteLens(const std::vector<Completion>& got) {
  std::vector<uint32_t> v;
  for (const Completion& c : got) v.push_back(c.byte_len);
  return v;
}

// The sender's completions of messages `ids`: successful, in that order.
void ExpectSenderCompletions(const std::vector<Completion>& got, std::vector<uint64_t> ids) {
  EXPECT_EQ(WrIds(got), ids);
  for (size_t k = 0; k < got.size() && k < ids.size(); ++k) {
    EXPECT_EQ(got[k].status, CompletionStatus::kSuccess);
    EXPECT_EQ(got[k].opcode, WorkOpcode::kRdmaWriteWithImm);
    EXPECT_EQ(got[k].byte_len, 8 * ids[k]);  // its own length
  }
}

// Ends the test: the client disconnects; the server's receives still
// posted are flushed (so the target consumed exactly the others).
void ExpectUnconsumedReceivesFlushed(ImmMessages& m, std::vector<uint64_t> wr_ids) {
  ASSERT_TRUE(m.pair.client->Disconnect().ok());
  EXPECT_TRUE(PollUntilDown(*m.pair.client).empty());
  auto flushed = PollUntilDown(*m.pair.server);
  EXPECT_EQ(WrIds(flushed), wr_ids);
  for (const Completion& c : flushed) EXPECT_EQ(c.status, CompletionStatus::kFlushed);
}

TEST(EmulatedTransport, FaultLoseMessageLandsTheDataButNotTheImmediate) {
  ImmMessages m({OnClientImm(ImmMessages::ImmOf(2), FaultAction::LoseMessage())});
  ASSERT_TRUE(m.ok());
  m.PostReceives(5);
  ASSERT_TRUE(m.PostMessages({1, 2, 3}).ok());
  ASSERT_TRUE(m.PostMessages({4}).ok());
  Side c{m.pair.client.get()}, s{m.pair.server.get()};
  // Message 4 is the last: once it completed at the target, 1..3 were processed.
  ASSERT_TRUE(RunUntil({&c, &s}, [&] { return c.got.size() >= 4 && !s.got.empty() &&
                                              s.got.back().imm_data == ImmMessages::ImmOf(4); }));
  using M = ImmMessages;
  EXPECT_EQ(Imms(s.got), (std::vector<uint32_t>{M::ImmOf(1), M::ImmOf(3), M::ImmOf(4)}));
  EXPECT_EQ(WrIds(s.got), (std::vector<uint64_t>{100, 101, 102}));
  EXPECT_EQ(ByteLens(s.got), (std::vector<uint32_t>{8, 24, 32}));
  for (uint32_t i = 1; i <= 4; ++i) EXPECT_TRUE(m.Landed(i)) << i;  // 2 as well
  ExpectSenderCompletions(c.got, {1, 2, 3, 4});
  EXPECT_EQ(m.faults->injected(), 1u);
  auto seen = m.faults->seen();
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_TRUE(seen[1].has_imm);
  EXPECT_EQ(seen[1].imm_data, M::ImmOf(2));
  EXPECT_EQ(seen[1].sequence, 1u);
  ExpectUnconsumedReceivesFlushed(m, {103, 104});
}

TEST(EmulatedTransport, FaultDuplicateDeliversTwiceAndCompletesOnceAtTheSender) {
  ImmMessages m({OnClientImm(ImmMessages::ImmOf(2), FaultAction::Duplicate())});
  ASSERT_TRUE(m.ok());
  m.PostReceives(7);
  ASSERT_TRUE(m.PostMessages({1, 2, 3}).ok());
  ASSERT_TRUE(m.PostMessages({4}).ok());
  Side c{m.pair.client.get()}, s{m.pair.server.get()};
  ASSERT_TRUE(RunUntil({&c, &s}, [&] { return c.got.size() >= 4 && s.got.size() >= 5; }));
  using M = ImmMessages;
  EXPECT_EQ(Imms(s.got), (std::vector<uint32_t>{M::ImmOf(1), M::ImmOf(2), M::ImmOf(2),
                                                M::ImmOf(3), M::ImmOf(4)}));
  EXPECT_EQ(WrIds(s.got), (std::vector<uint64_t>{100, 101, 102, 103, 104}));
  EXPECT_EQ(ByteLens(s.got), (std::vector<uint32_t>{8, 16, 16, 24, 32}));
  for (uint32_t i = 1; i <= 4; ++i) EXPECT_TRUE(m.Landed(i)) << i;
  ExpectSenderCompletions(c.got, {1, 2, 3, 4});
  // Completions come in order: an extra one for the copy would precede 5's.
  ASSERT_TRUE(m.PostMessages({5}).ok());
  ASSERT_TRUE(RunUntil({&c, &s}, [&] { return c.got.size() >= 5 && s.got.size() >= 6; }));
  ExpectSenderCompletions(c.got, {1, 2, 3, 4, 5});
  EXPECT_EQ(m.faults->injected(), 1u);
  EXPECT_EQ(m.faults->seen().size(), 5u);  // the copy is not a posted WR
  ExpectUnconsumedReceivesFlushed(m, {106});
}

TEST(EmulatedTransport, FaultDuplicateOutstandingAtABreakFlushesOnlyThePostedWrs) {
  ImmMessages m({OnClientImm(ImmMessages::ImmOf(1), FaultAction::Duplicate())});
  ASSERT_TRUE(m.ok());
  m.PostReceives(1);
  // The server does not poll: nothing is acknowledged before the break.
  ASSERT_TRUE(m.PostMessages({1, 2}).ok());
  ASSERT_TRUE(m.pair.client->Disconnect().ok());
  auto got = PollUntilDown(*m.pair.client);
  EXPECT_EQ(WrIds(got), (std::vector<uint64_t>{1, 2}));
  for (const Completion& c : got) EXPECT_EQ(c.status, CompletionStatus::kFlushed);
  EXPECT_EQ(m.faults->injected(), 1u);
}

// Send-queue accounting counts what was posted: the copy takes no slot.
TEST(EmulatedTransport, FaultDuplicateTakesNoSendQueueSlot) {
  auto faults = std::make_shared<ScriptedFaultInjector>(
      std::vector<FaultRule>{Rule(false, std::nullopt, 0, FaultAction::Duplicate())});
  EmulatedOptions o;
  o.send_queue_depth = 4;
  o.faults = faults;
  auto t = NewEmulatedTransport(o);
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  Buf dst = Reg(*p.server, 64);
  Buf src = Reg(*p.client, 64, kAccessLocalWrite, 0x5c);
  auto write = [&](uint64_t id) { return Write(id, src.local(0, 8), dst.addr(), dst.mr->rkey()); };
  ASSERT_TRUE(Post(*p.client, {write(1)}).ok());  // duplicated
  Status st = Post(*p.client, {write(2), write(3), write(4)});
  EXPECT_TRUE(st.ok()) << st.ToString();
  Status full = Post(*p.client, {write(5)});
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted) << full.ToString();
  EXPECT_NE(full.message().find("send queue full (depth 4, 4 posted"), std::string::npos)
      << full.message();
  Side c{p.client.get()}, s{p.server.get()};
  ASSERT_TRUE(RunUntil({&c, &s}, [&] { return c.got.size() >= 4; }));
  EXPECT_EQ(WrIds(c.got), (std::vector<uint64_t>{1, 2, 3, 4}));
  // All four freed: a full queue's worth may be posted again.
  st = Post(*p.client, {write(5), write(6), write(7), write(8)});
  EXPECT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(RunUntil({&c, &s}, [&] { return c.got.size() >= 8; }));
  EXPECT_EQ(WrIds(c.got), (std::vector<uint64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_TRUE(s.got.empty());  // plain WRITEs, the copy included
  EXPECT_FALSE(s.down);
  EXPECT_EQ(faults->injected(), 1u);
  auto seen = faults->seen();
  ASSERT_FALSE(seen.empty());
  EXPECT_FALSE(seen[0].has_imm);
}

TEST(EmulatedTransport, FaultSwapWithNextExchangesTwoMessagesOnTheWire) {
  ImmMessages m({OnClientImm(ImmMessages::ImmOf(2), FaultAction::SwapWithNext()),
                 OnClientImm(ImmMessages::ImmOf(4), FaultAction::SwapWithNext())});
  ASSERT_TRUE(m.ok());
  m.PostReceives(7);
  Side c{m.pair.client.get()}, s{m.pair.server.get()};
  // 2 is held until 3 is posted; 1 goes on meanwhile.
  ASSERT_TRUE(m.PostMessages({1, 2}).ok());
  ASSERT_TRUE(RunUntil({&c, &s}, [&] { return !c.got.empty() && !s.got.empty(); }));
  ExpectSenderCompletions(c.got, {1});
  EXPECT_EQ(Imms(s.got), std::vector<uint32_t>{ImmMessages::ImmOf(1)});
  ASSERT_TRUE(m.PostMessages({3}).ok());
  // 4 and 5 in one call.
  ASSERT_TRUE(m.PostMessages({4, 5}).ok());
  ASSERT_TRUE(RunUntil({&c, &s}, [&] { return c.got.size() >= 5 && s.got.size() >= 5; }));
  using M = ImmMessages;
  EXPECT_EQ(Imms(s.got), (std::vector<uint32_t>{M::ImmOf(1), M::ImmOf(3), M::ImmOf(2),
                                                M::ImmOf(5), M::ImmOf(4)}));
  EXPECT_EQ(WrIds(s.got), (std::vector<uint64_t>{100, 101, 102, 103, 104}));
  EXPECT_EQ(ByteLens(s.got), (std::vector<uint32_t>{8, 24, 16, 40, 32}));
  for (uint32_t i = 1; i <= 5; ++i) EXPECT_TRUE(m.Landed(i)) << i;
  ExpectSenderCompletions(c.got, {1, 2, 3, 4, 5});
  EXPECT_EQ(m.faults->injected(), 2u);
  ExpectUnconsumedReceivesFlushed(m, {105, 106});
}

TEST(EmulatedTransport, FaultSwapWithNextHeldWrIsFlushedOnABreak) {
  ImmMessages m({OnClientImm(ImmMessages::ImmOf(1), FaultAction::SwapWithNext())});
  ASSERT_TRUE(m.ok());
  m.PostReceives(1);
  ASSERT_TRUE(m.PostMessages({1}).ok());
  // Bytes sent before the disconnect would still reach the server (it reads
  // them before the end of the stream): the held message was never sent.
  ASSERT_TRUE(m.pair.client->Disconnect().ok());
  auto got = PollUntilDown(*m.pair.client);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 1u);
  EXPECT_EQ(got[0].status, CompletionStatus::kFlushed);
  auto at_target = PollUntilDown(*m.pair.server);
  ASSERT_EQ(at_target.size(), 1u);
  EXPECT_EQ(at_target[0].wr_id, 100u);
  EXPECT_EQ(at_target[0].status, CompletionStatus::kFlushed);
  EXPECT_EQ(m.target.data[64], 0);
}

// A sender that stops in the middle of a message (StallMidMessage) holds the
// receiver's connection only for stall_timeout: then the receiver breaks it,
// naming how much of the message came, and its posted receive is flushed.
TEST(EmulatedTransport, AMessageThatStopsMidWayBreaksTheConnection) {
  FaultRule rule;
  rule.listener_side = false;
  rule.opcode = WorkOpcode::kRdmaWriteWithImm;
  rule.action = FaultAction::StallMidMessage(1000);
  EmulatedOptions o;
  o.faults = std::make_shared<ScriptedFaultInjector>(std::vector<FaultRule>{rule});
  o.stall_timeout = std::chrono::milliseconds(100);
  auto t = NewEmulatedTransport(o);
  Pair p = MakePair(*t);
  ASSERT_TRUE(p.client && p.server);
  Buf target = Reg(*p.server, 64 << 10);
  Buf recv = Reg(*p.server, 16);
  Buf src = Reg(*p.client, 64 << 10, kAccessLocalWrite, 7);
  ASSERT_TRUE(p.server->PostRecv(42, recv.all()).ok());
  SendRequest w;
  w.wr_id = 1;
  w.opcode = WorkOpcode::kRdmaWriteWithImm;
  w.local = src.all();
  w.remote_addr = target.addr();
  w.rkey = target.mr->rkey();
  w.imm_data = 5;
  ASSERT_TRUE(p.client->PostSend(std::span<const SendRequest>(&w, 1)).ok());
  // The receiver polls (with a deadline far beyond the stall timeout) until
  // the connection is down: first the flushed receive, then kDisconnected.
  const Deadline deadline = Deadline::After(std::chrono::seconds(60));
  std::vector<Completion> got;
  Status down;
  while (down.ok()) {
    ASSERT_FALSE(deadline.expired());
    Completion c[4];
    auto n = p.server->PollCompletions(c, deadline);
    if (!n.ok()) {
      down = n.status();
      break;
    }
    got.insert(got.end(), c, c + *n);
  }
  EXPECT_EQ(down.code(), StatusCode::kDisconnected) << down.ToString();
  EXPECT_NE(p.server->down_reason().find("stopped sending in the middle of a message: 1000 of "
                                         "its 65536 bytes"),
            std::string::npos)
      << p.server->down_reason();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 42u);
  EXPECT_EQ(got[0].status, CompletionStatus::kFlushed);
  EXPECT_EQ(target.data[999], 7);   // what came landed
  EXPECT_EQ(target.data[1000], 0);  // nothing more
}

}  // namespace
}  // namespace naarpc
