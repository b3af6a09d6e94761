// Verbs transport tests: predictive wake (VerbsOptions::predictive_wake)
// and its wait statistics.
// They need an RDMA device and skip without one;
// //tools/rxe-vm:verbs_in_guest_test runs them over Soft-RoCE (what both
// transports share is //tests/transport:connection_test).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "runtime/transport_impl/verbs/verbs_test_util.h"
#include "runtime/transport_impl/verbs/verbs_transport.h"

namespace naarpc {
namespace {

using namespace std::chrono_literals;
using namespace naarpc::verbs_testing;

// ---- predictive wake (VerbsOptions::predictive_wake) ------------------------

// Ping-pong with a peer that answers each message delays[i] after receiving it: the client
// SENDs, the server receives, sleeps, SENDs back. Returns false on a failure
// (reported through gtest). `client_wait` bounds each client wait. With
// `signaled_requests` false the client's SENDs complete silently, so its
// only completion per round is the reply: the wait that the predictor
// measures (the first sleep after a post) is then always the reply's.
bool PingPong(Connection& client, Connection& server, const std::vector<std::chrono::microseconds>& delays,
              std::chrono::milliseconds client_wait = std::chrono::milliseconds(10'000),
              bool signaled_requests = true) {
  std::vector<uint8_t> cmem(64), smem(64);
  auto cmr = client.RegisterMemory(cmem.data(), cmem.size(), kAccessLocalWrite);
  auto smr = server.RegisterMemory(smem.data(), smem.size(), kAccessLocalWrite);
  if (!cmr.ok() || !smr.ok()) {
    ADD_FAILURE() << "register: " << cmr.status().ToString() << " / " << smr.status().ToString();
    return false;
  }
  std::thread peer([&] {
    for (size_t i = 0; i < delays.size(); ++i) {
      if (!server.PostRecv(2 * i, Buf(**smr, 0, 32)).ok()) {
        ADD_FAILURE() << "server PostRecv";
        return;
      }
      auto got = PollN(server, 1, Deadline::After(20s));
      if (got.size() != 1u || got[0].status != CompletionStatus::kSuccess) return;
      // Busy-waits: a sleeping peer's own timer wake-up jitters by
      // milliseconds in a TCG guest, which would blur the pattern.
      for (auto until = std::chrono::steady_clock::now() + delays[i];
           std::chrono::steady_clock::now() < until;) {
      }
      SendRequest reply = Req(2 * i + 1, WorkOpcode::kSend, Buf(**smr, 32, 8));
      if (!server.PostSend({&reply, 1}).ok()) {
        ADD_FAILURE() << "server PostSend";
        return;
      }
      if (PollN(server, 1, Deadline::After(20s)).size() != 1u) return;
    }
  });
  bool ok = true;
  for (size_t i = 0; ok && i < delays.size(); ++i) {
    ok = client.PostRecv(1000 + i, Buf(**cmr, 32, 32)).ok();
    SendRequest req = Req(i, WorkOpcode::kSend, Buf(**cmr, 0, 8), 0, 0, 0, signaled_requests);
    ok = ok && client.PostSend({&req, 1}).ok();
    const size_t completions = signaled_requests ? 2 : 1;
    auto got = PollN(client, completions, Deadline::After(client_wait));
    ok = ok && got.size() == completions;
    for (const Completion& c : got) ok = ok && c.status == CompletionStatus::kSuccess;
  }
  peer.join();
  EXPECT_TRUE(ok) << "ping-pong failed";
  return ok;
}

TEST_F(VerbsTest, PredictiveWakeCatchesRegularRepliesAwake) {
  constexpr int kRounds = 30;
  ASSERT_TRUE(PingPong(*client_, *server_, std::vector<std::chrono::microseconds>(kRounds, 5ms)));
  auto stats = WaitStatsOf(*client_);
  ASSERT_TRUE(stats);
  const std::string counts = "sleeps " + std::to_string(stats->sleeps) + ", planned " +
                             std::to_string(stats->planned) + ", hits " + std::to_string(stats->planned_hits) +
                             ", early " + std::to_string(stats->planned_early) + ", misses " +
                             std::to_string(stats->planned_misses);
  std::printf("client waits: %s\n", counts.c_str());
  SCOPED_TRACE(counts);
  // Replies outlast the spin, so waits sleep; once two have been measured
  // the predictor plans waits (only sleeping ones), and every planned wait
  // ends one of three ways. How many sleep, and how many planned replies
  // find the client awake, are performance figures that depend on the
  // machine's load: verbs_bench reports them, this test does not assert them.
  EXPECT_GE(stats->sleeps, 2u);
  EXPECT_GE(stats->planned, 1u);
  EXPECT_LE(stats->planned, stats->sleeps);
  EXPECT_EQ(stats->planned, stats->planned_hits + stats->planned_early + stats->planned_misses);
}

TEST_F(VerbsTest, PredictiveWakeMissStillDeliversTheLateReply) {
  std::vector<std::chrono::microseconds> delays(6, 4ms);
  delays.push_back(150ms);  // far beyond the planned spin
  delays.push_back(4ms);
  // Every reply arrives, the late one included, whether or not a plan
  // expected it sooner (under load the learning may have restarted).
  ASSERT_TRUE(PingPong(*client_, *server_, delays));
  auto stats = WaitStatsOf(*client_);
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->planned, stats->planned_hits + stats->planned_early + stats->planned_misses);
}

TEST_F(VerbsTest, PredictiveWakeHonoursAnEarlierDeadline) {
  // Learn 4 s replies (two rounds: the fewest the predictor plans from; each
  // measured wait is a reply's, as the requests complete silently), then
  // poll with a 2 ms deadline while the plan says to sleep ~4 s: 0
  // completions, and the reply sent afterwards is delivered by the next wait.
  constexpr auto kLearnt = 4s;
  ASSERT_TRUE(PingPong(*client_, *server_, std::vector<std::chrono::microseconds>(2, kLearnt),
                       kHangGuard, /*signaled_requests=*/false));
  std::vector<uint8_t> cmem(64), smem(64);
  auto cmr = Register(*client_, cmem, kAccessLocalWrite);
  auto smr = Register(*server_, smem, kAccessLocalWrite);
  ASSERT_TRUE(cmr && smr);
  ASSERT_OK(server_->PostRecv(1, Buf(*smr, 0, 8)));
  ASSERT_OK(client_->PostRecv(2, Buf(*cmr, 0, 8)));
  SendRequest req = Req(3, WorkOpcode::kSend, Buf(*cmr, 8, 8), 0, 0, 0, /*signaled=*/false);
  ASSERT_OK(client_->PostSend({&req, 1}));
  Completion c;
  auto start = std::chrono::steady_clock::now();
  auto r = client_->PollCompletions({&c, 1}, Deadline::After(2ms));
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_OK(r.status());
  EXPECT_EQ(*r, 0u);
  EXPECT_GE(took, 2ms);
  // Whether the wait ended at its deadline or ran on to the planned wake
  // only time tells: 2 ms against ~4 s. The bound is halfway, 1000x the
  // deadline, so no loaded machine (or TCG guest) blurs the two.
  EXPECT_LT(took, kLearnt / 2) << "the wait ran to the planned wake instead of its deadline";
  // The reply sent now is delivered by the next wait.
  SendRequest reply = Req(4, WorkOpcode::kSend, Buf(*smr, 8, 8), 0, 0, 0, /*signaled=*/false);
  ASSERT_EQ(PollN(*server_, 1).size(), 1u);
  ASSERT_OK(server_->PostSend({&reply, 1}));
  auto got = PollN(*client_, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].wr_id, 2u);
}

TEST_F(VerbsTest, PredictiveWakeCanBeTurnedOff) {
  VerbsOptions opt;
  opt.predictive_wake = false;
  auto t = NewVerbsTransport(opt);
  ASSERT_OK(t.status());
  auto accepted = std::async(std::launch::async, [&] { return listener_->Accept(Deadline::After(10s)); });
  auto c = (*t)->Connect(addr_, listener_->port(), Deadline::After(10s));
  auto s = accepted.get();
  ASSERT_OK(c.status());
  ASSERT_OK(s.status());
  ASSERT_TRUE(PingPong(**c, **s, std::vector<std::chrono::microseconds>(8, 3ms)));
  auto stats = WaitStatsOf(**c);
  ASSERT_TRUE(stats);
  // Whether a wait slept depends on the scheduler (a reply may come within
  // the spin); that none was planned does not.
  EXPECT_EQ(stats->planned, 0u);
  EXPECT_EQ(stats->planned_hits + stats->planned_early + stats->planned_misses, 0u);
}

TEST(VerbsNoDevice, WaitStatsAreVerbsOnly) {
  // A Connection of another kind has none (the check is a dynamic_cast).
  struct Fake final : Connection {
    Result<std::unique_ptr<MemoryRegion>> RegisterMemory(void*, size_t, uint32_t) override {
      return InternalError("fake");
    }
    Status PostSend(std::span<const SendRequest>) override { return Status::Ok(); }
    Status PostRecv(uint64_t, const LocalBuffer&) override { return Status::Ok(); }
    Result<size_t> PollCompletions(std::span<Completion>, Deadline) override { return size_t{0}; }
    Status RequestNotify(NotifyMode) override { return Status::Ok(); }
    Result<bool> WaitNotify(Deadline) override { return false; }
    Result<size_t> TryPollCompletions(std::span<Completion>) override { return size_t{0}; }
    Status Disconnect() override { return Status::Ok(); }
    std::string peer_name() const override { return "fake"; }
  } fake;
  EXPECT_FALSE(WaitStatsOf(fake));
}

}  // namespace
}  // namespace naarpc
