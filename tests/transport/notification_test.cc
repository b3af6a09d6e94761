// Completion notification on both transports, as ibv_req_notify_cq defines
// it: an armed CQ raises one event for the next completion; armed
// solicited-only, only for a receive completion of a message that carried
// the solicited-event bit, or for an error completion. The emulated
// transport must match the HCA here: NAAICE peers arm solicited-only, so a
// missing bit has to fail a test without RDMA hardware too.
//
// No timing: "no event" is asserted once the sender's signaled completion
// proves the target has processed the message (its completion, and any
// event, precede the acknowledgement), by a wait whose deadline has passed.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "naarpc/transport.h"
#include "tests/testing/test_transport.h"

namespace naarpc {
namespace {

using namespace std::chrono_literals;

constexpr auto kTimeout = 10s;

Deadline Passed() { return Deadline::At(Deadline::Clock::now() - 1ms); }

struct Buf {
  std::vector<uint8_t> data;
  std::unique_ptr<MemoryRegion> mr;
  LocalBuffer local(uint32_t len) const {
    return {reinterpret_cast<uintptr_t>(data.data()), len, mr->lkey()};
  }
};

class NotificationTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    testing::TestTransport t = testing::MakeTestTransport(GetParam());
    if (!t.unavailable.empty()) GTEST_SKIP() << t.unavailable;
    transport_ = std::move(t.transport);
    address_ = t.address;
    auto l = transport_->Listen(address_, 0);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    listener_ = std::move(l).value();
    std::optional<Result<std::unique_ptr<Connection>>> accepted;
    std::thread th([&] { accepted.emplace(listener_->Accept(Deadline::After(kTimeout))); });
    auto c = transport_->Connect(address_, listener_->port(), Deadline::After(kTimeout));
    th.join();
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_TRUE(accepted->ok()) << accepted->status().ToString();
    sender_ = std::move(c).value();
    target_ = std::move(**accepted);
    // Target: a receive buffer and a writable region; sender: a source.
    target_buf_ = Reg(*target_, 64, kAccessLocalWrite | kAccessRemoteWrite);
    sender_buf_ = Reg(*sender_, 64, 0);
  }

  static Buf Reg(Connection& c, size_t n, uint32_t access) {
    Buf b;
    b.data.assign(n, 0x5a);
    auto mr = c.RegisterMemory(b.data.data(), n, access);
    EXPECT_TRUE(mr.ok()) << mr.status().ToString();
    if (mr.ok()) b.mr = std::move(mr).value();
    return b;
  }

  void PostTargetReceive(uint64_t wr_id) {
    ASSERT_TRUE(target_->PostRecv(wr_id, target_buf_.local(64)).ok());
  }

  // A signaled WRITE_WITH_IMM (or SEND) from the sender.
  void SenderPost(WorkOpcode op, uint64_t wr_id, bool solicited, uint32_t imm = 0) {
    SendRequest r;
    r.wr_id = wr_id;
    r.opcode = op;
    r.local = sender_buf_.local(8);
    if (op != WorkOpcode::kSend) {
      r.remote_addr = reinterpret_cast<uintptr_t>(target_buf_.data.data());
      r.rkey = target_buf_.mr->rkey();
    }
    r.imm_data = imm;
    r.solicited = solicited;
    Status s = sender_->PostSend(std::span<const SendRequest>(&r, 1));
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  // Waits for the sender's completion of `wr_id`, giving the target a
  // chance to make progress meanwhile (the emulated target only moves when
  // called). The target's waits here are never armed for the message under
  // test, so they cannot consume its event... unless it raised one: those
  // are counted in target_events_.
  void AwaitSenderCompletion(uint64_t wr_id) {
    const Deadline end = Deadline::After(kTimeout);
    for (;;) {
      ASSERT_FALSE(end.expired()) << "sender completion " << wr_id << " never came";
      auto ev = target_->WaitNotify(Deadline::After(1ms));
      ASSERT_TRUE(ev.ok()) << ev.status().ToString();
      target_events_ += *ev;
      Completion c[4];
      auto n = sender_->PollCompletions(c, Deadline::After(1ms));
      ASSERT_TRUE(n.ok()) << n.status().ToString();
      for (size_t i = 0; i < *n; ++i) {
        ASSERT_EQ(c[i].status, CompletionStatus::kSuccess) << CompletionStatusName(c[i].status);
        if (c[i].wr_id == wr_id) return;
      }
    }
  }

  std::vector<Completion> DrainTarget() {
    std::vector<Completion> got;
    Completion c[8];
    for (;;) {
      auto n = target_->TryPollCompletions(c);
      EXPECT_TRUE(n.ok()) << n.status().ToString();
      if (!n.ok() || *n == 0) return got;
      got.insert(got.end(), c, c + *n);
    }
  }

  std::string address_ = "127.0.0.1";
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Listener> listener_;
  std::unique_ptr<Connection> sender_, target_;
  Buf target_buf_, sender_buf_;
  int target_events_ = 0;
};

TEST_P(NotificationTest, SolicitedOnlyArmingSleepsThroughAnUnsolicitedMessage) {
  PostTargetReceive(1);
  ASSERT_TRUE(target_->RequestNotify(NotifyMode::kSolicitedOnly).ok());
  SenderPost(WorkOpcode::kRdmaWriteWithImm, 10, /*solicited=*/false, 0x81);
  AwaitSenderCompletion(10);
  if (HasFatalFailure()) return;
  // Landed and acknowledged, and nobody was woken.
  EXPECT_EQ(target_events_, 0);
  auto ev = target_->WaitNotify(Passed());
  ASSERT_TRUE(ev.ok());
  EXPECT_FALSE(*ev);
  std::vector<Completion> got = DrainTarget();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].opcode, WorkOpcode::kRecvRdmaWithImm);
  EXPECT_EQ(got[0].imm_data, 0x81u);
}

TEST_P(NotificationTest, SolicitedMessageRaisesOneEvent) {
  PostTargetReceive(1);
  PostTargetReceive(2);
  ASSERT_TRUE(target_->RequestNotify(NotifyMode::kSolicitedOnly).ok());
  SenderPost(WorkOpcode::kRdmaWriteWithImm, 10, /*solicited=*/true, 7);
  auto ev = target_->WaitNotify(Deadline::After(kTimeout));
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  EXPECT_TRUE(*ev);
  std::vector<Completion> got = DrainTarget();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 1u);
  EXPECT_EQ(got[0].imm_data, 7u);
  // One-shot: a second solicited message without re-arming raises nothing.
  SenderPost(WorkOpcode::kSend, 11, /*solicited=*/true);
  AwaitSenderCompletion(11);
  if (HasFatalFailure()) return;
  EXPECT_EQ(target_events_, 0);
  EXPECT_FALSE(*target_->WaitNotify(Passed()));
  got = DrainTarget();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].opcode, WorkOpcode::kRecv);
}

TEST_P(NotificationTest, CompletionsQueuedBeforeArmingRaiseNoEvent) {
  PostTargetReceive(1);
  SenderPost(WorkOpcode::kRdmaWriteWithImm, 10, /*solicited=*/true);
  AwaitSenderCompletion(10);  // unarmed meanwhile
  if (HasFatalFailure()) return;
  EXPECT_EQ(target_events_, 0);
  ASSERT_TRUE(target_->RequestNotify(NotifyMode::kNextCompletion).ok());
  EXPECT_FALSE(*target_->WaitNotify(Passed()));
  EXPECT_EQ(DrainTarget().size(), 1u);  // poll after arming finds it
}

TEST_P(NotificationTest, NextCompletionArmingWakesOnUnsolicitedAndOwnSends) {
  PostTargetReceive(1);
  ASSERT_TRUE(target_->RequestNotify(NotifyMode::kNextCompletion).ok());
  SenderPost(WorkOpcode::kRdmaWriteWithImm, 10, /*solicited=*/false);
  auto ev = target_->WaitNotify(Deadline::After(kTimeout));
  ASSERT_TRUE(ev.ok());
  EXPECT_TRUE(*ev);
  EXPECT_EQ(DrainTarget().size(), 1u);
  // The sender, armed for every completion, wakes on its own send.
  ASSERT_TRUE(sender_->RequestNotify(NotifyMode::kNextCompletion).ok());
  PostTargetReceive(2);
  SenderPost(WorkOpcode::kSend, 11, /*solicited=*/false);
  const Deadline deadline = Deadline::After(kTimeout);
  bool woke = false;
  std::vector<Completion> got;
  // The event may come with the WRITE_WITH_IMM's completion (armed while it
  // was still in flight) or with the SEND's: after it, poll until both are
  // there. The emulated target acknowledges only when called.
  while (got.size() < 2) {
    ASSERT_FALSE(deadline.expired()) << "woke: " << woke << ", completions: " << got.size();
    auto t = target_->WaitNotify(Deadline::After(1ms));
    ASSERT_TRUE(t.ok());
    if (!woke) {
      auto s = sender_->WaitNotify(Deadline::After(1ms));
      ASSERT_TRUE(s.ok());
      woke = *s;
      if (!woke) continue;
    }
    Completion c[4];
    auto n = sender_->TryPollCompletions(c);
    ASSERT_TRUE(n.ok());
    got.insert(got.end(), c, c + *n);
  }
  ASSERT_EQ(got.size(), 2u);  // the WRITE_WITH_IMM before, then the SEND
  EXPECT_EQ(got[0].wr_id, 10u);
  EXPECT_EQ(got[1].wr_id, 11u);
}

TEST_P(NotificationTest, ArmingKeepsTheWiderMode) {
  PostTargetReceive(1);
  ASSERT_TRUE(target_->RequestNotify(NotifyMode::kNextCompletion).ok());
  ASSERT_TRUE(target_->RequestNotify(NotifyMode::kSolicitedOnly).ok());
  SenderPost(WorkOpcode::kRdmaWriteWithImm, 10, /*solicited=*/false);
  auto ev = target_->WaitNotify(Deadline::After(kTimeout));
  ASSERT_TRUE(ev.ok());
  EXPECT_TRUE(*ev);
}

TEST_P(NotificationTest, ErrorCompletionWakesASolicitedOnlyWaiter) {
  PostTargetReceive(1);
  ASSERT_TRUE(target_->RequestNotify(NotifyMode::kSolicitedOnly).ok());
  ASSERT_TRUE(sender_->Disconnect().ok());
  // The flushed receive is an unsuccessful completion: it counts as solicited.
  auto ev = target_->WaitNotify(Deadline::After(kTimeout));
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  EXPECT_TRUE(*ev);
  Completion c[4];
  auto n = target_->TryPollCompletions(c);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  ASSERT_EQ(*n, 1u);
  EXPECT_EQ(c[0].status, CompletionStatus::kFlushed);
}

TEST_P(NotificationTest, SolicitedBitOnAPlainWriteIsRejected) {
  SendRequest r;
  r.wr_id = 1;
  r.opcode = WorkOpcode::kRdmaWrite;
  r.local = sender_buf_.local(8);
  r.remote_addr = reinterpret_cast<uintptr_t>(target_buf_.data.data());
  r.rkey = target_buf_.mr->rkey();
  r.solicited = true;
  Status s = sender_->PostSend(std::span<const SendRequest>(&r, 1));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
}

INSTANTIATE_TEST_SUITE_P(Transports, NotificationTest, ::testing::Values("emulated", "verbs"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace naarpc
