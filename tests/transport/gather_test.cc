// Gather lists (SendRequest::sg_list, docs/protocol.md 16) on both transports
// (the verbs cases skip without an RDMA device and run in the Soft-RoCE
// guest): a strided layout sent zero-copy from registered memory as chained
// RDMA WRITEs of at most max_send_sge entries lands packed at the target;
// a longer list is refused; a bad entry fails the request like a bad
// `local` and writes nothing.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "naarpc/strided_view.h"
#include "naarpc/transport.h"
#include "runtime/engine/gather_writes.h"
#include "tests/testing/test_transport.h"

namespace naarpc {
namespace {

using namespace std::chrono_literals;

// Hang guard only: completions are on their way; it never times anything.
constexpr auto kTimeout = 60s;

class GatherTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    testing::TestTransport t = testing::MakeTestTransport(GetParam());
    if (!t.unavailable.empty()) GTEST_SKIP() << t.unavailable;
    transport_ = std::move(t.transport);
    Status s = testing::ConnectPair(*transport_, t.address, Deadline::After(kTimeout), &listener_,
                                    &sender_, &target_);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  void TearDown() override { StopTarget(); }

  // The target's owner: the emulated transport moves data only while its
  // connection is driven (an HCA needs no help). Started once the test has
  // registered its memory (a connection is used by one thread at a time).
  void StartTarget() {
    target_thread_ = std::thread([this] {
      Completion c[4];
      while (!stop_.load()) {
        if (!target_->PollCompletions(c, Deadline::After(20ms)).ok()) return;
      }
    });
  }
  void StopTarget() {
    stop_.store(true);
    if (target_thread_.joinable()) target_thread_.join();
  }

  // The next completion on the sender (a send's).
  Completion Next() {
    Completion c[1];
    Result<size_t> n = sender_->PollCompletions(c, Deadline::After(kTimeout));
    EXPECT_TRUE(n.ok() && *n == 1) << (n.ok() ? "none" : n.status().ToString());
    return c[0];
  }

  // Posts `plan` at most `batch` requests at a time (each batch ends with a
  // signaled one), waiting for each batch's last completion.
  void PostAll(GatherWrites& plan, size_t batch) {
    for (size_t i = 0; i < plan.requests.size(); i += batch) {
      const size_t n = std::min(batch, plan.requests.size() - i);
      ASSERT_TRUE(sender_->PostSend(std::span(plan.requests).subspan(i, n)).ok());
      const Completion c = Next();
      ASSERT_EQ(c.status, CompletionStatus::kSuccess) << CompletionStatusName(c.status);
      ASSERT_EQ(c.wr_id, plan.requests[i + n - 1].wr_id);
    }
  }

  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Listener> listener_;
  std::unique_ptr<Connection> sender_, target_;
  std::thread target_thread_;
  std::atomic<bool> stop_{false};
};

TEST_P(GatherTest, MatrixColumnLandsPackedThroughChainedWrites) {
  // Column 3 of a 512 x 64 f64 matrix: 512 runs of 8 bytes.
  constexpr size_t kRows = 512, kCols = 64;
  std::vector<double> matrix(kRows * kCols);
  for (size_t i = 0; i < matrix.size(); ++i) matrix[i] = double(i);
  std::vector<double> packed(kRows, -1);
  auto src = sender_->RegisterMemory(matrix.data(), matrix.size() * 8, kAccessLocalWrite);
  auto dst = target_->RegisterMemory(packed.data(), packed.size() * 8,
                                     kAccessLocalWrite | kAccessRemoteWrite);
  ASSERT_TRUE(src.ok() && dst.ok());
  StartTarget();
  const uint32_t max_sge = sender_->max_send_sge();
  ASSERT_GE(max_sge, 2u) << "gather lists need max_send_sge > 1";
  GatherWrites plan;
  const uint64_t base = reinterpret_cast<uintptr_t>(matrix.data());
  ASSERT_TRUE(PlanGatherWrites(Layout::Strided(kRows, 1, kCols, 3), 8, {&base, 1}, (*src)->lkey(),
                               {.remote_addr = (*dst)->remote_addr(), .rkey = (*dst)->rkey(),
                                .first_wr_id = 100, .signal_every = 16},
                               max_sge, &plan)
                  .ok());
  EXPECT_EQ(plan.sges.size(), kRows);
  EXPECT_EQ(plan.requests.size(), (kRows + max_sge - 1) / max_sge);
  EXPECT_EQ(plan.bytes, kRows * 8);
  PostAll(plan, 16);
  for (size_t r = 0; r < kRows; ++r) ASSERT_EQ(packed[r], double(r * kCols + 3)) << r;
}

TEST_P(GatherTest, HaloFaceRunsOfSeveralElements) {
  // The y = 0 face of a 16^3 block of u32: 16 runs of 16 elements.
  std::vector<uint32_t> block(16 * 16 * 16);
  for (size_t i = 0; i < block.size(); ++i) block[i] = uint32_t(i);
  std::vector<uint32_t> face(256, 0);
  auto src = sender_->RegisterMemory(block.data(), block.size() * 4, kAccessLocalWrite);
  auto dst = target_->RegisterMemory(face.data(), face.size() * 4,
                                     kAccessLocalWrite | kAccessRemoteWrite);
  ASSERT_TRUE(src.ok() && dst.ok());
  StartTarget();
  const Layout l = Layout::SubArray({16, 16, 16}, {16, 1, 16}, {0, 0, 0});
  GatherWrites plan;
  const uint64_t base = reinterpret_cast<uintptr_t>(block.data());
  ASSERT_TRUE(PlanGatherWrites(l, 4, {&base, 1}, (*src)->lkey(),
                               {.remote_addr = (*dst)->remote_addr(), .rkey = (*dst)->rkey()},
                               sender_->max_send_sge(), &plan)
                  .ok());
  EXPECT_EQ(plan.sges.size(), 16u);
  PostAll(plan, plan.requests.size());
  std::vector<uint32_t> want(256);
  StridedView<const uint32_t>(std::span<const uint32_t>(block), l).GatherTo(want);
  EXPECT_EQ(face, want);
}

TEST_P(GatherTest, MoreEntriesThanMaxSendSgeAreRefused) {
  std::vector<uint8_t> src_mem(4096, 1), dst_mem(4096, 0);
  auto src = sender_->RegisterMemory(src_mem.data(), src_mem.size(), kAccessLocalWrite);
  auto dst = target_->RegisterMemory(dst_mem.data(), dst_mem.size(),
                                     kAccessLocalWrite | kAccessRemoteWrite);
  ASSERT_TRUE(src.ok() && dst.ok());
  StartTarget();
  std::vector<LocalBuffer> sges(sender_->max_send_sge() + 1);
  for (size_t i = 0; i < sges.size(); ++i) sges[i] = {(*src)->remote_addr() + i * 2, 1, (*src)->lkey()};
  SendRequest r;
  r.wr_id = 7;
  r.opcode = WorkOpcode::kRdmaWrite;
  r.sg_list = sges;
  r.remote_addr = (*dst)->remote_addr();
  r.rkey = (*dst)->rkey();
  const Status st = sender_->PostSend({&r, 1});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("max_send_sge"), std::string::npos) << st.message();
  // The same list cut to max_send_sge entries goes through.
  r.sg_list = std::span<const LocalBuffer>(sges).first(sender_->max_send_sge());
  ASSERT_TRUE(sender_->PostSend({&r, 1}).ok());
  const Completion c = Next();
  EXPECT_EQ(c.status, CompletionStatus::kSuccess);
  EXPECT_EQ(dst_mem[0], 1);
}

TEST_P(GatherTest, ABadEntryFailsTheRequestAndWritesNothing) {
  std::vector<uint8_t> src_mem(256, 9), other(256, 9), dst_mem(256, 0);
  auto src = sender_->RegisterMemory(src_mem.data(), src_mem.size(), kAccessLocalWrite);
  auto dst = target_->RegisterMemory(dst_mem.data(), dst_mem.size(),
                                     kAccessLocalWrite | kAccessRemoteWrite);
  ASSERT_TRUE(src.ok() && dst.ok());
  StartTarget();
  // The second entry names unregistered memory under the first's lkey.
  const LocalBuffer sges[2] = {{(*src)->remote_addr(), 16, (*src)->lkey()},
                               {reinterpret_cast<uintptr_t>(other.data()), 16, (*src)->lkey()}};
  SendRequest r;
  r.wr_id = 9;
  r.opcode = WorkOpcode::kRdmaWrite;
  r.sg_list = sges;
  r.remote_addr = (*dst)->remote_addr();
  r.rkey = (*dst)->rkey();
  ASSERT_TRUE(sender_->PostSend({&r, 1}).ok());
  const Completion c = Next();
  EXPECT_EQ(c.wr_id, 9u);
  EXPECT_EQ(c.status, CompletionStatus::kLocalProtectionError) << CompletionStatusName(c.status);
  for (uint8_t b : dst_mem) ASSERT_EQ(b, 0);
}

INSTANTIATE_TEST_SUITE_P(Transports, GatherTest, ::testing::Values("emulated", "verbs"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace naarpc
