// Admission (runtime/naa/admission.h): per-peer limits and max-min fair reclaim
// of idle sessions; behaviour only (callbacks stand in for connections).
#include "runtime/naa/admission.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace naarpc::internal {
namespace {

TEST(PeerHost, TakesTheAddressOfAPeerName) {
  EXPECT_EQ(PeerHost("10.0.0.7:4242"), "10.0.0.7");
  EXPECT_EQ(PeerHost("[fd00::7]:4242"), "fd00::7");
  EXPECT_EQ(PeerHost("fd00::7"), "fd00::7");
  EXPECT_EQ(PeerHost("host"), "host");
}

Admission::Limits Limits(size_t connections, uint64_t bytes) {
  Admission::Limits l;
  l.max_connections = connections;
  l.max_connections_per_peer = connections;
  l.max_handshakes_per_peer = 2;
  l.max_bytes = bytes;
  l.max_bytes_per_peer = bytes;
  return l;
}

// Admits an idle session of `peer`; `closed` records reclaims by id. With
// `ends`, a reclaimed session ends at once (as a closed connection does).
uint64_t Session(Admission& a, const std::string& peer, std::vector<uint64_t>* closed,
                 bool ends = false) {
  auto id = std::make_shared<uint64_t>(0);
  auto r = a.Admit(peer, [&a, id, closed, ends] {
    closed->push_back(*id);
    if (ends) a.Release(*id);
  });
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  *id = r.ok() ? *r : 0;
  a.HandshakeDone(*id);
  return *id;
}

bool Busy(Admission& a, uint64_t id) { return a.Busy(*a.Find(id)); }
void Idle(Admission& a, uint64_t id) { a.Idle(*a.Find(id)); }

TEST(Admission, HandshakesAreCappedPerPeer) {
  Admission a(Limits(10, 100));
  ASSERT_TRUE(a.Admit("A", nullptr).ok());
  ASSERT_TRUE(a.Admit("A", nullptr).ok());
  auto third = a.Admit("A", nullptr);
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("peer A has 2 connections in their MRSP handshake"),
            std::string::npos)
      << third.status().ToString();
  EXPECT_TRUE(a.Admit("B", nullptr).ok());  // another peer is not held up
}

TEST(Admission, ANewcomerTakesTheLeastRecentlyUsedIdleSessionOfTheBiggestPeer) {
  Admission a(Limits(4, 100));
  std::vector<uint64_t> closed;
  const uint64_t a1 = Session(a, "A", &closed), a2 = Session(a, "A", &closed);
  const uint64_t a3 = Session(a, "A", &closed), a4 = Session(a, "A", &closed);
  ASSERT_TRUE(Busy(a, a1));  // a1 in a call, then used last
  Idle(a, a1);
  ASSERT_TRUE(Busy(a, a3));  // a3 in a call: never reclaimed
  const uint64_t b1 = Session(a, "B", &closed);
  EXPECT_EQ(closed, std::vector<uint64_t>{a2});  // least recently used idle
  EXPECT_FALSE(Busy(a, a2));                      // it is closing
  EXPECT_EQ(a.connections(), 4u);
  EXPECT_EQ(a.reclaimed(), 1u);
  // B (1) may take from A (3): A keeps more than B would (2).
  Session(a, "B", &closed);
  EXPECT_EQ(closed, (std::vector<uint64_t>{a2, a4}));
  // Now A holds 2 (a1 idle, a3 busy) and B 2: nobody holds more than B would.
  auto b3 = a.Admit("B", nullptr);
  EXPECT_FALSE(b3.ok());
  EXPECT_NE(b3.status().message().find("connection limit 4 reached"), std::string::npos);
  // A peer never reclaims its own sessions, nor a busy one.
  auto a5 = a.Admit("A", nullptr);
  EXPECT_FALSE(a5.ok());
  a.Release(a2);  // the reclaimed ones end: nothing more is freed
  a.Release(a4);
  EXPECT_EQ(a.connections(), 4u);
  a.Release(b1);
  EXPECT_TRUE(a.Admit("A", nullptr).ok());
}

TEST(Admission, MemoryIsReclaimedFromAPeerThatKeepsMore) {
  Admission a(Limits(10, 100));
  std::vector<uint64_t> closed;
  uint64_t in_use = 0;
  const uint64_t a1 = Session(a, "A", &closed, /*ends=*/true);
  const uint64_t a2 = Session(a, "A", &closed, /*ends=*/true);
  ASSERT_TRUE(a.Reserve(a1, 45, Deadline::Infinite(), in_use).ok());
  ASSERT_TRUE(a.Reserve(a2, 45, Deadline::Infinite(), in_use).ok());
  ASSERT_TRUE(Busy(a, a2));  // a2 in a call, idle again: a1 is the least recently used
  Idle(a, a2);
  // B needs 30 of the 10 left: A's least recently used session (45) goes,
  // and B's reservation waits until it has released its memory.
  const uint64_t b1 = Session(a, "B", &closed);
  Status s = a.Reserve(b1, 30, Deadline::After(std::chrono::seconds(60)), in_use);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(closed, std::vector<uint64_t>{a1});
  EXPECT_EQ(a.reserved_bytes(), 75u);
  // B (30) may not take A's last session (45) for 40 more: B would keep 70.
  const uint64_t b2 = Session(a, "B", &closed);
  EXPECT_FALSE(a.Reserve(b2, 40, Deadline::After(std::chrono::seconds(60)), in_use).ok());
  EXPECT_EQ(closed, std::vector<uint64_t>{a1});
}

TEST(Admission, NothingIsReclaimedWhenItWouldNotBeEnoughOrNotFair) {
  Admission a(Limits(10, 100));
  std::vector<uint64_t> closed;
  uint64_t in_use = 0;
  const uint64_t a1 = Session(a, "A", &closed);
  ASSERT_TRUE(a.Reserve(a1, 60, Deadline::Infinite(), in_use).ok());
  const uint64_t b1 = Session(a, "B", &closed);
  ASSERT_TRUE(a.Reserve(b1, 30, Deadline::Infinite(), in_use).ok());
  // B wants 40 more: B would keep 70 > A's 60: not fair to take from A.
  const uint64_t b2 = Session(a, "B", &closed);
  Status s = a.Reserve(b2, 40, Deadline::Infinite(), in_use);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_EQ(in_use, 90u);
  EXPECT_TRUE(closed.empty());
  EXPECT_EQ(a.reclaimed(), 0u);
  // More than the whole budget: refused, nothing reclaimed.
  const uint64_t c1 = Session(a, "C", &closed);
  EXPECT_FALSE(a.Reserve(c1, 101, Deadline::Infinite(), in_use).ok());
  EXPECT_TRUE(closed.empty());
}

TEST(Admission, AClosedConnectionFreesItsSlotAtOnceAndItsBytesOnRelease) {
  Admission a(Limits(1, 100));
  auto first = a.Admit("A", nullptr);
  ASSERT_TRUE(first.ok());
  uint64_t in_use = 0;
  ASSERT_TRUE(a.Reserve(*first, 80, Deadline::After(std::chrono::seconds(0)), in_use).ok());
  a.Closed(*first);  // in its handshake still: that count goes too
  EXPECT_EQ(a.connections(), 0u);
  EXPECT_EQ(a.reserved_bytes(), 80u);
  auto second = a.Admit("A", nullptr);  // the slot, and a handshake, are free
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  auto refused = a.Reserve(*second, 40, Deadline::After(std::chrono::seconds(0)), in_use);
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted) << refused.ToString();
  a.Release(*first);
  EXPECT_EQ(a.reserved_bytes(), 0u);
  EXPECT_TRUE(a.Reserve(*second, 40, Deadline::After(std::chrono::seconds(0)), in_use).ok());
  EXPECT_EQ(a.reclaimed(), 0u);  // closing is not reclaiming
}

// Busy and a reclaim decide on one atomic word, without the lock: a session
// is reclaimed only between calls, and a reclaimed one starts no call.
TEST(Admission, ASessionIsNeverReclaimedDuringACall) {
  for (int round = 0; round < 100; ++round) {
    Admission a(Limits(2, 100));
    std::atomic<bool> in_call{false};
    std::atomic<bool> reclaimed_in_call{false};
    auto a1 = a.Admit("A", [&] { reclaimed_in_call = reclaimed_in_call || in_call.load(); });
    ASSERT_TRUE(a1.ok());
    a.HandshakeDone(*a1);
    std::vector<uint64_t> closed;
    const uint64_t a2 = Session(a, "A", &closed);
    ASSERT_TRUE(Busy(a, a2));  // busy throughout: a1 is the only possible victim
    Admission::Slot* slot = a.Find(*a1);
    std::thread calls([&] {
      while (a.Busy(*slot)) {  // calls in a loop until reclaimed
        in_call = true;
        in_call = false;
        a.Idle(*slot);
      }
    });
    // B (1) takes a slot from A (2) once a1 is between calls.
    Result<uint64_t> b1 = a.Admit("B", nullptr);
    while (!b1.ok()) b1 = a.Admit("B", nullptr);
    calls.join();  // it saw the reclaim
    EXPECT_FALSE(reclaimed_in_call.load());
    EXPECT_EQ(a.reclaimed(), 1u);
    EXPECT_TRUE(closed.empty());  // not a2, busy
  }
}

}  // namespace
}  // namespace naarpc::internal
