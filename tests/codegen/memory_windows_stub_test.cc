// A generated client applies its IDL's `memory_windows: required` (service
// Second of golden.naa.yaml) as the default of its sessions' options:
// against an NAA that offers windows its calls run with them; against one
// that does not they fail with kFailedPrecondition; an explicit
// ClientOptions::memory_windows = false wins over the IDL (docs/idl.md).
#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "naarpc/naa_server.h"
#include "runtime/transport_impl/emulated/emulated_transport.h"
#include "tests/codegen/testdata/golden.naa.h"

namespace {

using namespace naarpc;
namespace golden = naarpc::testing::golden;

constexpr auto kHangGuard = std::chrono::seconds(60);

class SecondImpl final : public golden::SecondService {
 public:
  golden::SecondError Ping(const NaaCall&, uint32_t& v) override {
    ++v;
    return golden::SecondError::kOk;
  }
};

class MemoryWindowsStubTest : public ::testing::Test {
 protected:
  std::unique_ptr<NaaServer> Serve(bool windows) {
    ServerOptions o;
    o.memory_windows = windows;
    auto server = NaaServer::Start(*transport_, "127.0.0.1", 0, naa_, o);
    EXPECT_TRUE(server.ok()) << server.status().ToString();
    return server.ok() ? std::move(*server) : nullptr;
  }
  Status Ping(const NaaServer& server, codegen::StubOptions options, uint32_t* v) {
    golden::SecondClient client(*transport_, "127.0.0.1", server.port(), options);
    return client.Ping(v, Deadline::After(kHangGuard));
  }
  std::unique_ptr<Transport> transport_ = NewEmulatedTransport();
  SecondImpl naa_;
};

TEST_F(MemoryWindowsStubTest, TheIdlDeclarationIsTheDefault) {
  auto with = Serve(true);
  ASSERT_NE(with, nullptr);
  uint32_t v = 41;
  Status s = Ping(*with, {}, &v);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(v, 42u);

  auto without = Serve(false);
  ASSERT_NE(without, nullptr);
  s = Ping(*without, {}, &v);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("did not accept per-call memory windows (capability 0x01"),
            std::string::npos)
      << s.ToString();
  EXPECT_EQ(v, 42u);
}

TEST_F(MemoryWindowsStubTest, ClientOptionsWinOverTheIdl) {
  auto without = Serve(false);
  ASSERT_NE(without, nullptr);
  codegen::StubOptions off;
  off.session.memory_windows = false;
  uint32_t v = 1;
  Status s = Ping(*without, off, &v);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(v, 2u);
  // And the reference dialect (no metadata region to carry window keys) is
  // refused while the IDL's windows apply, accepted once they are off.
  codegen::StubOptions reference;
  reference.session.dialect = Dialect::kReference;
  s = Ping(*without, reference, &v);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("memory_windows needs the spec dialect"), std::string::npos)
      << s.ToString();
  reference.session.memory_windows = false;
  s = Ping(*without, reference, &v);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(v, 3u);
}

TEST(WithMemoryWindows, OnlyFillsAnUnsetValue) {
  EXPECT_EQ(codegen::WithMemoryWindows({}).session.memory_windows, std::optional<bool>(true));
  codegen::StubOptions off;
  off.session.memory_windows = false;
  EXPECT_EQ(codegen::WithMemoryWindows(off).session.memory_windows, std::optional<bool>(false));
}

}  // namespace
