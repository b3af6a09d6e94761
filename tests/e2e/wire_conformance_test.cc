// Wire conformance: the engine against a hand-driven peer that speaks the
// NAAICE protocol through the raw transport interface. Pins what the host
// puts on the wire (MRSP entries, flags, metadata bytes, immediates) and how
// it treats what an NAA sends back, and how the NAA treats a broken host.
#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "naarpc/client_session.h"
#include "runtime/wire/mrsp.h"
#include "naarpc/naa_server.h"
#include "naarpc/protocol.h"
#include "runtime/transport_impl/emulated/emulated_transport.h"
#include "runtime/transport_impl/verbs/verbs_transport.h"
#include "tests/e2e/test_kernels.h"
#include "runtime/wire/byte_order.h"

namespace naarpc {
namespace {

constexpr auto kWait = std::chrono::seconds(20);

// The transport under test ("emulated" or "verbs") and its address: verbs
// needs the rxe netdev's address inside the Soft-RoCE guest.
std::string g_transport = "emulated";

std::unique_ptr<Transport> TestTransport() {
  if (g_transport == "verbs") return std::move(NewVerbsTransport()).value();
  return NewEmulatedTransport();
}
std::string TestAddress() {
  if (g_transport == "verbs") {
    if (const char* a = std::getenv("NAARPC_TEST_ADDRESS")) return a;
  }
  return "127.0.0.1";
}

// Waits for the completion with `wr_id` (others are collected in `seen`).
Completion WaitFor(Connection& conn, uint64_t wr_id, std::vector<Completion>* seen = nullptr) {
  std::array<Completion, 8> batch;
  const Deadline deadline = Deadline::After(kWait);
  for (;;) {
    auto n = conn.PollCompletions(batch, deadline);
    if (!n.ok() || *n == 0) {
      ADD_FAILURE() << "no completion for wr_id " << wr_id << ": " << n.status().ToString();
      return {};
    }
    for (size_t i = 0; i < *n; ++i) {
      if (seen) seen->push_back(batch[i]);
      if (batch[i].wr_id == wr_id) return batch[i];
    }
  }
}

// A scripted NAA: accepts one host, answers its MRSP with `regions`-sized
// buffers, records the request and the first call's immediate, and replies
// with `status_imm`.
struct FakeNaa {
  std::unique_ptr<Transport> transport = TestTransport();
  std::unique_ptr<Listener> listener;
  std::vector<uint8_t> raw_reply;  // if set: sent instead of a real answer
  uint32_t status_imm = 0;

  AdvertisementRequestMessage request;
  uint32_t call_imm = 0;
  std::vector<std::vector<std::byte>> memory;  // per non-internal entry
  std::thread thread;

  void Start() {
    listener = std::move(transport->Listen(TestAddress(), 0)).value();
    thread = std::thread([this] { Run(); });
  }
  void Join() { thread.join(); }

  void Run() {
    auto accepted = listener->Accept(Deadline::After(kWait));
    ASSERT_TRUE(accepted.ok()) << accepted.status().ToString();
    auto conn = std::move(accepted).value();
    std::vector<uint8_t> rx(kMaxMrspMessageSize), tx(kMaxMrspMessageSize);
    auto rx_mr = std::move(conn->RegisterMemory(rx.data(), rx.size(), kAccessLocalWrite)).value();
    auto tx_mr = std::move(conn->RegisterMemory(tx.data(), tx.size(), 0)).value();
    ASSERT_TRUE(conn->PostRecv(1, {rx_mr->remote_addr(), uint32_t(rx.size()), rx_mr->lkey()}).ok());
    Completion c = WaitFor(*conn, 1);
    auto decoded = DecodeMrsp(std::span<const uint8_t>(rx.data(), c.byte_len));
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    request = std::get<AdvertisementRequestMessage>(*decoded);

    std::vector<std::unique_ptr<MemoryRegion>> mrs;
    size_t len = 0;
    if (!raw_reply.empty()) {
      std::memcpy(tx.data(), raw_reply.data(), raw_reply.size());
      len = raw_reply.size();
    } else {
      AdvertisementMessage adv;
      for (const auto& r : request.regions) {
        if (r.flags & kRegionFlagInternal) continue;
        memory.emplace_back(r.size);
        mrs.push_back(std::move(conn->RegisterMemory(memory.back().data(), r.size,
                                                     kAccessLocalWrite | kAccessRemoteWrite))
                          .value());
        adv.regions.push_back({mrs.back()->remote_addr(), mrs.back()->rkey(), r.size});
      }
      len = std::move(EncodeMrsp(MrspMessage(adv), tx)).value();
    }
    ASSERT_TRUE(conn->PostRecv(2, {rx_mr->remote_addr(), uint32_t(rx.size()), rx_mr->lkey()}).ok());
    SendRequest send;
    send.wr_id = 3;
    send.local = {tx_mr->remote_addr(), uint32_t(len), tx_mr->lkey()};
    ASSERT_TRUE(conn->PostSend(std::span<const SendRequest>(&send, 1)).ok());
    if (!raw_reply.empty()) {
      WaitForHostToLeave(*conn);
      return;
    }
    Completion call = WaitFor(*conn, 2);
    ASSERT_EQ(call.opcode, WorkOpcode::kRecvRdmaWithImm);
    call_imm = call.imm_data;
    // Reply: zero-length WRITE_WITH_IMM to the last host region (an output).
    const RegionRequest& out = request.regions[memory.size() - 1];
    SendRequest reply;
    reply.wr_id = 4;
    reply.opcode = WorkOpcode::kRdmaWriteWithImm;
    reply.local = {tx_mr->remote_addr(), 0, tx_mr->lkey()};
    reply.remote_addr = out.addr;
    reply.rkey = out.rkey;
    reply.imm_data = status_imm;
    ASSERT_TRUE(conn->PostSend(std::span<const SendRequest>(&reply, 1)).ok());
    WaitForHostToLeave(*conn);
  }

  // Keeps the connection serviced (acks flow) until the host disconnects.
  static void WaitForHostToLeave(Connection& conn) {
    std::array<Completion, 8> batch;
    const Deadline deadline = Deadline::After(kWait);
    for (;;) {
      auto n = conn.PollCompletions(batch, deadline);
      if (!n.ok()) return;  // disconnected
      ASSERT_FALSE(deadline.expired()) << "host never disconnected";
    }
  }
};

class WireConformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    g_transport = GetParam();
    if (g_transport == "verbs" && !RdmaDeviceAvailable()) {
      GTEST_SKIP() << "no RDMA device here; the verbs cases run inside the Soft-RoCE guest "
                      "(//tools/rxe-vm)";
    }
  }
};

std::vector<RegionSpec> Layout() {
  return {{"a", Direction::kIn, 64},
          {"io", Direction::kInOut, 32},
          {"out", Direction::kOut, 16},
          {"scratch", Direction::kInternal, 4096, 0x123456789abc}};
}

Result<std::unique_ptr<ClientSession>> OpenTo(FakeNaa& naa, Dialect dialect) {
  ClientOptions options;
  options.dialect = dialect;
  options.mrsp_timeout = std::chrono::seconds(5);
  return ClientSession::Open(*naa.transport, TestAddress(), naa.listener->port(), Layout(), options);
}

TEST_P(WireConformance, SpecDialectRequestMetadataAndImmediate) {
  FakeNaa naa;
  naa.Start();
  auto s = OpenTo(naa, Dialect::kSpec);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Status st = (*s)->Call(42, Deadline::After(kWait));
  EXPECT_TRUE(st.ok()) << st.ToString();
  (*s)->Close().IgnoreError();
  naa.Join();

  // [metadata][a][io][out][scratch]
  const auto& r = naa.request.regions;
  ASSERT_EQ(r.size(), 5u);
  EXPECT_EQ(r[0].flags, 0x00);
  EXPECT_EQ(r[0].size, 16u) << "two return regions (io, out): 2 x 8 bytes";
  EXPECT_EQ(r[1].flags, 0x00);
  EXPECT_EQ(r[1].size, 64u);
  EXPECT_EQ(r[2].size, 32u);
  EXPECT_EQ(r[3].size, 16u);
  EXPECT_EQ(r[4].flags, kRegionFlagInternal);
  EXPECT_EQ(r[4].addr, 0u);
  EXPECT_EQ(r[4].rkey, 0u);
  EXPECT_EQ(r[4].requested_naa_address, 0x123456789abcu);
  EXPECT_EQ(r[4].size, 4096u);
  // Host addresses advertised = host buffers.
  EXPECT_EQ(r[1].addr, reinterpret_cast<uintptr_t>((*s)->buffer(0).data()));
  EXPECT_EQ(r[2].addr, reinterpret_cast<uintptr_t>((*s)->buffer(1).data()));
  EXPECT_EQ(r[3].addr, reinterpret_cast<uintptr_t>((*s)->buffer(2).data()));

  // The metadata the host wrote: big-endian addresses of io and out.
  const auto* meta = reinterpret_cast<const uint8_t*>(naa.memory[0].data());
  EXPECT_EQ(GetBe64(meta), r[2].addr);
  EXPECT_EQ(GetBe64(meta + 8), r[3].addr);
  EXPECT_EQ(meta[0], uint8_t(r[2].addr >> 56)) << "most significant byte first";

  EXPECT_EQ(naa.call_imm, 42u) << "spec dialect immediate is the bare function code";
}

TEST_P(WireConformance, ReferenceDialectFlagsAndImmediate) {
  FakeNaa naa;
  naa.Start();
  auto s = OpenTo(naa, Dialect::kReference);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  CallOptions options;
  options.user_bits = 0x0102;
  ASSERT_TRUE((*s)->Call(5, Deadline::After(kWait), options).ok());
  (*s)->Close().IgnoreError();
  naa.Join();
  const auto& r = naa.request.regions;
  ASSERT_EQ(r.size(), 4u) << "no metadata region in the reference dialect";
  EXPECT_EQ(r[0].flags, kRegionFlagInput);
  EXPECT_EQ(r[1].flags, kRegionFlagInput | kRegionFlagOutput);
  EXPECT_EQ(r[2].flags, kRegionFlagOutput);
  EXPECT_EQ(r[3].flags, kRegionFlagInternal);
  EXPECT_EQ(naa.call_imm, 5u | 0x80u | (0x0102u << 8));
}

TEST_P(WireConformance, StatusInBits8To15IsAccepted) {
  FakeNaa naa;
  naa.status_imm = 0x17 << 8;  // the reference host's reading
  naa.Start();
  auto s = OpenTo(naa, Dialect::kReference);
  ASSERT_TRUE(s.ok());
  Status st = (*s)->Call(5, Deadline::After(kWait));
  (*s)->Close().IgnoreError();
  naa.Join();
  EXPECT_EQ(st.code(), StatusCode::kNaaError);
  EXPECT_EQ(st.wire_code(), std::optional<uint8_t>(0x17));
}

TEST_P(WireConformance, StatusAsIntegerIsAccepted) {
  FakeNaa naa;
  naa.status_imm = 0x21;
  naa.Start();
  auto s = OpenTo(naa, Dialect::kSpec);
  ASSERT_TRUE(s.ok());
  Status st = (*s)->Call(5, Deadline::After(kWait));
  (*s)->Close().IgnoreError();
  naa.Join();
  EXPECT_EQ(st.wire_code(), std::optional<uint8_t>(0x21));
}

TEST_P(WireConformance, MalformedAdvertisementIsAProtocolError) {
  FakeNaa naa;
  naa.raw_reply = {0x02, 0x02, 0x00, 0x00, 0x01};  // count 2 but 1 byte of entries
  naa.Start();
  auto s = OpenTo(naa, Dialect::kSpec);
  naa.Join();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kProtocolError) << s.status().ToString();
}

TEST_P(WireConformance, WrongAdvertisementCountIsAProtocolError) {
  FakeNaa naa;
  AdvertisementMessage one;
  one.regions.push_back({0x1000, 7, 64});
  naa.raw_reply = std::move(EncodeMrsp(MrspMessage(one))).value();
  naa.Start();
  auto s = OpenTo(naa, Dialect::kSpec);
  naa.Join();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kProtocolError);
  EXPECT_NE(s.status().message().find("advertised 1 regions, expected 4"), std::string::npos)
      << s.status().message();
}

TEST_P(WireConformance, MrspErrorMessageCarriesItsCode) {
  FakeNaa naa;
  naa.raw_reply = {0x00, 0x03, 0x00, 0x00};
  naa.Start();
  auto s = OpenTo(naa, Dialect::kReference);
  naa.Join();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kMrspError);
  EXPECT_EQ(s.status().wire_code(), std::optional<uint8_t>(0x03));
}

// A broken host talking to the real NAA: the NAA drops it with a log line
// naming the problem and keeps serving.
TEST_P(WireConformance, NaaRejectsTruncatedRequestAndKeepsServing) {
  auto transport = TestTransport();
  testing::TestKernels kernels;
  std::mutex mu;
  std::vector<std::string> log;
  ServerOptions options;
  options.log = [&](std::string_view l) {
    std::lock_guard<std::mutex> lock(mu);
    log.emplace_back(l);
  };
  auto server = std::move(NaaServer::Start(*transport, TestAddress(), 0, kernels, options)).value();

  auto conn = std::move(transport->Connect(TestAddress(), server->port(), Deadline::After(kWait)))
                  .value();
  std::vector<uint8_t> tx = {0x01, 0x02, 0x00, 0x00, 0x00};  // count 2, 1 byte of entries
  auto tx_mr = std::move(conn->RegisterMemory(tx.data(), tx.size(), 0)).value();
  SendRequest send;
  send.wr_id = 9;
  send.local = {tx_mr->remote_addr(), uint32_t(tx.size()), tx_mr->lkey()};
  ASSERT_TRUE(conn->PostSend(std::span<const SendRequest>(&send, 1)).ok());
  // The NAA disconnects us: our poll ends with an error, not a hang.
  std::array<Completion, 4> batch;
  const Deadline deadline = Deadline::After(kWait);
  for (;;) {
    auto n = conn->PollCompletions(batch, deadline);
    if (!n.ok()) {
      EXPECT_EQ(n.status().code(), StatusCode::kDisconnected) << n.status().ToString();
      break;
    }
    ASSERT_FALSE(deadline.expired()) << "NAA never dropped the broken host";
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_FALSE(log.empty());
    EXPECT_NE(log[0].find("MRSP"), std::string::npos) << log[0];
  }
  ClientOptions copt;
  auto ok = ClientSession::Open(*transport, TestAddress(), server->port(),
                                {{"in", Direction::kIn, 4}, {"out", Direction::kOut, 4}}, copt);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE((*ok)->Call(testing::kEcho, Deadline::After(kWait)).ok());
}

INSTANTIATE_TEST_SUITE_P(Transports, WireConformance, ::testing::Values("emulated", "verbs"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace naarpc
