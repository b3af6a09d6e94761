// Endpoint (runtime/engine/endpoint.h): the MRSP halves and the data-path pieces
// host and NAA share, over a real emulated connection pair.
#include "runtime/engine/endpoint.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <variant>

#include "runtime/transport_impl/emulated/emulated_transport.h"

namespace naarpc::internal {
namespace {

using namespace std::chrono_literals;

class EndpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    transport_ = NewEmulatedTransport();
    auto listener = transport_->Listen("127.0.0.1", 0);
    ASSERT_TRUE(listener.ok()) << listener.status().ToString();
    listener_ = std::move(listener).value();
    auto accepted = std::async(std::launch::async,
                               [&] { return listener_->Accept(Deadline::After(20s)); });
    auto host = transport_->Connect("127.0.0.1", listener_->port(), Deadline::After(20s));
    auto naa = accepted.get();
    ASSERT_TRUE(host.ok() && naa.ok());
    host_conn_ = std::move(host).value();
    naa_conn_ = std::move(naa).value();
    ASSERT_TRUE(host_.SetUp(*host_conn_).ok());
    ASSERT_TRUE(naa_.SetUp(*naa_conn_).ok());
  }
  // The next completion of `conn`.
  Completion Next(Connection& conn) {
    Completion c;
    auto n = conn.PollCompletions(std::span<Completion>(&c, 1), Deadline::After(20s));
    EXPECT_TRUE(n.ok() && *n == 1) << (n.ok() ? std::to_string(*n) : n.status().ToString());
    return c;
  }

  // The next completion of `conn` while `peer` makes progress (an emulated
  // peer acknowledges only while it is polled; an HCA does it by itself).
  Completion NextWhile(Connection& conn, Connection& peer) {
    auto next = std::async(std::launch::async, [&] { return Next(conn); });
    while (next.wait_for(0s) != std::future_status::ready) {
      Completion unexpected;
      auto n = peer.PollCompletions(std::span<Completion>(&unexpected, 1),
                                    Deadline::After(10ms));
      EXPECT_TRUE(n.ok() && *n == 0) << "the peer had a completion";
    }
    return next.get();
  }

  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Listener> listener_;
  std::unique_ptr<Connection> host_conn_, naa_conn_;
  Endpoint host_, naa_;
};

TEST_F(EndpointTest, AnMrspMessageSentByOneSideIsWhatTheOtherDecodes) {
  ASSERT_TRUE(naa_.PostMrspReceive().ok());
  AdvertisementRequestMessage req;
  RegionRequest r;
  r.flags = kRegionFlagInput;
  r.addr = 0x1000;
  r.rkey = 0x2a;
  r.size = 64;
  req.regions.push_back(r);
  ASSERT_TRUE(host_.SendMrsp(MrspMessage(req)).ok());
  const Completion got = Next(*naa_conn_);
  EXPECT_EQ(got.wr_id, Endpoint::MrspRecvId());
  EXPECT_EQ(got.opcode, WorkOpcode::kRecv);
  auto decoded = naa_.ReceivedMrsp(got.byte_len);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  const auto* back = std::get_if<AdvertisementRequestMessage>(&*decoded);
  ASSERT_NE(back, nullptr);
  EXPECT_EQ(back->regions, req.regions);
  EXPECT_EQ(NextWhile(*host_conn_, *naa_conn_).wr_id, Endpoint::MrspSendId());  // signaled
}

// Our message and the peer's share one registered buffer: a message of the
// largest size that has arrived stays intact while we encode and send our
// own of the largest size (the NAA's order: request in, answer out).
TEST_F(EndpointTest, AReceivedMessageSurvivesOurOwnLargestMessage) {
  auto full = [](uint32_t seed) {
    AdvertisementRequestMessage req;
    for (size_t i = 0; i < kMaxRegionsPerMessage; ++i) {
      RegionRequest r;
      r.flags = kRegionFlagInput;
      r.addr = (uint64_t{seed} << 32) | i;
      r.rkey = seed + static_cast<uint32_t>(i);
      r.size = static_cast<uint32_t>(64 + i);
      r.requested_naa_address = uint64_t{seed} * 4096 + i;
      req.regions.push_back(r);
    }
    return req;
  };
  const AdvertisementRequestMessage from_host = full(1), from_naa = full(2);
  ASSERT_EQ(EncodedSize(from_host), kMaxMrspMessageSize);
  // Polls both connections in turn (an emulated peer acknowledges only
  // while it is polled) until `conn` completes `wr_id`.
  auto await = [&](Connection& conn, uint64_t wr_id) {
    const Deadline give_up = Deadline::After(20s);
    for (;;) {
      ASSERT_FALSE(give_up.expired()) << "no completion " << wr_id;
      for (Connection* c : {host_conn_.get(), naa_conn_.get()}) {
        Completion got;
        auto n = c->PollCompletions(std::span<Completion>(&got, 1), Deadline::After(1ms));
        ASSERT_TRUE(n.ok()) << n.status().ToString();
        if (*n == 0) continue;
        ASSERT_EQ(got.status, CompletionStatus::kSuccess);
        if (c == &conn && got.wr_id == wr_id) {
          if (wr_id == Endpoint::MrspRecvId()) {
            EXPECT_EQ(got.byte_len, kMaxMrspMessageSize);
          }
          return;
        }
      }
    }
  };
  ASSERT_TRUE(host_.PostMrspReceive().ok());
  ASSERT_TRUE(naa_.PostMrspReceive().ok());
  ASSERT_TRUE(host_.SendMrsp(MrspMessage(from_host)).ok());
  await(*naa_conn_, Endpoint::MrspRecvId());
  ASSERT_TRUE(naa_.SendMrsp(MrspMessage(from_naa)).ok());
  await(*host_conn_, Endpoint::MrspRecvId());
  await(*naa_conn_, Endpoint::MrspSendId());
  auto at_naa = naa_.ReceivedMrsp(static_cast<uint32_t>(kMaxMrspMessageSize));
  auto at_host = host_.ReceivedMrsp(static_cast<uint32_t>(kMaxMrspMessageSize));
  ASSERT_TRUE(at_naa.ok() && at_host.ok());
  const auto* naa_got = std::get_if<AdvertisementRequestMessage>(&*at_naa);
  const auto* host_got = std::get_if<AdvertisementRequestMessage>(&*at_host);
  ASSERT_TRUE(naa_got != nullptr && host_got != nullptr);
  EXPECT_EQ(naa_got->regions, from_host.regions);
  EXPECT_EQ(host_got->regions, from_naa.regions);
}

TEST_F(EndpointTest, DataReceivesAreCountedAndAWriteSequenceConsumesOne) {
  ASSERT_TRUE(naa_.PostDataRecv().ok());
  ASSERT_TRUE(naa_.PostDataRecv().ok());
  EXPECT_EQ(naa_.posted_data_recvs(), 2);
  // The host writes into a region of the NAA's.
  std::vector<std::byte> target(16), source(16, std::byte{7});
  auto target_mr = naa_conn_->RegisterMemory(target.data(), target.size(),
                                             kAccessLocalWrite | kAccessRemoteWrite);
  auto source_mr = host_conn_->RegisterMemory(source.data(), source.size(), 0);
  ASSERT_TRUE(target_mr.ok() && source_mr.ok());
  host_.StartSendBudget(1);
  const LocalBuffer source_buf{(*source_mr)->remote_addr(), static_cast<uint32_t>(source.size()),
                              (*source_mr)->lkey()};
  const WriteSlice slice{source_buf, (*target_mr)->remote_addr(), (*target_mr)->rkey()};
  auto posted = host_.PostWrites(std::span<const WriteSlice>(&slice, 1), 0x81, /*signal=*/true);
  ASSERT_TRUE(posted.ok()) << posted.status().ToString();
  EXPECT_TRUE(posted->signaled);
  EXPECT_EQ(WrIdKind(posted->wr_id), WrKind::kDataWrite);
  const Completion got = Next(*naa_conn_);
  EXPECT_EQ(got.opcode, WorkOpcode::kRecvRdmaWithImm);
  EXPECT_EQ(got.imm_data, 0x81u);
  EXPECT_EQ(WrIdKind(got.wr_id), WrKind::kDataRecv);
  naa_.DataRecvConsumed();
  EXPECT_EQ(naa_.posted_data_recvs(), 1);
  EXPECT_EQ(target, source);
  const Completion sent = NextWhile(*host_conn_, *naa_conn_);
  EXPECT_EQ(sent.wr_id, posted->wr_id);
  host_.OnSendCompleted(sent.wr_id);
  EXPECT_FALSE(host_.send_budget().signal_pending());
}

}  // namespace
}  // namespace naarpc::internal
