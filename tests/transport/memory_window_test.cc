// Memory windows (type 2) on both transports, as an HCA implements them:
// BIND_MW and LOCAL_INV work requests on the send queue, a new key per bind,
// and every remote write through a window key checked for the window's
// state, key, range and access; a write that fails is a remote access error
// at the writer, leaves the target memory untouched and breaks the
// connection. The emulated transport must be exactly this strict (it is
// what the engine's per-call windows are tested on); the verbs cases run in
// the Soft-RoCE guest. No timing: every wait is for a completion or a
// disconnect.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "naarpc/transport.h"
#include "tests/testing/test_transport.h"

namespace naarpc {
namespace {

using namespace std::chrono_literals;

constexpr auto kTimeout = 10s;
constexpr size_t kSize = 256;
constexpr uint8_t kHostByte = 0x11, kPeerByte = 0xab;

class MemoryWindowTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    testing::TestTransport t = testing::MakeTestTransport(GetParam());
    if (!t.unavailable.empty()) GTEST_SKIP() << t.unavailable;
    transport_ = std::move(t.transport);
    Status s = testing::ConnectPair(*transport_, t.address, Deadline::After(kTimeout), &listener_,
                                    &host_, &peer_);
    ASSERT_TRUE(s.ok()) << s.ToString();
    if (!host_->supports_memory_windows()) {
      GTEST_SKIP() << "the device reports no type-2 memory windows";
    }
    // The host's region: writable by the peer only through a window.
    host_mem_.assign(kSize, kHostByte);
    auto mr = host_->RegisterMemory(host_mem_.data(), kSize, kAccessLocalWrite | kAccessMwBind);
    ASSERT_TRUE(mr.ok()) << mr.status().ToString();
    host_mr_ = std::move(mr).value();
    peer_mem_.assign(kSize, kPeerByte);
    auto pmr = peer_->RegisterMemory(peer_mem_.data(), kSize, kAccessLocalWrite);
    ASSERT_TRUE(pmr.ok()) << pmr.status().ToString();
    peer_mr_ = std::move(pmr).value();
    auto w = host_->AllocateWindow();
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    window_ = std::move(w).value();
  }

  uint64_t host_addr(size_t off = 0) const {
    return reinterpret_cast<uintptr_t>(host_mem_.data()) + off;
  }

  // Posts `r` on the host and waits for its completion (signaled).
  CompletionStatus HostLocal(SendRequest r) {
    r.signaled = true;
    Status s = host_->PostSend(std::span<const SendRequest>(&r, 1));
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!s.ok()) return CompletionStatus::kGeneralError;
    Completion c[4];
    const Deadline end = Deadline::After(kTimeout);
    while (!end.expired()) {
      auto n = host_->PollCompletions(c, end);
      if (!n.ok()) break;
      for (size_t i = 0; i < *n; ++i) {
        if (c[i].wr_id == r.wr_id) {
          EXPECT_EQ(c[i].opcode, r.opcode);
          return c[i].status;
        }
      }
    }
    ADD_FAILURE() << "no completion for host wr_id " << r.wr_id;
    return CompletionStatus::kGeneralError;
  }

  uint32_t Bind(uint64_t off, uint32_t len, uint32_t access = kAccessRemoteWrite,
                CompletionStatus* status = nullptr) {
    SendRequest r;
    r.wr_id = ++wr_id_;
    r.opcode = WorkOpcode::kBindWindow;
    r.window = window_.get();
    r.window_region = host_mr_.get();
    r.local = {host_addr(off), len, host_mr_->lkey()};
    r.window_access = access;
    CompletionStatus st = HostLocal(r);
    if (status != nullptr) {
      *status = st;
    } else {
      EXPECT_EQ(st, CompletionStatus::kSuccess) << CompletionStatusName(st);
    }
    return window_->rkey();
  }

  CompletionStatus Invalidate(uint32_t rkey) {
    SendRequest r;
    r.wr_id = ++wr_id_;
    r.opcode = WorkOpcode::kLocalInvalidate;
    r.rkey = rkey;
    return HostLocal(r);
  }

  // A signaled RDMA WRITE of `len` peer bytes to host address `addr`; the
  // host keeps polling meanwhile (an emulated target moves only when called).
  CompletionStatus PeerWrite(uint64_t addr, uint32_t rkey, uint32_t len = 64) {
    SendRequest r;
    r.wr_id = ++wr_id_;
    r.opcode = WorkOpcode::kRdmaWrite;
    r.local = {reinterpret_cast<uintptr_t>(peer_mem_.data()), len, peer_mr_->lkey()};
    r.remote_addr = addr;
    r.rkey = rkey;
    Status s = peer_->PostSend(std::span<const SendRequest>(&r, 1));
    EXPECT_TRUE(s.ok()) << s.ToString();
    const Deadline end = Deadline::After(kTimeout);
    Completion c[4];
    while (!end.expired()) {
      if (host_up_) {
        auto h = host_->TryPollCompletions(c);
        if (!h.ok()) host_up_ = false;
      }
      auto n = peer_->PollCompletions(c, Deadline::After(1ms));
      if (!n.ok()) return CompletionStatus::kFlushed;
      for (size_t i = 0; i < *n; ++i) {
        if (c[i].wr_id == r.wr_id) return c[i].status;
      }
    }
    ADD_FAILURE() << "no completion for the peer's write";
    return CompletionStatus::kGeneralError;
  }

  bool HostUntouched() const {
    for (uint8_t b : host_mem_) {
      if (b != kHostByte) return false;
    }
    return true;
  }

  // After a remote access error both sides see the connection down.
  void ExpectBothDown() {
    Completion c[8];
    const Deadline end = Deadline::After(kTimeout);
    peer_->Disconnect().IgnoreError();  // verbs: the writer's QP is in error; tell the host
    for (;;) {
      ASSERT_FALSE(end.expired()) << "the host never saw the connection go down";
      auto n = host_->PollCompletions(c, Deadline::After(10ms));
      if (!n.ok()) {
        EXPECT_EQ(n.status().code(), StatusCode::kDisconnected) << n.status().ToString();
        break;
      }
    }
    SendRequest r;
    r.opcode = WorkOpcode::kRdmaWrite;
    EXPECT_FALSE(peer_->PostSend(std::span<const SendRequest>(&r, 1)).ok());
  }

  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Listener> listener_;
  std::unique_ptr<Connection> host_, peer_;
  std::vector<uint8_t> host_mem_, peer_mem_;
  std::unique_ptr<MemoryRegion> host_mr_, peer_mr_;
  std::unique_ptr<MemoryWindow> window_;
  uint64_t wr_id_ = 100;
  bool host_up_ = true;
};

TEST_P(MemoryWindowTest, RegionWithoutRemoteWriteRefusesItsOwnKey) {
  EXPECT_EQ(PeerWrite(host_addr(), host_mr_->rkey()), CompletionStatus::kRemoteAccessError);
  EXPECT_TRUE(HostUntouched());
  ExpectBothDown();
}

TEST_P(MemoryWindowTest, UnboundWindowKeyFails) {
  EXPECT_EQ(PeerWrite(host_addr(), window_->rkey()), CompletionStatus::kRemoteAccessError);
  EXPECT_TRUE(HostUntouched());
  ExpectBothDown();
}

TEST_P(MemoryWindowTest, BoundWindowLetsTheWriteLand) {
  const uint32_t k = Bind(0, kSize);
  ASSERT_EQ(PeerWrite(host_addr(16), k, 64), CompletionStatus::kSuccess);
  for (size_t i = 0; i < kSize; ++i) {
    const bool written = i >= 16 && i < 80;
    ASSERT_EQ(host_mem_[i], written ? kPeerByte : kHostByte) << "byte " << i;
  }
  EXPECT_EQ(Invalidate(k), CompletionStatus::kSuccess);
}

TEST_P(MemoryWindowTest, InvalidatedKeyFailsAndMemoryIsUnchanged) {
  const uint32_t k = Bind(0, kSize);
  ASSERT_EQ(PeerWrite(host_addr(), k), CompletionStatus::kSuccess);
  ASSERT_EQ(Invalidate(k), CompletionStatus::kSuccess);
  std::memset(host_mem_.data(), kHostByte, kSize);
  // "Between calls": the closed window writes nothing.
  EXPECT_EQ(PeerWrite(host_addr(), k), CompletionStatus::kRemoteAccessError);
  EXPECT_TRUE(HostUntouched());
  ExpectBothDown();
}

TEST_P(MemoryWindowTest, RebindGivesANewKeyAndTheOldOneFails) {
  const uint32_t k1 = Bind(0, kSize);
  ASSERT_EQ(Invalidate(k1), CompletionStatus::kSuccess);
  const uint32_t k2 = Bind(0, kSize);
  EXPECT_NE(k1, k2);
  EXPECT_EQ(k1 >> 8, k2 >> 8) << "the same window: only the key byte changes";
  EXPECT_EQ((k1 + 1) & 0xff, k2 & 0xff);
  EXPECT_EQ(PeerWrite(host_addr(), k1), CompletionStatus::kRemoteAccessError);
  EXPECT_TRUE(HostUntouched());
  ExpectBothDown();
}

TEST_P(MemoryWindowTest, ManyCallsRebindAndEveryCurrentKeyWorks) {
  uint32_t prev = window_->rkey();
  for (int call = 0; call < 300; ++call) {  // past the 8-bit key's wrap
    const uint32_t k = Bind(0, kSize);
    ASSERT_NE(k, prev) << "call " << call;
    ASSERT_EQ(PeerWrite(host_addr(), k, 8), CompletionStatus::kSuccess) << "call " << call;
    ASSERT_EQ(Invalidate(k), CompletionStatus::kSuccess) << "call " << call;
    prev = k;
  }
}

TEST_P(MemoryWindowTest, WriteOutsideTheWindowsRangeFails) {
  if (GetParam() == "verbs") {
    GTEST_SKIP() << "rdma_rxe checks the window's key and state but only its MR's bounds "
                    "(docs/protocol.md 16.4); an HCA refuses this write";
  }
  const uint32_t k = Bind(128, 64);
  EXPECT_EQ(PeerWrite(host_addr(64), k, 64), CompletionStatus::kRemoteAccessError);
  EXPECT_TRUE(HostUntouched());
  ExpectBothDown();
}

TEST_P(MemoryWindowTest, WriteStraddlingTheWindowsEndFails) {
  if (GetParam() == "verbs") {
    GTEST_SKIP() << "rdma_rxe checks only the MR's bounds (docs/protocol.md 16.4)";
  }
  const uint32_t k = Bind(0, 64);
  EXPECT_EQ(PeerWrite(host_addr(32), k, 64), CompletionStatus::kRemoteAccessError);
  EXPECT_TRUE(HostUntouched());
  ExpectBothDown();
}

TEST_P(MemoryWindowTest, ReadOnlyWindowRefusesWrites) {
  const uint32_t k = Bind(0, kSize, kAccessRemoteRead);
  EXPECT_EQ(PeerWrite(host_addr(), k), CompletionStatus::kRemoteAccessError);
  EXPECT_TRUE(HostUntouched());
  ExpectBothDown();
}

TEST_P(MemoryWindowTest, BindingABoundWindowIsRefused) {
  Bind(0, kSize);
  CompletionStatus st;
  Bind(0, kSize, kAccessRemoteWrite, &st);
  EXPECT_NE(st, CompletionStatus::kSuccess) << "a type-2 window binds only when free";
}

TEST_P(MemoryWindowTest, BindOverARegionWithoutMwBindIsRefused) {
  std::vector<uint8_t> other(kSize, kHostByte);
  auto mr = host_->RegisterMemory(other.data(), kSize, kAccessLocalWrite);
  ASSERT_TRUE(mr.ok());
  host_mr_ = std::move(mr).value();
  host_mem_.swap(other);
  CompletionStatus st;
  Bind(0, kSize, kAccessRemoteWrite, &st);
  EXPECT_NE(st, CompletionStatus::kSuccess);
  host_mem_.swap(other);
}

TEST_P(MemoryWindowTest, DeallocatedWindowKeyFails) {
  const uint32_t k = Bind(0, kSize);
  window_.reset();
  EXPECT_EQ(PeerWrite(host_addr(), k), CompletionStatus::kRemoteAccessError);
  EXPECT_TRUE(HostUntouched());
  ExpectBothDown();
}

// Local work requests complete in posting order with their wr_ids, among
// the writes around them.
TEST_P(MemoryWindowTest, LocalRequestsCompleteInOrderWithTheirWrIds) {
  std::vector<uint8_t> dst(kSize, 0);
  auto dmr = peer_->RegisterMemory(dst.data(), kSize, kAccessLocalWrite | kAccessRemoteWrite);
  ASSERT_TRUE(dmr.ok());
  std::vector<uint8_t> src(kSize, 7);
  auto smr = host_->RegisterMemory(src.data(), kSize, 0);
  ASSERT_TRUE(smr.ok());
  SendRequest rs[4];
  rs[0].wr_id = 1;
  rs[0].opcode = WorkOpcode::kBindWindow;
  rs[0].window = window_.get();
  rs[0].window_region = host_mr_.get();
  rs[0].local = {host_addr(), kSize, host_mr_->lkey()};
  rs[0].window_access = kAccessRemoteWrite;
  rs[1].wr_id = 2;
  rs[1].opcode = WorkOpcode::kRdmaWrite;
  rs[1].local = {reinterpret_cast<uintptr_t>(src.data()), 64, (*smr)->lkey()};
  rs[1].remote_addr = reinterpret_cast<uintptr_t>(dst.data());
  rs[1].rkey = (*dmr)->rkey();
  ASSERT_TRUE(host_->PostSend(std::span<const SendRequest>(rs, 2)).ok());
  rs[2].wr_id = 3;
  rs[2].opcode = WorkOpcode::kLocalInvalidate;
  rs[2].rkey = window_->rkey();  // the key the bind just posted gave it
  rs[3] = rs[1];
  rs[3].wr_id = 4;
  ASSERT_TRUE(host_->PostSend(std::span<const SendRequest>(rs + 2, 2)).ok());
  std::vector<Completion> got;
  const Deadline end = Deadline::After(kTimeout);
  while (got.size() < 4 && !end.expired()) {
    Completion c[4];
    auto p = peer_->TryPollCompletions(c);  // the target acknowledges
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    auto n = host_->PollCompletions(c, Deadline::After(1ms));
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    got.insert(got.end(), c, c + *n);
  }
  ASSERT_EQ(got.size(), 4u);
  const WorkOpcode ops[4] = {WorkOpcode::kBindWindow, WorkOpcode::kRdmaWrite,
                             WorkOpcode::kLocalInvalidate, WorkOpcode::kRdmaWrite};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(got[i].wr_id, i + 1);
    EXPECT_EQ(got[i].opcode, ops[i]);
    EXPECT_EQ(got[i].status, CompletionStatus::kSuccess) << CompletionStatusName(got[i].status);
  }
  // Closed again: the key of that bind writes nothing.
  EXPECT_EQ(PeerWrite(host_addr(), rs[2].rkey), CompletionStatus::kRemoteAccessError);
  EXPECT_TRUE(HostUntouched());
}

// An invalidate racing a large incoming write through its window. The
// emulated transport orders them whole: the write lands completely (the
// invalidate waits for it) or fails completely (memory untouched). On a
// device the packets after the invalidate fail, so a failed write may have
// placed a prefix; a successful one has placed everything on both.
TEST_P(MemoryWindowTest, InvalidateRacingAWriteInFlight) {
  constexpr size_t kBig = 8 << 20;
  std::vector<uint8_t> big(kBig, kHostByte), src(kBig, kPeerByte);
  auto bmr = host_->RegisterMemory(big.data(), kBig, kAccessLocalWrite | kAccessMwBind);
  ASSERT_TRUE(bmr.ok()) << bmr.status().ToString();
  auto smr = peer_->RegisterMemory(src.data(), kBig, 0);
  ASSERT_TRUE(smr.ok()) << smr.status().ToString();
  SendRequest bind;
  bind.wr_id = 1;
  bind.opcode = WorkOpcode::kBindWindow;
  bind.window = window_.get();
  bind.window_region = bmr->get();
  bind.local = {reinterpret_cast<uintptr_t>(big.data()), uint32_t(kBig), (*bmr)->lkey()};
  bind.window_access = kAccessRemoteWrite;
  ASSERT_EQ(HostLocal(bind), CompletionStatus::kSuccess);
  const uint32_t key = window_->rkey();
  SendRequest w;
  w.wr_id = 2;
  w.opcode = WorkOpcode::kRdmaWrite;
  w.local = {reinterpret_cast<uintptr_t>(src.data()), uint32_t(kBig), (*smr)->lkey()};
  w.remote_addr = reinterpret_cast<uintptr_t>(big.data());
  w.rkey = key;
  ASSERT_TRUE(peer_->PostSend(std::span<const SendRequest>(&w, 1)).ok());
  SendRequest inv;
  inv.wr_id = 3;
  inv.opcode = WorkOpcode::kLocalInvalidate;
  inv.rkey = key;
  ASSERT_TRUE(host_->PostSend(std::span<const SendRequest>(&inv, 1)).ok());
  std::optional<CompletionStatus> wrote, invalidated;
  bool peer_down = false, host_down = false;
  const Deadline end = Deadline::After(kTimeout);
  while ((!wrote && !peer_down) || (!invalidated && !host_down)) {
    ASSERT_FALSE(end.expired()) << "completions missing";
    Completion c[4];
    if (!host_down) {
      auto n = host_->PollCompletions(c, Deadline::After(1ms));
      if (!n.ok()) host_down = true;
      for (size_t i = 0; n.ok() && i < *n; ++i) {
        if (c[i].wr_id == 3) invalidated = c[i].status;
      }
    }
    if (!peer_down) {
      auto n = peer_->PollCompletions(c, Deadline::After(1ms));
      if (!n.ok()) peer_down = true;
      for (size_t i = 0; n.ok() && i < *n; ++i) {
        if (c[i].wr_id == 2) wrote = c[i].status;
      }
    }
  }
  ASSERT_TRUE(wrote.has_value());
  const size_t landed = size_t(std::count(big.begin(), big.end(), kPeerByte));
  if (*wrote == CompletionStatus::kSuccess) {
    EXPECT_EQ(landed, kBig) << "a successful write landed whole";
    ASSERT_TRUE(invalidated.has_value());
    EXPECT_EQ(*invalidated, CompletionStatus::kSuccess);
  } else {
    EXPECT_EQ(*wrote, CompletionStatus::kRemoteAccessError) << CompletionStatusName(*wrote);
    if (GetParam() == "emulated") {
      EXPECT_EQ(landed, 0u) << "a failed write placed nothing";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, MemoryWindowTest, ::testing::Values("emulated", "verbs"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace naarpc
