// The generated client reads the length header of a variable-length output
// from the NAA's reply: peer-supplied. A count above the IDL's maximum is a
// ProtocolError naming the parameter, never a read past the buffer or a
// silently truncated result; the maximum itself is accepted. The NAA here is
// a raw handler (not the generated skeleton, which never sends such a
// header), writing whatever header the test chooses.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "naarpc/naa_server.h"
#include "naarpc/protocol.h"
#include "runtime/transport_impl/emulated/emulated_transport.h"
#include "tests/codegen/testdata/golden.naa.h"
#include "runtime/wire/byte_order.h"

namespace {

using namespace naarpc;
using naarpc::testing::golden::KitchenClient;

constexpr auto kHangGuard = std::chrono::seconds(60);

// Echo (code 127): x in, up to 100 x u8; y out, up to 100 x u8.
class HostileEcho final : public NaaHandler {
 public:
  std::atomic<uint64_t> header{0};
  uint8_t Handle(NaaCall& call) override {
    if (call.function_code != 127 || call.params.size() != 2) return kNaaStatusUnknownFunction;
    std::span<std::byte> y = call.params[1].data;
    const uint64_t n = header.load();
    PutBe64(reinterpret_cast<uint8_t*>(y.data()), n);
    for (size_t i = 8; i < y.size(); ++i) y[i] = std::byte{0x42};
    call.params[1].reply_length = y.size();
    return kNaaStatusSuccess;
  }
};

class ClientLengthHeaderTest : public ::testing::TestWithParam<Dialect> {
 protected:
  void SetUp() override {
    auto server = NaaServer::Start(*transport_, "127.0.0.1", 0, naa_);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    codegen::StubOptions o;
    o.session.dialect = GetParam();
    client_ = std::make_unique<KitchenClient>(*transport_, "127.0.0.1", server_->port(), o);
  }
  std::unique_ptr<Transport> transport_ = NewEmulatedTransport();
  HostileEcho naa_;
  std::unique_ptr<NaaServer> server_;
  std::unique_ptr<KitchenClient> client_;
};

TEST_P(ClientLengthHeaderTest, TheMaximumIsAccepted) {
  naa_.header = 100;
  const std::vector<uint8_t> x(3, 1);
  std::vector<uint8_t> y;
  Status s = client_->Echo(x, &y, Deadline::After(kHangGuard));
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(y, std::vector<uint8_t>(100, 0x42));
}

TEST_P(ClientLengthHeaderTest, ACountBeyondTheMaximumIsAProtocolError) {
  for (uint64_t bad : {uint64_t{101}, uint64_t{1} << 32, ~uint64_t{0}}) {
    naa_.header = bad;
    const std::vector<uint8_t> x(3, 1);
    std::vector<uint8_t> y = {9, 9};
    Status s = client_->Echo(x, &y, Deadline::After(kHangGuard));
    EXPECT_EQ(s.code(), StatusCode::kProtocolError) << s.ToString();
    EXPECT_NE(s.message().find("the NAA returned " + std::to_string(bad) +
                               " elements for 'y', more than its maximum 100"),
              std::string::npos)
        << s.ToString();
    // Zero-copy form: the size it reports is never the hostile count.
    auto call = client_->NewEchoCall(Deadline::After(kHangGuard));
    ASSERT_TRUE(call.ok()) << call.status().ToString();
    call->set_x_size(1);
    Status z = call->Invoke(Deadline::After(kHangGuard));
    EXPECT_EQ(z.code(), StatusCode::kProtocolError) << z.ToString();
    EXPECT_EQ(call->y_size(), 0u);
  }
  // The session is still usable afterwards (the reply itself was well formed).
  naa_.header = 2;
  std::vector<uint8_t> y;
  ASSERT_TRUE(client_->Echo(std::vector<uint8_t>{1}, &y, Deadline::After(kHangGuard)).ok());
  EXPECT_EQ(y, (std::vector<uint8_t>{0x42, 0x42}));
}

INSTANTIATE_TEST_SUITE_P(Dialects, ClientLengthHeaderTest,
                         ::testing::Values(Dialect::kSpec, Dialect::kReference),
                         [](const auto& info) {
                           return info.param == Dialect::kSpec ? "spec" : "reference";
                         });

}  // namespace
