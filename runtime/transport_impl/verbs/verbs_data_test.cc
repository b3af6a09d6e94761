// Verbs transport tests: the data path (SEND/RECV, inline and large,
// zero-length, WRITE and WRITE_WITH_IMM, both directions, many messages in
// order, poll deadlines) and the errors it reports (remote access, local
// length, registration, opcodes).
// They need an RDMA device and skip without one;
// //tools/rxe-vm:verbs_in_guest_test runs them over Soft-RoCE (what both
// transports share is //tests/transport:connection_test).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "runtime/transport_impl/verbs/verbs_test_util.h"
#include "runtime/transport_impl/verbs/verbs_transport.h"

namespace naarpc {
namespace {

using namespace std::chrono_literals;
using namespace naarpc::verbs_testing;

TEST_F(VerbsTest, SendRecvInlineAndLarge) {
  std::vector<uint8_t> smem(8192), cmem(8192);
  auto smr = Register(*server_, smem, kAccessLocalWrite);
  auto cmr = Register(*client_, cmem, kAccessLocalWrite);
  ASSERT_TRUE(smr && cmr);
  EXPECT_GT(client_->max_inline_data(), 0u);
  ASSERT_OK(server_->PostRecv(100, Buf(*smr, 0, 4096)));
  ASSERT_OK(server_->PostRecv(101, Buf(*smr, 4096, 4096)));
  std::memcpy(cmem.data(), "hello", 5);
  for (size_t i = 0; i < 4096; ++i) cmem[4096 + i] = static_cast<uint8_t>(i * 7);
  SendRequest reqs[2];
  reqs[0].wr_id = 1;
  reqs[0].local = Buf(*cmr, 0, 5);  // inline
  reqs[1].wr_id = 2;
  reqs[1].local = Buf(*cmr, 4096, 4096);  // not inline
  ASSERT_OK(client_->PostSend(reqs));

  auto cc = PollN(*client_, 2);
  ASSERT_EQ(cc.size(), 2u);
  EXPECT_EQ(cc[0].wr_id, 1u);
  EXPECT_EQ(cc[1].wr_id, 2u);
  for (auto& c : cc) {
    EXPECT_EQ(c.status, CompletionStatus::kSuccess) << CompletionStatusName(c.status);
    EXPECT_EQ(c.opcode, WorkOpcode::kSend);
  }
  auto sc = PollN(*server_, 2);
  ASSERT_EQ(sc.size(), 2u);
  EXPECT_EQ(sc[0].wr_id, 100u);
  EXPECT_EQ(sc[0].opcode, WorkOpcode::kRecv);
  EXPECT_EQ(sc[0].status, CompletionStatus::kSuccess);
  EXPECT_EQ(sc[0].byte_len, 5u);
  EXPECT_FALSE(sc[0].has_imm);
  EXPECT_EQ(std::memcmp(smem.data(), "hello", 5), 0);
  EXPECT_EQ(sc[1].wr_id, 101u);
  EXPECT_EQ(sc[1].byte_len, 4096u);
  EXPECT_EQ(std::memcmp(smem.data() + 4096, cmem.data() + 4096, 4096), 0);
}

TEST_F(VerbsTest, ZeroLengthSend) {
  std::vector<uint8_t> smem(64);
  auto smr = Register(*server_, smem, kAccessLocalWrite);
  ASSERT_TRUE(smr);
  ASSERT_OK(server_->PostRecv(7, Buf(*smr, 0, 64)));
  SendRequest req;
  req.wr_id = 9;
  ASSERT_OK(client_->PostSend({&req, 1}));
  auto cc = PollN(*client_, 1);
  ASSERT_EQ(cc.size(), 1u);
  EXPECT_EQ(cc[0].status, CompletionStatus::kSuccess);
  auto sc = PollN(*server_, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].wr_id, 7u);
  EXPECT_EQ(sc[0].byte_len, 0u);
}

TEST_F(VerbsTest, WriteAndWriteWithImm) {
  std::vector<uint8_t> smem(4096, 0), cmem(4096);
  auto smr = Register(*server_, smem, kAccessLocalWrite | kAccessRemoteWrite);
  auto cmr = Register(*client_, cmem, kAccessLocalWrite);
  ASSERT_TRUE(smr && cmr);
  for (size_t i = 0; i < cmem.size(); ++i) cmem[i] = static_cast<uint8_t>(i ^ 0x5a);
  ASSERT_OK(server_->PostRecv(55, Buf(*smr, 0, 0)));  // consumed by the imm

  SendRequest reqs[3];
  reqs[0] = Req(10, WorkOpcode::kRdmaWrite, Buf(*cmr, 0, 1000), smr->remote_addr(), smr->rkey(), 0, false);
  reqs[1] = Req(11, WorkOpcode::kRdmaWrite, Buf(*cmr, 1000, 16), smr->remote_addr() + 1000, smr->rkey());
  reqs[2] = Req(12, WorkOpcode::kRdmaWriteWithImm, Buf(*cmr, 2000, 2000), smr->remote_addr() + 2000, smr->rkey(), 0xdeadbeef);
  ASSERT_OK(client_->PostSend(reqs));

  auto cc = PollN(*client_, 2);  // the unsignaled write completes silently
  ASSERT_EQ(cc.size(), 2u);
  EXPECT_EQ(cc[0].wr_id, 11u);
  EXPECT_EQ(cc[0].opcode, WorkOpcode::kRdmaWrite);
  EXPECT_EQ(cc[0].status, CompletionStatus::kSuccess);
  EXPECT_EQ(cc[1].wr_id, 12u);
  EXPECT_EQ(cc[1].opcode, WorkOpcode::kRdmaWriteWithImm);
  EXPECT_EQ(cc[1].status, CompletionStatus::kSuccess);

  auto sc = PollN(*server_, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].wr_id, 55u);
  EXPECT_EQ(sc[0].opcode, WorkOpcode::kRecvRdmaWithImm);
  EXPECT_EQ(sc[0].status, CompletionStatus::kSuccess);
  EXPECT_TRUE(sc[0].has_imm);
  EXPECT_EQ(sc[0].imm_data, 0xdeadbeefu);
  EXPECT_EQ(sc[0].byte_len, 2000u);
  EXPECT_EQ(std::memcmp(smem.data(), cmem.data(), 1016), 0);
  EXPECT_EQ(std::memcmp(smem.data() + 2000, cmem.data() + 2000, 2000), 0);
  EXPECT_EQ(smem[1500], 0);  // untouched gap

  // Nothing else is pending: a short poll times out with 0.
  Completion extra;
  auto r = server_->PollCompletions({&extra, 1}, Deadline::After(20ms));
  ASSERT_OK(r.status());
  EXPECT_EQ(*r, 0u);
}

// Own WRITE completions and the peer's WRITE_WITH_IMM interleave freely on
// one CQ; all are reported by wr_id.
TEST_F(VerbsTest, BothDirectionsAtOnce) {
  std::vector<uint8_t> smem(4096), cmem(4096);
  auto smr = Register(*server_, smem, kAccessLocalWrite | kAccessRemoteWrite);
  auto cmr = Register(*client_, cmem, kAccessLocalWrite | kAccessRemoteWrite);
  ASSERT_TRUE(smr && cmr);
  ASSERT_OK(client_->PostRecv(1, Buf(*cmr, 0, 0)));
  ASSERT_OK(server_->PostRecv(2, Buf(*smr, 0, 0)));
  SendRequest c2s = Req(3, WorkOpcode::kRdmaWriteWithImm, Buf(*cmr, 2048, 64), smr->remote_addr(), smr->rkey(), 0x11);
  SendRequest s2c = Req(4, WorkOpcode::kRdmaWriteWithImm, Buf(*smr, 2048, 64), cmr->remote_addr(), cmr->rkey(), 0x22);
  ASSERT_OK(client_->PostSend({&c2s, 1}));
  ASSERT_OK(server_->PostSend({&s2c, 1}));
  auto check = [](Connection& c, uint64_t own, uint64_t recv, uint32_t imm) {
    auto got = PollN(c, 2);
    ASSERT_EQ(got.size(), 2u);
    bool saw_own = false, saw_recv = false;
    for (auto& x : got) {
      EXPECT_EQ(x.status, CompletionStatus::kSuccess);
      if (x.wr_id == own) {
        saw_own = true;
        EXPECT_EQ(x.opcode, WorkOpcode::kRdmaWriteWithImm);
      } else if (x.wr_id == recv) {
        saw_recv = true;
        EXPECT_EQ(x.opcode, WorkOpcode::kRecvRdmaWithImm);
        EXPECT_EQ(x.imm_data, imm);
      }
    }
    EXPECT_TRUE(saw_own && saw_recv);
  };
  check(*client_, 3, 1, 0x22);
  check(*server_, 4, 2, 0x11);
}

TEST_F(VerbsTest, RemoteAccessErrorBadRkey) {
  std::vector<uint8_t> smem(256, 0xee), cmem(256, 1);
  auto smr = Register(*server_, smem, kAccessLocalWrite | kAccessRemoteWrite);
  auto cmr = Register(*client_, cmem, kAccessLocalWrite);
  ASSERT_TRUE(smr && cmr);
  SendRequest req = Req(5, WorkOpcode::kRdmaWrite, Buf(*cmr, 0, 128), smr->remote_addr(), smr->rkey() + 1);
  ASSERT_OK(client_->PostSend({&req, 1}));
  auto cc = PollN(*client_, 1);
  ASSERT_EQ(cc.size(), 1u);
  EXPECT_EQ(cc[0].wr_id, 5u);
  EXPECT_EQ(cc[0].status, CompletionStatus::kRemoteAccessError)
      << CompletionStatusName(cc[0].status);
  EXPECT_EQ(smem, std::vector<uint8_t>(256, 0xee));
}

TEST_F(VerbsTest, RemoteAccessErrorOutOfBounds) {
  std::vector<uint8_t> smem(256, 0xee), cmem(256, 1);
  auto smr = Register(*server_, smem, kAccessLocalWrite | kAccessRemoteWrite);
  auto cmr = Register(*client_, cmem, kAccessLocalWrite);
  ASSERT_TRUE(smr && cmr);
  SendRequest req = Req(6, WorkOpcode::kRdmaWriteWithImm, Buf(*cmr, 0, 128), smr->remote_addr() + 200, smr->rkey(), 1);
  ASSERT_OK(server_->PostRecv(1, Buf(*smr, 0, 0)));
  ASSERT_OK(client_->PostSend({&req, 1}));
  auto cc = PollN(*client_, 1);
  ASSERT_EQ(cc.size(), 1u);
  EXPECT_EQ(cc[0].status, CompletionStatus::kRemoteAccessError)
      << CompletionStatusName(cc[0].status);
  EXPECT_EQ(smem, std::vector<uint8_t>(256, 0xee));
}

TEST_F(VerbsTest, RemoteAccessErrorMissingRemoteWriteFlag) {
  std::vector<uint8_t> smem(256, 0xee), cmem(256, 1);
  auto smr = Register(*server_, smem, kAccessLocalWrite);  // exactly: no remote write
  auto cmr = Register(*client_, cmem, kAccessLocalWrite);
  ASSERT_TRUE(smr && cmr);
  SendRequest req = Req(7, WorkOpcode::kRdmaWrite, Buf(*cmr, 0, 128), smr->remote_addr(), smr->rkey());
  ASSERT_OK(client_->PostSend({&req, 1}));
  auto cc = PollN(*client_, 1);
  ASSERT_EQ(cc.size(), 1u);
  EXPECT_EQ(cc[0].status, CompletionStatus::kRemoteAccessError)
      << CompletionStatusName(cc[0].status);
  EXPECT_EQ(smem, std::vector<uint8_t>(256, 0xee));
}

TEST_F(VerbsTest, RegisterRemoteWriteWithoutLocalWriteIsRejected) {
  std::vector<uint8_t> mem(64);
  auto mr = client_->RegisterMemory(mem.data(), mem.size(), kAccessRemoteWrite);
  ASSERT_FALSE(mr.ok());
  EXPECT_EQ(mr.status().code(), StatusCode::kInvalidArgument) << mr.status().ToString();
}

TEST_F(VerbsTest, ReceiveTooSmallIsLocalLengthError) {
  std::vector<uint8_t> smem(64), cmem(256);
  auto smr = Register(*server_, smem, kAccessLocalWrite);
  auto cmr = Register(*client_, cmem, kAccessLocalWrite);
  ASSERT_TRUE(smr && cmr);
  ASSERT_OK(server_->PostRecv(20, Buf(*smr, 0, 16)));
  SendRequest req = Req(21, WorkOpcode::kSend, Buf(*cmr, 0, 200));
  ASSERT_OK(client_->PostSend({&req, 1}));
  auto sc = PollN(*server_, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].wr_id, 20u);
  EXPECT_EQ(sc[0].status, CompletionStatus::kLocalLengthError)
      << CompletionStatusName(sc[0].status);
  auto cc = PollN(*client_, 1);
  ASSERT_EQ(cc.size(), 1u);
  EXPECT_EQ(cc[0].wr_id, 21u);
  EXPECT_EQ(cc[0].status, CompletionStatus::kRemoteInvalidRequest)
      << CompletionStatusName(cc[0].status);
}

TEST_F(VerbsTest, PollRespectsDeadline) {
  // Nothing can arrive on this idle connection: only the deadline ends each
  // wait, with 0 completions, and never before it. A wait that ignored its
  // deadline would be ended by the hang guard's Disconnect, and fail. How
  // close to its deadline a wait returns is a performance figure (bench/).
  HangGuard guard([this] { client_->Disconnect().IgnoreError(); });
  Completion c;
  for (auto wait : {0ms, 30ms, 200ms}) {
    auto start = std::chrono::steady_clock::now();
    auto r = client_->PollCompletions({&c, 1}, Deadline::After(wait));
    auto took = std::chrono::steady_clock::now() - start;
    ASSERT_OK(r.status());
    EXPECT_EQ(*r, 0u);
    EXPECT_GE(took, wait);
  }
}

TEST_F(VerbsTest, PostSendRejectsReceiveOpcode) {
  SendRequest req = Req(1, WorkOpcode::kRecv);
  EXPECT_EQ(client_->PostSend({&req, 1}).code(), StatusCode::kInvalidArgument);
}

TEST_F(VerbsTest, ManyMessagesInOrder) {
  constexpr int kCount = 200;
  std::vector<uint8_t> smem(kCount * 8), cmem(kCount * 8);
  auto smr = Register(*server_, smem, kAccessLocalWrite);
  auto cmr = Register(*client_, cmem, kAccessLocalWrite);
  ASSERT_TRUE(smr && cmr);
  int posted_recv = 0, sent = 0, received = 0;
  auto post_recvs = [&] {
    while (posted_recv < kCount && posted_recv - received < 32) {
      ASSERT_OK(server_->PostRecv(1000 + posted_recv, Buf(*smr, posted_recv * 8, 8)));
      ++posted_recv;
    }
  };
  post_recvs();
  std::thread sender([&] {
    for (int i = 0; i < kCount; ++i) {
      std::memcpy(cmem.data() + i * 8, &i, sizeof(i));
      SendRequest req = Req(static_cast<uint64_t>(i), WorkOpcode::kSend, Buf(*cmr, i * 8, 8), 0, 0, 0, (i % 8 == 7) || i == kCount - 1);
      Status s = client_->PostSend({&req, 1});
      ASSERT_TRUE(s.ok()) << s.ToString();
      ++sent;
      if (req.signaled) {
        auto cc = PollN(*client_, 1, Deadline::After(20s));
        ASSERT_EQ(cc.size(), 1u);
        ASSERT_EQ(cc[0].wr_id, static_cast<uint64_t>(i));
        ASSERT_EQ(cc[0].status, CompletionStatus::kSuccess) << CompletionStatusName(cc[0].status);
      }
    }
  });
  while (received < kCount) {
    auto sc = PollN(*server_, 1, Deadline::After(20s));
    if (sc.size() != 1u) break;
    ASSERT_EQ(sc[0].status, CompletionStatus::kSuccess);
    ASSERT_EQ(sc[0].wr_id, static_cast<uint64_t>(1000 + received));
    int v;
    std::memcpy(&v, smem.data() + received * 8, sizeof(v));
    EXPECT_EQ(v, received);
    ++received;
    post_recvs();
  }
  sender.join();
  EXPECT_EQ(received, kCount);
}

}  // namespace
}  // namespace naarpc
