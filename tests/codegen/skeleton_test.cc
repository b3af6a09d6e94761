// Generated code without a network: the NAA-side dispatcher (layout checks,
// status codes, typed views), the client's argument checks, status naming,
// and CompositeHandler.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "naarpc/impl/codegen_support.h"
#include "tests/codegen/testdata/golden.naa.h"

namespace golden = naarpc::testing::golden;
using naarpc::Dialect;
using naarpc::NaaCall;
using naarpc::NaaRegion;

namespace {

class KitchenImpl final : public golden::KitchenService {
 public:
  golden::KitchenError Mixed(const NaaCall&, std::span<const uint16_t> fixed_in,
                             int32_t scalar_in, std::span<const double> var_in,
                             std::span<const std::byte> blob, std::span<int64_t> fixed_out,
                             float& scalar_out, naarpc::codegen::VarSpan<uint32_t>& var_out,
                             std::span<int8_t> fixed_io, naarpc::codegen::VarSpan<uint64_t>& var_io,
                             std::span<uint8_t> scratch, std::span<float> table) override {
    if (scalar_in == -1) throw std::runtime_error("boom");
    if (scalar_in == 99) return golden::KitchenError::kTooHot;
    seen_fixed_in = fixed_in.size();
    seen_var_in = var_in.size();
    seen_blob = blob.size();
    seen_internal = scratch.size() + table.size();
    fixed_out[0] = fixed_in[0] + scalar_in;
    scalar_out = static_cast<float>(var_in.empty() ? 0.0 : var_in.back());
    var_out.resize(static_cast<size_t>(scalar_in));
    for (size_t i = 0; i < var_out.size(); ++i) var_out[i] = static_cast<uint32_t>(i * 10);
    for (int8_t& v : fixed_io) v = static_cast<int8_t>(-v);
    var_io.resize(var_io.size() + 1);  // append one element
    var_io[var_io.size() - 1] = 77;
    return golden::KitchenError::kOk;
  }
  golden::KitchenError Echo(const NaaCall&, std::span<const uint8_t> x,
                            naarpc::codegen::VarSpan<uint8_t>& y) override {
    y.resize(x.size());
    std::copy(x.begin(), x.end(), y.begin());
    return golden::KitchenError::kOk;
  }
  size_t seen_fixed_in = 0, seen_var_in = 0, seen_blob = 0, seen_internal = 0;
};

class SecondImpl final : public golden::SecondService {
 public:
  golden::SecondError Ping(const NaaCall&, uint32_t& v) override {
    ++v;
    return golden::SecondError::kOk;
  }
};

// NAA-side regions of one fabricated call.
struct FakeCall {
  std::vector<std::vector<std::byte>> bufs, internal_bufs;
  std::vector<NaaRegion> params;
  std::vector<std::span<std::byte>> internal;
  NaaCall call;

  // sizes: parameter region bytes; out: which are return regions.
  FakeCall(uint8_t code, Dialect d, std::vector<size_t> sizes, std::vector<bool> out,
           std::vector<size_t> internal_sizes = {}) {
    for (size_t s : sizes) bufs.emplace_back(s);
    for (size_t s : internal_sizes) internal_bufs.emplace_back(s);
    for (size_t i = 0; i < sizes.size(); ++i) {
      NaaRegion r;
      r.data = bufs[i];
      r.is_output = out[i];
      r.is_input = true;
      if (d == Dialect::kReference) {
        r.flags = static_cast<uint8_t>((out[i] ? 0x08 : 0) | 0x04);
      }
      params.push_back(r);
    }
    for (auto& b : internal_bufs) internal.emplace_back(b);
    call.function_code = code;
    call.dialect = d;
    call.params = params;
    call.internal = internal;
  }
  template <typename T>
  T* at(size_t param, size_t offset = 0) {
    return reinterpret_cast<T*>(bufs[param].data() + offset);
  }
};

FakeCall EchoCall(Dialect d, uint64_t n) {
  FakeCall f(127, d, {108, 108}, {false, true});
  if (d == Dialect::kReference) {
    f.params[0].flags = 0x04;  // x: input
    f.params[1].flags = 0x08;  // y: output
  }
  naarpc::WriteLengthHeader(f.bufs[0], n);
  for (size_t i = 0; i < std::min<uint64_t>(n, 100); ++i) *f.at<uint8_t>(0, 8 + i) = uint8_t(i + 1);
  return f;
}

TEST(Skeleton, EchoCopiesVariableLengthData) {
  for (Dialect d : {Dialect::kSpec, Dialect::kReference}) {
    KitchenImpl k;
    FakeCall f = EchoCall(d, 3);
    EXPECT_EQ(k.Handle(f.call), 0);
    EXPECT_EQ(naarpc::ReadLengthHeader(f.bufs[1]), 3u);
    EXPECT_EQ(*f.at<uint8_t>(1, 8), 1);
    EXPECT_EQ(*f.at<uint8_t>(1, 10), 3);
    EXPECT_EQ(f.params[1].reply_length, 8u + 3u);  // only the valid prefix goes back
  }
}

TEST(Skeleton, UnknownFunctionCodeIs0x03) {
  KitchenImpl k;
  FakeCall f(5, Dialect::kSpec, {108, 108}, {false, true});
  EXPECT_EQ(k.Handle(f.call), naarpc::kNaaStatusUnknownFunction);
}

// Each refused layout says why, for the NAA's log (expected vs actual).
TEST(Skeleton, LayoutMismatchesAre0x04AndSayWhy) {
  KitchenImpl k;
  auto refused = [&k](FakeCall f, const std::string& why) {
    EXPECT_EQ(k.Handle(f.call), naarpc::kNaaStatusBadRegionLayout) << why;
    EXPECT_EQ(f.call.failure_detail, why);
  };
  refused(FakeCall(127, Dialect::kSpec, {108}, {true}),  // one region missing
          "Kitchen.Echo: 1 parameter regions, 0 internal regions and 0 streams, expected 2, 0 "
          "and 0");
  refused(FakeCall(127, Dialect::kSpec, {108, 100}, {false, true}),
          "Kitchen.Echo: region 'y' is 100 bytes, expected 108");
  refused(FakeCall(127, Dialect::kSpec, {108, 108}, {true, true}),
          "Kitchen.Echo: region 'x' is a return region, but the IDL says 'in'");
  refused(FakeCall(127, Dialect::kSpec, {108, 108}, {false, false}),
          "Kitchen.Echo: region 'y' is not a return region, but the IDL says 'out'");
  refused(EchoCall(Dialect::kSpec, 101),
          "Kitchen.Echo: region 'x' has a length header of 101, more than its maximum 100");
  {
    FakeCall f = EchoCall(Dialect::kReference, 3);
    f.params[1].flags = 0x0c;  // y flagged inout, IDL says out
    refused(std::move(f), "Kitchen.Echo: region 'y' has MRSP flags 0x0c, expected 0x08");
  }
  refused(FakeCall(7, Dialect::kSpec, {16, 4, 136, 32, 32, 4, 48, 3, 48},
                   {false, false, false, false, true, true, true, true, true}, {64}),
          "Kitchen.Mixed: 9 parameter regions, 1 internal regions and 0 streams, expected 9, 2 "
          "and 0");
  refused(FakeCall(7, Dialect::kSpec, {16, 4, 136, 32, 32, 4, 48, 3, 48},
                   {false, false, false, false, true, true, true, true, true}, {64, 8}),
          "Kitchen.Mixed: internal region 'table' is 8 bytes, expected 16");
}

FakeCall MixedCall(int32_t scalar_in) {
  FakeCall f(7, Dialect::kSpec, {16, 4, 136, 32, 32, 4, 48, 3, 48},
             {false, false, false, false, true, true, true, true, true}, {64, 16});
  *f.at<uint16_t>(0) = 5;
  *f.at<int32_t>(1) = scalar_in;
  naarpc::WriteLengthHeader(f.bufs[2], 2);
  f.at<double>(2, 8)[0] = 1.5;
  f.at<double>(2, 8)[1] = 2.5;
  f.at<int8_t>(7)[0] = 4;
  naarpc::WriteLengthHeader(f.bufs[8], 2);
  return f;
}

TEST(Skeleton, MixedPassesTypedViewsAndSetsReplyLengths) {
  KitchenImpl k;
  FakeCall f = MixedCall(3);
  ASSERT_EQ(k.Handle(f.call), 0);
  EXPECT_EQ(k.seen_fixed_in, 8u);
  EXPECT_EQ(k.seen_var_in, 2u);
  EXPECT_EQ(k.seen_blob, 32u);
  EXPECT_EQ(k.seen_internal, 64u + 4u);
  EXPECT_EQ(*f.at<int64_t>(4), 8);      // 5 + 3
  EXPECT_EQ(*f.at<float>(5), 2.5f);     // last var_in
  EXPECT_EQ(naarpc::ReadLengthHeader(f.bufs[6]), 3u);
  EXPECT_EQ(f.at<uint32_t>(6, 8)[2], 20u);
  EXPECT_EQ(f.params[6].reply_length, 8u + 3 * 4);
  EXPECT_EQ(*f.at<int8_t>(7), -4);
  EXPECT_EQ(naarpc::ReadLengthHeader(f.bufs[8]), 3u);  // inout grew by one
  EXPECT_EQ(f.at<uint64_t>(8, 8)[2], 77u);
  EXPECT_EQ(f.params[4].reply_length, 32u);
}

TEST(Skeleton, ApplicationErrorAndException) {
  KitchenImpl k;
  FakeCall hot = MixedCall(99);
  EXPECT_EQ(k.Handle(hot.call), 0x42);
  FakeCall boom = MixedCall(-1);
  EXPECT_EQ(k.Handle(boom.call), naarpc::kNaaStatusKernelFailed);
  EXPECT_EQ(boom.call.failure_detail, "Kitchen.Mixed: the kernel threw 'boom'");
  // var_out holds at most 10: asking for 11 fails the call, never truncates.
  FakeCall too_long = MixedCall(11);
  EXPECT_EQ(k.Handle(too_long.call), naarpc::kNaaStatusKernelFailed);
  EXPECT_NE(too_long.call.failure_detail.find("asked for 11 elements of 'var_out', more than its "
                                              "maximum 10"),
            std::string::npos)
      << too_long.call.failure_detail;
}

TEST(Skeleton, TimeoutsAndCodesFromIdl) {
  KitchenImpl k;
  EXPECT_EQ(k.KernelTimeout(7), std::chrono::milliseconds(100));
  EXPECT_EQ(k.KernelTimeout(127), std::chrono::milliseconds(250));  // service default
  EXPECT_EQ(k.KernelTimeout(8), std::chrono::milliseconds::zero());
  EXPECT_EQ(std::vector<uint8_t>(k.function_codes().begin(), k.function_codes().end()),
            (std::vector<uint8_t>{7, 127}));
  EXPECT_EQ(golden::KitchenClientInterface::kMixedDefaultDeadline, std::chrono::milliseconds(400));
  EXPECT_EQ(golden::KitchenClientInterface::kEchoDefaultDeadline, std::chrono::milliseconds(1250));
}

TEST(Composite, DispatchesAcrossServicesAndRejectsClashes) {
  KitchenImpl k;
  SecondImpl s;
  auto h = naarpc::codegen::CompositeHandler::Create({&k, &s});
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  FakeCall ping(1, Dialect::kSpec, {4}, {true});
  *ping.at<uint32_t>(0) = 41;
  EXPECT_EQ((*h)->Handle(ping.call), 0);
  EXPECT_EQ(*ping.at<uint32_t>(0), 42u);
  FakeCall echo = EchoCall(Dialect::kSpec, 1);
  EXPECT_EQ((*h)->Handle(echo.call), 0);
  FakeCall unknown(9, Dialect::kSpec, {4}, {true});
  EXPECT_EQ((*h)->Handle(unknown.call), naarpc::kNaaStatusUnknownFunction);
  EXPECT_EQ((*h)->KernelTimeout(7), std::chrono::milliseconds(100));

  KitchenImpl k2;
  auto clash = naarpc::codegen::CompositeHandler::Create({&k, &k2});
  ASSERT_FALSE(clash.ok());
  EXPECT_EQ(clash.status().code(), naarpc::StatusCode::kInvalidArgument);
  EXPECT_NE(clash.status().message().find("function code 7 is served by both "
                                          "naarpc.testing.golden.Kitchen and "
                                          "naarpc.testing.golden.Kitchen"),
            std::string::npos)
      << clash.status().message();
}

TEST(ErrorNames, FromIdlAndStandard) {
  EXPECT_EQ(golden::KitchenErrorName(0x42), "TOO_HOT");
  EXPECT_EQ(golden::KitchenErrorName(0x10), "BAD_INPUT");
  EXPECT_EQ(golden::KitchenErrorName(0x02), "KERNEL_TIMEOUT");
  EXPECT_EQ(golden::KitchenErrorName(0x00), "OK");
  EXPECT_EQ(golden::KitchenErrorName(0x55), "");
  naarpc::Status wire = naarpc::Status(naarpc::StatusCode::kNaaError, "x").set_wire_code(0x42);
  naarpc::Status named =
      naarpc::codegen::AnnotateCallStatus(wire, "Kitchen.Mixed", golden::KitchenErrorName(0x42));
  EXPECT_EQ(named.message(), "Kitchen.Mixed: NAA status 0x42 TOO_HOT");
  EXPECT_EQ(named.wire_code(), 0x42);
  EXPECT_EQ(golden::KitchenErrorFromStatus(named), golden::KitchenError::kTooHot);
  EXPECT_EQ(golden::KitchenErrorFromStatus(naarpc::Status::Ok()), std::nullopt);
}

// A transport that only counts connection attempts.
class CountingTransport final : public naarpc::Transport {
 public:
  std::string_view name() const override { return "counting"; }
  using naarpc::Transport::Connect;
  naarpc::Result<std::unique_ptr<naarpc::Connection>> Connect(
      const std::string&, uint16_t, naarpc::Deadline, const naarpc::ConnectOptions&) override {
    ++connects;
    return naarpc::UnavailableError("no NAA here");
  }
  naarpc::Result<std::unique_ptr<naarpc::Listener>> Listen(const std::string&,
                                                           uint16_t) override {
    return naarpc::UnavailableError("unused");
  }
  std::atomic<int> connects{0};
};

TEST(Client, WrongSizesFailBeforeAnythingIsSent) {
  CountingTransport t;
  golden::KitchenClient client(t, "127.0.0.1", 1);
  std::vector<uint8_t> x(101), y;
  naarpc::Status st = client.Echo(x, &y);
  EXPECT_EQ(st.code(), naarpc::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "Kitchen.Echo: parameter 'x' takes at most 100 elements (u8), got 101; "
            "nothing was sent");
  EXPECT_EQ(client.Echo(std::vector<uint8_t>(3), nullptr).code(),
            naarpc::StatusCode::kInvalidArgument);

  std::vector<uint16_t> fixed_in(7);  // needs 8
  std::vector<double> var_in(1);
  std::vector<std::byte> blob(32);
  std::vector<int64_t> fixed_out(4);
  float scalar_out;
  std::vector<uint32_t> var_out;
  std::vector<int8_t> fixed_io(3);
  std::vector<uint64_t> var_io;
  st = client.Mixed(fixed_in, 1, var_in, blob, fixed_out, &scalar_out, &var_out, fixed_io,
                    &var_io);
  EXPECT_EQ(st.message(),
            "Kitchen.Mixed: parameter 'fixed_in' needs exactly 8 elements (u16), got 7; "
            "nothing was sent");
  EXPECT_EQ(client.MixedAsync(fixed_in, 1, var_in, blob, fixed_out, &scalar_out, &var_out,
                              fixed_io, &var_io).get().code(),
            naarpc::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.connects.load(), 0);

  // Right sizes: the client does try to connect, and names the routine.
  st = client.Echo(std::vector<uint8_t>(3), &y);
  EXPECT_EQ(st.code(), naarpc::StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("Kitchen.Echo"), std::string::npos) << st.message();
  EXPECT_EQ(t.connects.load(), 1);
}

}  // namespace
