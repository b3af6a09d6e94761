// Stalls say what was not seen (docs/protocol.md 7.4): an MRSP request never
// acknowledged, acknowledged but never answered, a call without an answer;
// the NAA logs a host that sends no MRSP request and a connection idle past
// ServerOptions::idle_log_after. Both transports; no sleeps: waits end on
// the awaited event, deadlines only bound them.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "naarpc/client_session.h"
#include "naarpc/naa_server.h"
#include "tests/testing/log_capture.h"
#include "tests/testing/test_transport.h"

namespace naarpc {
namespace {

using namespace std::chrono_literals;

constexpr uint8_t kEcho = 1;
constexpr uint8_t kBlocks = 7;
constexpr uint8_t kFailsWithDetail = 3;

using testing::LogCapture;

// kEcho copies its input to its output; kBlocks waits until released.
class Kernels final : public NaaHandler {
 public:
  uint8_t Handle(NaaCall& call) override {
    if (call.function_code == kBlocks) {
      release_.wait();
      return kNaaStatusSuccess;
    }
    if (call.function_code == kFailsWithDetail) {
      call.failure_detail = "the widget was out of range";
      return 0x11;
    }
    if (call.function_code != kEcho) return kNaaStatusUnknownFunction;
    auto in = call.params[0].data, out = call.params[1].data;
    std::copy(in.begin(), in.begin() + std::min(in.size(), out.size()), out.begin());
    return kNaaStatusSuccess;
  }
  void Release() { released_.set_value(); }

 private:
  std::promise<void> released_;
  std::shared_future<void> release_ = released_.get_future().share();
};

std::vector<RegionSpec> EchoLayout() {
  return {{"in", Direction::kIn, 64}, {"out", Direction::kOut, 64}};
}

class DiagnosticsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    testing::TestTransport t = testing::MakeTestTransport(GetParam());
    if (!t.unavailable.empty()) GTEST_SKIP() << t.unavailable;
    transport_ = std::move(t.transport);
    address_ = t.address;
  }

  std::unique_ptr<NaaServer> Start(ServerOptions options) {
    options.log = log_.Sink();
    auto s = NaaServer::Start(*transport_, address_, 0, kernels_, options);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  std::string address_ = "127.0.0.1";
  std::unique_ptr<Transport> transport_;
  Kernels kernels_;
  LogCapture log_;
};

TEST_P(DiagnosticsTest, MrspAcknowledgedButNotAnsweredSaysSo) {
  auto listener = transport_->Listen(address_, 0);
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  // A peer that takes the request (receive posted, queue pair polled) and
  // never answers it.
  std::thread silent([&] {
    auto conn = (*listener)->Accept(Deadline::After(20s));
    ASSERT_TRUE(conn.ok()) << conn.status().ToString();
    std::vector<uint8_t> buf(kMaxMrspMessageSize);
    auto mr = (*conn)->RegisterMemory(buf.data(), buf.size(), kAccessLocalWrite);
    ASSERT_TRUE(mr.ok());
    ASSERT_TRUE((*conn)->PostRecv(1, {(*mr)->remote_addr(), uint32_t(buf.size()), (*mr)->lkey()}).ok());
    const Deadline end = Deadline::After(20s);
    Completion c[4];
    while (!end.expired()) {  // until the host gives up and disconnects
      auto n = (*conn)->PollCompletions(c, end);
      if (!n.ok()) break;
    }
  });
  ClientOptions options;
  // The request is acknowledged only once the peer is ready for it: on verbs
  // once its receive is posted (accept, registration; an RNR retry
  // meanwhile), on the emulated transport once its thread polls. Either can
  // come well after the connection is up on a loaded machine: a timeout
  // that covers it.
  options.mrsp_timeout = 5000ms;
  auto s = ClientSession::Open(*transport_, address_, (*listener)->port(), EchoLayout(), options);
  silent.join();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kDeadlineExceeded) << s.status().ToString();
  EXPECT_NE(s.status().message().find("acknowledged the request but sent no answer within " +
                                      std::to_string(options.mrsp_timeout.count()) + " ms"),
            std::string::npos)
      << s.status().ToString();
  EXPECT_NE(s.status().message().find("solicited-event bit"), std::string::npos);
}

TEST_P(DiagnosticsTest, MrspNeverAcknowledgedSaysSo) {
  if (GetParam() != "emulated") {
    GTEST_SKIP() << "an HCA acknowledges by itself; only the emulated peer can leave a "
                    "request unacknowledged (by never being polled)";
  }
  auto listener = transport_->Listen(address_, 0);
  ASSERT_TRUE(listener.ok());
  std::promise<std::unique_ptr<Connection>> accepted;
  std::thread acceptor([&] {
    auto conn = (*listener)->Accept(Deadline::After(20s));
    accepted.set_value(conn.ok() ? std::move(conn).value() : nullptr);
  });
  ClientOptions options;
  options.mrsp_timeout = 300ms;
  auto s = ClientSession::Open(*transport_, address_, (*listener)->port(), EchoLayout(), options);
  acceptor.join();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kDeadlineExceeded) << s.status().ToString();
  EXPECT_NE(s.status().message().find("request was not acknowledged within 300 ms"),
            std::string::npos)
      << s.status().ToString();
}

TEST_P(DiagnosticsTest, CallWithoutAnswerNamesTheFunctionAndTheDialect) {
  auto server = Start({});
  ASSERT_NE(server, nullptr);
  ClientOptions options;
  options.dialect = Dialect::kReference;
  auto s = ClientSession::Open(*transport_, address_, server->port(), EchoLayout(), options);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Status st = (*s)->Call(kBlocks, Deadline::After(300ms));
  kernels_.Release();
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_NE(st.message().find("no answer from the NAA before the deadline"), std::string::npos)
      << st.ToString();
  EXPECT_NE(st.message().find("serves function 7 in the reference dialect"), std::string::npos)
      << st.ToString();
  server->Shutdown();
}

TEST_P(DiagnosticsTest, NaaLogsAHostThatSendsNoMrspRequest) {
  ServerOptions options;
  options.mrsp_timeout = 200ms;
  auto server = Start(options);
  ASSERT_NE(server, nullptr);
  auto conn = transport_->Connect(address_, server->port(), Deadline::After(20s));
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  EXPECT_TRUE(log_.WaitFor("no MRSP request within 200 ms of connecting")) << log_.All();
  server->Shutdown();
}

TEST_P(DiagnosticsTest, NaaLogsAnIdleConnectionOncePerIdleSpell) {
  ServerOptions options;
  options.idle_log_after = 1ms;
  auto server = Start(options);
  ASSERT_NE(server, nullptr);
  auto s = ClientSession::Open(*transport_, address_, server->port(), EchoLayout());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE(log_.WaitFor("since the MRSP")) << log_.All();
  EXPECT_NE(log_.All().find("idle: no call for"), std::string::npos) << log_.All();
  ASSERT_TRUE((*s)->Call(kEcho, Deadline::After(20s)).ok());
  ASSERT_TRUE(log_.WaitFor("since call 1")) << log_.All();
  EXPECT_EQ(log_.Count("since the MRSP"), 1u) << log_.All();
  server->Shutdown();
}

TEST_P(DiagnosticsTest, NaaLogsWhyAHandlerFailedACall) {
  auto server = Start({});
  ASSERT_NE(server, nullptr);
  auto s = ClientSession::Open(*transport_, address_, server->port(), EchoLayout());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Status st = (*s)->Call(kFailsWithDetail, Deadline::After(20s));
  EXPECT_EQ(st.wire_code(), std::optional<uint8_t>(0x11)) << st.ToString();
  EXPECT_TRUE(log_.WaitFor("call of function 3 failed with status 17: the widget was out of range"))
      << log_.All();
  server->Shutdown();
}

INSTANTIATE_TEST_SUITE_P(Transports, DiagnosticsTest, ::testing::Values("emulated", "verbs"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace naarpc
