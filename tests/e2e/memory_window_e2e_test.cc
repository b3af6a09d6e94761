// Per-call memory windows end to end (ClientOptions::memory_windows,
// docs/protocol.md 4.5), on both transports (verbs in the Soft-RoCE guest):
// calls through windows against the real NaaServer; and a scripted NAA
// (raw transport, the wire of docs/protocol.md) that writes after its call
// ended, or after the host gave up on it: the write is a remote access
// error at the NAA and the host's memory stays as it was. Behaviour only:
// every wait is for a completion, a call's end or a disconnect.
#include <gtest/gtest.h>
#include <poll.h>

#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "naarpc/client_session.h"
#include "naarpc/naa_server.h"
#include "runtime/wire/byte_order.h"
#include "runtime/wire/mrsp.h"
#include "tests/testing/test_transport.h"

namespace naarpc {
namespace {

using namespace std::chrono_literals;

constexpr auto kTimeout = 10s;
constexpr uint8_t kPlusOne = 1;   // out[i] = in[i] + 1
constexpr size_t kN = 64;

class PlusOne : public NaaHandler {
 public:
  uint8_t Handle(NaaCall& call) override {
    if (call.function_code != kPlusOne || call.params.size() != 2) return kNaaStatusBadRegionLayout;
    auto in = call.params[0].data;
    auto out = call.params[1].data;
    for (size_t i = 0; i < out.size() && i < in.size(); ++i) {
      out[i] = std::byte(uint8_t(in[i]) + 1);
    }
    return kNaaStatusSuccess;
  }
};

std::vector<RegionSpec> Layout() {
  return {{"in", Direction::kIn, kN}, {"out", Direction::kOut, kN}};
}

ClientOptions WindowOptions() {
  ClientOptions o;
  o.memory_windows = true;
  return o;
}

class MemoryWindowE2eTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    testing::TestTransport t = testing::MakeTestTransport(GetParam());
    if (!t.unavailable.empty()) GTEST_SKIP() << t.unavailable;
    transport_ = std::move(t.transport);
    address_ = t.address;
  }

  std::unique_ptr<NaaServer> Serve(ServerOptions options = {}) {
    auto s = NaaServer::Start(*transport_, address_, 0, handler_, options);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  std::unique_ptr<Transport> transport_;
  std::string address_;
  PlusOne handler_;
};

TEST_P(MemoryWindowE2eTest, CallsThroughWindowsReturnCorrectResults) {
  auto server = Serve();
  ASSERT_NE(server, nullptr);
  auto s = ClientSession::Open(*transport_, address_, server->port(), Layout(), WindowOptions());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (int call = 0; call < 200; ++call) {
    auto in = (*s)->buffer(0);
    for (size_t i = 0; i < kN; ++i) in[i] = std::byte(uint8_t(call + i));
    Status st = (*s)->Call(kPlusOne, Deadline::After(kTimeout));
    ASSERT_TRUE(st.ok()) << "call " << call << ": " << st.ToString();
    auto out = (*s)->buffer(1);
    for (size_t i = 0; i < kN; ++i) {
      ASSERT_EQ(uint8_t(out[i]), uint8_t(call + i + 1)) << "call " << call << " byte " << i;
    }
  }
  server->Shutdown();
}

// The non-blocking call path of event loops (StartCall, ContinueCall on
// notify_fd) closes the windows too, and the next call's notification works.
TEST_P(MemoryWindowE2eTest, EventLoopCallsThroughWindows) {
  auto server = Serve();
  ASSERT_NE(server, nullptr);
  auto s = ClientSession::Open(*transport_, address_, server->port(), Layout(), WindowOptions());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (int call = 0; call < 50; ++call) {
    auto in = (*s)->buffer(0);
    for (size_t i = 0; i < kN; ++i) in[i] = std::byte(uint8_t(3 * call + i));
    ASSERT_TRUE((*s)->StartCall(kPlusOne, Deadline::After(kTimeout)).ok());
    std::optional<Status> done;
    const auto end = std::chrono::steady_clock::now() + kTimeout;
    while (!(done = (*s)->ContinueCall())) {
      ASSERT_LT(std::chrono::steady_clock::now(), end) << "call " << call << " never ended";
      pollfd p{(*s)->notify_fd(), POLLIN, 0};
      ASSERT_GE(::poll(&p, 1, 1000), 0);
    }
    ASSERT_TRUE(done->ok()) << "call " << call << ": " << done->ToString();
    auto out = (*s)->buffer(1);
    for (size_t i = 0; i < kN; ++i) ASSERT_EQ(uint8_t(out[i]), uint8_t(3 * call + i + 1));
  }
  server->Shutdown();
}

TEST_P(MemoryWindowE2eTest, NaaThatDeclinesWindowsIsRefusedClearly) {
  ServerOptions o;
  o.memory_windows = false;
  auto server = Serve(o);
  ASSERT_NE(server, nullptr);
  auto s = ClientSession::Open(*transport_, address_, server->port(), Layout(), WindowOptions());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition) << s.status().ToString();
  EXPECT_NE(s.status().message().find("did not accept per-call memory windows"), std::string::npos)
      << s.status().ToString();
  // The way out: the option, now a std::optional<bool>, set to false.
  EXPECT_NE(s.status().message().find("set ClientOptions::memory_windows to false (it overrides "
                                      "the IDL's memory_windows: required) to give it "
                                      "connection-long keys"),
            std::string::npos)
      << s.status().ToString();
  // Without windows, the same NAA serves as before.
  auto plain = ClientSession::Open(*transport_, address_, server->port(), Layout());
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_TRUE((*plain)->Call(kPlusOne, Deadline::After(kTimeout)).ok());
  server->Shutdown();
}

TEST_P(MemoryWindowE2eTest, ReferenceDialectAndStreamsAreRejectedUpFront) {
  auto server = Serve();
  ASSERT_NE(server, nullptr);
  ClientOptions o = WindowOptions();
  o.dialect = Dialect::kReference;
  auto s = ClientSession::Open(*transport_, address_, server->port(), Layout(), o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << s.status().ToString();
  server->Shutdown();
}

// A scripted NAA on the raw transport: answers MRSP (echoing the windows
// capability), takes one call, and writes what and when the test says.
class ScriptedNaa {
 public:
  explicit ScriptedNaa(Transport& t, const std::string& address) {
    auto l = t.Listen(address, 0);
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    listener_ = std::move(l).value();
  }
  uint16_t port() const { return listener_->port(); }

  // Accepts, answers MRSP, waits for the call's request.
  Status AcceptAndTakeCall() {
    auto c = listener_->Accept(Deadline::After(kTimeout));
    if (!c.ok()) return c.status();
    conn_ = std::move(c).value();
    NAARPC_ASSIGN_OR_RETURN(recv_mr_, Reg(recv_buf_, kMaxMrspMessageSize, kAccessLocalWrite));
    NAARPC_RETURN_IF_ERROR(conn_->PostRecv(1, {recv_mr_->remote_addr(), uint32_t(kMaxMrspMessageSize),
                                               recv_mr_->lkey()}));
    NAARPC_ASSIGN_OR_RETURN(Completion got, Next());
    if (got.opcode != WorkOpcode::kRecv) return InternalError("expected the MRSP request");
    auto msg = DecodeMrsp(std::span<const uint8_t>(recv_buf_.data(), got.byte_len));
    if (!msg.ok()) return msg.status();
    const auto& req = std::get<AdvertisementRequestMessage>(*msg);
    if (!(req.capabilities & kMrspCapMemoryWindows)) return InternalError("no windows asked for");
    AdvertisementMessage adv;
    adv.capabilities = kMrspCapMemoryWindows;
    regions_.resize(req.regions.size());
    mrs_.resize(req.regions.size());
    for (size_t i = 0; i < req.regions.size(); ++i) {
      NAARPC_ASSIGN_OR_RETURN(mrs_[i], Reg(regions_[i], req.regions[i].size,
                                           kAccessLocalWrite | kAccessRemoteWrite));
      adv.regions.push_back({mrs_[i]->remote_addr(), mrs_[i]->rkey(), req.regions[i].size});
    }
    for (uint64_t id = 2; id < 4; ++id) {
      NAARPC_RETURN_IF_ERROR(conn_->PostRecv(id, {recv_mr_->remote_addr(), 0, recv_mr_->lkey()}));
    }
    auto bytes = EncodeMrsp(adv);
    if (!bytes.ok()) return bytes.status();
    send_buf_ = *bytes;
    NAARPC_ASSIGN_OR_RETURN(send_mr_, Reg(send_buf_, send_buf_.size(), 0));
    SendRequest r;
    r.wr_id = 10;
    r.local = {send_mr_->remote_addr(), uint32_t(send_buf_.size()), send_mr_->lkey()};
    r.solicited = true;
    NAARPC_RETURN_IF_ERROR(conn_->PostSend(std::span<const SendRequest>(&r, 1)));
    for (;;) {  // the SEND's completion and the call's request, in any order
      NAARPC_ASSIGN_OR_RETURN(Completion c, Next());
      if (c.opcode == WorkOpcode::kRecvRdmaWithImm) break;
    }
    // This call's return address and window key (docs/protocol.md 4.5).
    return_addr_ = GetBe64(regions_[0].data());
    return_rkey_ = GetBe32(regions_[0].data() + 8);
    std::memset(regions_[1].data(), 0x77, regions_[1].size());
    result_ = regions_[1];
    NAARPC_ASSIGN_OR_RETURN(result_mr_, Reg(result_, result_.size(), 0));
    return Status::Ok();
  }

  // Writes the result to the host with this call's key (imm: status 0 if
  // `final`); returns the write's completion status.
  Result<CompletionStatus> Write(bool final) {
    SendRequest r;
    r.wr_id = ++wr_id_;
    r.opcode = final ? WorkOpcode::kRdmaWriteWithImm : WorkOpcode::kRdmaWrite;
    r.local = {result_mr_->remote_addr(), uint32_t(result_.size()), result_mr_->lkey()};
    r.remote_addr = return_addr_;
    r.rkey = return_rkey_;
    r.imm_data = EncodeStatusImmediate(Dialect::kSpec, kNaaStatusSuccess);
    r.solicited = final;
    Status posted = conn_->PostSend(std::span<const SendRequest>(&r, 1));
    if (!posted.ok()) return CompletionStatus::kFlushed;  // already down: nothing sent
    for (;;) {
      auto c = Next();
      if (!c.ok()) return CompletionStatus::kFlushed;
      if (c->wr_id == r.wr_id) return c->status;
    }
  }

  uint32_t return_rkey() const { return return_rkey_; }
  // What NaaServer does after an error completion (docs/protocol.md 7.4).
  void Disconnect() { conn_->Disconnect().IgnoreError(); }

 private:
  Result<std::unique_ptr<MemoryRegion>> Reg(std::vector<uint8_t>& buf, size_t n, uint32_t access) {
    buf.resize(n);
    return conn_->RegisterMemory(buf.data(), n, access);
  }
  Result<Completion> Next() {
    Completion c[1];
    auto n = conn_->PollCompletions(c, Deadline::After(kTimeout));
    if (!n.ok()) return n.status();
    if (*n == 0) return DeadlineExceededError("scripted NAA: no completion");
    return c[0];
  }

  std::unique_ptr<Listener> listener_;
  std::unique_ptr<Connection> conn_;
  std::vector<uint8_t> recv_buf_, send_buf_, result_;
  std::unique_ptr<MemoryRegion> recv_mr_, send_mr_, result_mr_;
  std::vector<std::vector<uint8_t>> regions_;
  std::vector<std::unique_ptr<MemoryRegion>> mrs_;
  uint64_t return_addr_ = 0;
  uint32_t return_rkey_ = 0;
  uint64_t wr_id_ = 100;
};

// Keeps the (idle) host session making progress until `done` is ready: an
// emulated connection moves only when called (PeerGone takes one step).
template <typename T>
T AwaitWhileHostPolls(std::future<T>& done, ClientSession& s) {
  const auto end = std::chrono::steady_clock::now() + kTimeout;
  while (done.wait_for(0s) != std::future_status::ready &&
         std::chrono::steady_clock::now() < end) {
    s.PeerGone();
    std::this_thread::yield();
  }
  return done.get();
}

TEST_P(MemoryWindowE2eTest, WriteAfterTheCallEndedIsARemoteAccessErrorAndLandsNothing) {
  ScriptedNaa naa(*transport_, address_);
  std::promise<void> late;
  auto late_write = late.get_future();
  auto script = std::async(std::launch::async, [&]() -> Result<CompletionStatus> {
    NAARPC_RETURN_IF_ERROR(naa.AcceptAndTakeCall());
    NAARPC_ASSIGN_OR_RETURN(CompletionStatus first, naa.Write(/*final=*/true));
    if (first != CompletionStatus::kSuccess) return InternalError("the call's own write failed");
    late_write.wait();  // the host's call has returned
    Result<CompletionStatus> late_status = naa.Write(/*final=*/false);
    naa.Disconnect();
    return late_status;
  });
  auto s = ClientSession::Open(*transport_, address_, naa.port(), Layout(), WindowOptions());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Status st = (*s)->Call(kPlusOne, Deadline::After(kTimeout));
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto out = (*s)->buffer(1);
  for (size_t i = 0; i < kN; ++i) ASSERT_EQ(uint8_t(out[i]), 0x77);
  // The caller owns its buffer again; the runaway kernel writes once more.
  std::memset(out.data(), 0x11, kN);
  late.set_value();
  Result<CompletionStatus> r = AwaitWhileHostPolls(script, **s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, CompletionStatus::kRemoteAccessError) << CompletionStatusName(*r);
  for (size_t i = 0; i < kN; ++i) ASSERT_EQ(uint8_t(out[i]), 0x11) << "byte " << i;
  // The connection is in error on the host too (the NAA, which saw the
  // error, disconnects): the session says so.
  const auto end = std::chrono::steady_clock::now() + kTimeout;
  while (!(*s)->PeerGone()) ASSERT_LT(std::chrono::steady_clock::now(), end);
  EXPECT_FALSE((*s)->Call(kPlusOne, Deadline::After(kTimeout)).ok());
}

TEST_P(MemoryWindowE2eTest, LateWriteAfterTheHostsTimeoutCannotLand) {
  ScriptedNaa naa(*transport_, address_);
  std::promise<void> late;
  auto late_write = late.get_future();
  auto script = std::async(std::launch::async, [&]() -> Result<CompletionStatus> {
    NAARPC_RETURN_IF_ERROR(naa.AcceptAndTakeCall());
    late_write.wait();  // the host gave up on the call ("the kernel overran")
    return naa.Write(/*final=*/true);
  });
  auto s = ClientSession::Open(*transport_, address_, naa.port(), Layout(), WindowOptions());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto out = (*s)->buffer(1);
  std::memset(out.data(), 0x11, kN);
  Status st = (*s)->Call(kPlusOne, Deadline::After(200ms));
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  late.set_value();
  Result<CompletionStatus> r = AwaitWhileHostPolls(script, **s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // The window was closed (and the session failed) before Call returned:
  // the write fails at the NAA, as a remote access error or on the closed
  // connection, and nothing lands.
  EXPECT_NE(*r, CompletionStatus::kSuccess);
  for (size_t i = 0; i < kN; ++i) ASSERT_EQ(uint8_t(out[i]), 0x11) << "byte " << i;
}

INSTANTIATE_TEST_SUITE_P(Transports, MemoryWindowE2eTest, ::testing::Values("emulated", "verbs"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace naarpc
