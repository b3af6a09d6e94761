// Verbs transport tests: a peer that disconnects or goes away (flushes,
// kDisconnected, transfers in flight) and memory regions that outlive their
// connection.
// They need an RDMA device and skip without one;
// //tools/rxe-vm:verbs_in_guest_test runs them over Soft-RoCE (what both
// transports share is //tests/transport:connection_test).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "runtime/transport_impl/verbs/verbs_test_util.h"
#include "runtime/transport_impl/verbs/verbs_transport.h"

namespace naarpc {
namespace {

using namespace std::chrono_literals;
using namespace naarpc::verbs_testing;

TEST_F(VerbsTest, PeerDisconnectFlushesThenReportsDisconnected) {
  std::vector<uint8_t> smem(64);
  auto smr = Register(*server_, smem, kAccessLocalWrite);
  ASSERT_TRUE(smr);
  ASSERT_OK(server_->PostRecv(30, Buf(*smr, 0, 64)));
  ASSERT_OK(client_->Disconnect());
  ASSERT_OK(client_->Disconnect());  // idempotent
  // The peer's disconnect ends both waits: the flushed receive, then
  // kDisconnected. Their deadlines are hang guards (reaching one returns 0
  // completions, which fails the test).
  Completion c;
  auto r = server_->PollCompletions({&c, 1}, Deadline::After(kHangGuard));
  ASSERT_OK(r.status());
  ASSERT_EQ(*r, 1u);
  EXPECT_EQ(c.wr_id, 30u);
  EXPECT_EQ(c.status, CompletionStatus::kFlushed) << CompletionStatusName(c.status);
  r = server_->PollCompletions({&c, 1}, Deadline::After(kHangGuard));
  EXPECT_EQ(r.status().code(), StatusCode::kDisconnected) << r.status().ToString();
  // Posting on a dead connection fails; the local side also reports it.
  EXPECT_EQ(server_->PostRecv(31, Buf(*smr, 0, 64)).code(), StatusCode::kDisconnected);
  r = client_->PollCompletions({&c, 1}, Deadline::After(kHangGuard));
  EXPECT_EQ(r.status().code(), StatusCode::kDisconnected) << r.status().ToString();
}

// A multi-WR transfer in flight when the peer goes away: every work request
// completes (success or flushed), then kDisconnected.
TEST_F(VerbsTest, PeerGoneMidTransferCompletesEverything) {
  constexpr size_t kBig = 8 << 20;
  std::vector<uint8_t> smem(kBig), cmem(kBig), rx(64);
  auto smr = Register(*server_, smem, kAccessLocalWrite | kAccessRemoteWrite);
  auto cmr = Register(*client_, cmem, kAccessLocalWrite);
  auto rxmr = Register(*client_, rx, kAccessLocalWrite);
  ASSERT_TRUE(smr && cmr && rxmr);
  ASSERT_OK(client_->PostRecv(9, Buf(*rxmr, 0, 64)));
  std::vector<SendRequest> reqs;
  for (uint64_t i = 0; i < 8; ++i) {
    reqs.push_back(Req(i, WorkOpcode::kRdmaWrite, Buf(*cmr, i << 20, 1 << 20),
                       smr->remote_addr() + (i << 20), smr->rkey()));
  }
  ASSERT_OK(client_->PostSend(reqs));
  server_.reset();
  std::vector<Completion> got;
  Completion c;
  StatusCode code = StatusCode::kOk;
  // The peer going away ends every wait (the deadline is a hang guard).
  for (;;) {
    auto r = client_->PollCompletions({&c, 1}, Deadline::After(kHangGuard));
    if (!r.ok()) {
      code = r.status().code();
      break;
    }
    ASSERT_EQ(*r, 1u) << "deadline";
    got.push_back(c);
  }
  EXPECT_EQ(code, StatusCode::kDisconnected);
  ASSERT_EQ(got.size(), 9u);
  size_t next_send = 0;
  for (auto& x : got) {
    if (x.opcode == WorkOpcode::kRecv) {
      EXPECT_EQ(x.wr_id, 9u);
      EXPECT_EQ(x.status, CompletionStatus::kFlushed);
    } else {
      EXPECT_EQ(x.wr_id, next_send++);  // in order
      EXPECT_TRUE(x.status == CompletionStatus::kSuccess ||
                  x.status == CompletionStatus::kFlushed)
          << CompletionStatusName(x.status);
    }
  }
}

TEST_F(VerbsTest, PeerDestroyedReportsDisconnected) {
  client_.reset();
  Completion c;
  // The deadline is a hang guard: reaching it returns OK with 0 completions.
  auto r = server_->PollCompletions({&c, 1}, Deadline::After(kHangGuard));
  EXPECT_EQ(r.status().code(), StatusCode::kDisconnected) << r.status().ToString();
}

TEST_F(VerbsTest, MemoryRegionMayOutliveConnection) {
  std::vector<uint8_t> mem(64);
  auto mr = Register(*client_, mem, kAccessLocalWrite);
  ASSERT_TRUE(mr);
  client_.reset();
  EXPECT_EQ(mr->length(), 64u);
  mr.reset();  // deregisters, then frees the PD (no leak, no EBUSY)
}

}  // namespace
}  // namespace naarpc
