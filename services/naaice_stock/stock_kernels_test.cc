// The stock kernels over the emulated transport, called the way the NAAICE
// reference library's stock clients call them: reference dialect, an
// arbitrary layout of input, output, in/out and internal regions.
#include "services/naaice_stock/stock_kernels.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "naarpc/client_session.h"
#include "runtime/transport_impl/emulated/emulated_transport.h"

namespace naarpc::services::naaice_stock {
namespace {

using namespace std::chrono_literals;

class StockKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = NaaServer::Start(*transport_, "127.0.0.1", 0, kernels_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
  }
  std::unique_ptr<ClientSession> Open(Dialect dialect, std::vector<RegionSpec> layout) {
    ClientOptions options;
    options.dialect = dialect;
    auto s = ClientSession::Open(*transport_, "127.0.0.1", server_->port(), std::move(layout),
                                 options);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  static void Fill(std::span<std::byte> b, uint8_t seed) {
    for (size_t i = 0; i < b.size(); ++i) b[i] = std::byte(uint8_t(seed + i));
  }
  static void ExpectBytes(std::span<const std::byte> b, uint8_t seed, const char* what) {
    for (size_t i = 0; i < b.size(); ++i) {
      ASSERT_EQ(uint8_t(b[i]), uint8_t(seed + i)) << what << " byte " << i;
    }
  }

  std::unique_ptr<Transport> transport_ = NewEmulatedTransport();
  NaaiceStockKernels kernels_;
  std::unique_ptr<NaaServer> server_;
};

TEST_F(StockKernelsTest, AddOneAddTwoAndNothingOnAnyLayout) {
  auto s = Open(Dialect::kReference, {{"in", Direction::kIn, 100},
                                      {"inout", Direction::kInOut, 37},
                                      {"out", Direction::kOut, 4096},
                                      {"scratch", Direction::kInternal, 512}});
  ASSERT_NE(s, nullptr);
  Fill(s->buffer(0), 10);
  Fill(s->buffer(1), 50);
  // out: the NAA's buffer starts zeroed, gains each call's increment, and
  // comes back whole every call.
  ASSERT_TRUE(s->Call(kAddOne, Deadline::After(20s)).ok());
  ExpectBytes(s->buffer(1), 51, "inout after +1");
  for (std::byte b : s->buffer(2)) ASSERT_EQ(uint8_t(b), 1);
  Fill(s->buffer(1), 50);
  ASSERT_TRUE(s->Call(kAddTwo, Deadline::After(20s)).ok());
  ExpectBytes(s->buffer(1), 52, "inout after +2");
  for (std::byte b : s->buffer(2)) ASSERT_EQ(uint8_t(b), 3);
  Fill(s->buffer(1), 7);
  ASSERT_TRUE(s->Call(kNothing, Deadline::After(20s)).ok());
  ExpectBytes(s->buffer(1), 7, "inout after 3");
  for (std::byte b : s->buffer(2)) ASSERT_EQ(uint8_t(b), 3);
  ExpectBytes(s->buffer(0), 10, "input left alone on the host");
}

TEST_F(StockKernelsTest, UnknownFunctionAndSpecDialectAreRefused) {
  auto ref = Open(Dialect::kReference, {{"x", Direction::kInOut, 8}});
  ASSERT_NE(ref, nullptr);
  Status st = ref->Call(9, Deadline::After(20s));
  EXPECT_EQ(st.code(), StatusCode::kNaaError);
  EXPECT_EQ(st.wire_code(), kNaaStatusUnknownFunction);
  auto spec = Open(Dialect::kSpec, {{"x", Direction::kInOut, 8}});
  ASSERT_NE(spec, nullptr);
  st = spec->Call(kAddOne, Deadline::After(20s));
  EXPECT_EQ(st.code(), StatusCode::kNaaError);
  EXPECT_EQ(st.wire_code(), kNaaStatusBadRegionLayout);
}

}  // namespace
}  // namespace naarpc::services::naaice_stock
