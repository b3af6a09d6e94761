// naarpc against peers that behave like the NAAICE reference library
// (tests/naaice/reference_peer.h), in every direction, on both transports
// (verbs in the Soft-RoCE guest): naarpc's client against the reference
// NAA, the reference host against naarpc's NAA; stock kernels, error
// statuses, single-send regions (also as the only input), internal regions,
// user bits, several hosts at once, MRSP errors, an unknown function code, a
// spec-dialect call, a kernel timeout. Negative controls show the peers catch
// the two wire mistakes that broke real interop: a missing solicited-event bit
// (on the MRSP or only on the last write of a call or reply), and a status
// only in bits 0..7.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "naarpc/client_session.h"
#include "naarpc/naa_server.h"
#include "services/naaice_stock/stock_kernels.h"
#include "tests/naaice/reference_peer.h"
#include "tests/testing/forwarding_transport.h"
#include "tests/testing/test_transport.h"

namespace naarpc {
namespace {

using namespace std::chrono_literals;
using naaice::RefCall;
using naaice::ReferenceHost;
using naaice::ReferenceNaa;
using naaice::RefRegion;

constexpr uint8_t kIn = kRegionFlagInput, kOut = kRegionFlagOutput,
                  kSingle = kRegionFlagSingleSend, kInternal = kRegionFlagInternal;

// Test kernels, the same on both NAAs:
constexpr uint8_t kEchoUserBits = 20;  // first output <- user bits (4 bytes); status = bits & 0xff
constexpr uint8_t kAddCoeff = 21;      // y = x + coeff, bytewise: regions coeff, x, y
constexpr uint8_t kAccumulate = 22;    // internal acc (u64) += x; y = acc: regions x, y
constexpr uint8_t kOverrun = 24;       // naarpc NAA only: overruns its 50 ms limit
// kAddCoeff and kAccumulate check the layout they are given (what the NAA
// made of the MRSP) and answer kNaaStatusBadRegionLayout if it is not theirs:
// kAccumulate wants 2 parameter regions and one internal region of kAccBytes
// (the internal region is no parameter region, and has the requested size).
constexpr size_t kAccBytes = 64;

uint8_t EchoUserBits(uint32_t user_bits, std::span<std::byte> out) {
  std::memcpy(out.data(), &user_bits, 4);
  return static_cast<uint8_t>(user_bits & 0xff);
}
void AddCoeff(std::span<const std::byte> coeff, std::span<const std::byte> x,
              std::span<std::byte> y) {
  for (size_t i = 0; i < y.size(); ++i) y[i] = std::byte(uint8_t(x[i]) + uint8_t(coeff[i]));
}
void Accumulate(std::span<const std::byte> x, std::span<std::byte> acc, std::span<std::byte> y) {
  uint64_t a, v;
  std::memcpy(&a, acc.data(), 8);
  std::memcpy(&v, x.data(), 8);
  a += v;
  std::memcpy(acc.data(), &a, 8);
  std::memcpy(y.data(), &a, 8);
}

naaice::ReferenceNaaOptions RefKernels() {
  naaice::ReferenceNaaOptions o;
  o.kernels[kEchoUserBits] = [](RefCall& c) { return EchoUserBits(c.user_bits, c.regions.back()); };
  o.kernels[kAddCoeff] = [](RefCall& c) {
    if (c.regions.size() != 3 || !c.internal.empty()) return kNaaStatusBadRegionLayout;
    AddCoeff(c.regions[0], c.regions[1], c.regions[2]);
    return uint8_t{0};
  };
  o.kernels[kAccumulate] = [](RefCall& c) {
    if (c.regions.size() != 2 || c.internal.size() != 1 || c.internal[0].size() != kAccBytes) {
      return kNaaStatusBadRegionLayout;
    }
    Accumulate(c.regions[0], c.internal[0], c.regions[1]);
    return uint8_t{0};
  };
  return o;
}

// naarpc's NAA: the reference's stock kernels plus the test kernels.
class NaarpcKernels final : public NaaHandler {
 public:
  uint8_t Handle(NaaCall& call) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++handled_;
    }
    handled_cv_.notify_all();
    auto& p = call.params;
    switch (call.function_code) {
      case kEchoUserBits: return EchoUserBits(call.user_bits, p.back().data);
      case kAddCoeff:
        if (p.size() != 3 || !call.internal.empty()) return kNaaStatusBadRegionLayout;
        AddCoeff(p[0].data, p[1].data, p[2].data);
        return 0;
      case kAccumulate:
        if (p.size() != 2 || call.internal.size() != 1 || call.internal[0].size() != kAccBytes) {
          return kNaaStatusBadRegionLayout;
        }
        Accumulate(p[0].data, call.internal[0], p[1].data);
        return 0;
      case kOverrun: overrun_release_.wait(); return 0;
      default: return stock_.Handle(call);
    }
  }
  // Waits until the kernels have been called `n` times in all; false if
  // `deadline` passed first.
  bool WaitForCalls(uint64_t n, Deadline deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    return handled_cv_.wait_until(lock, deadline.when(), [&] { return handled_ >= n; });
  }
  std::chrono::milliseconds KernelTimeout(uint8_t code) const override {
    return code == kOverrun ? 50ms : std::chrono::milliseconds::zero();
  }
  void ReleaseOverrun() { overrun_released_.set_value(); }

 private:
  services::naaice_stock::NaaiceStockKernels stock_;
  std::mutex mu_;
  std::condition_variable handled_cv_;
  uint64_t handled_ = 0;  // guarded by mu_
  std::promise<void> overrun_released_;
  std::shared_future<void> overrun_release_ = overrun_released_.get_future().share();
};

// Clears the solicited-event bit of everything a connection posts.
class ForgetsSolicitedBit final : public testing::ForwardingConnection {
 public:
  using ForwardingConnection::ForwardingConnection;
  Status PostSend(std::span<const SendRequest> requests) override {
    std::vector<SendRequest> copy(requests.begin(), requests.end());
    for (SendRequest& r : copy) r.solicited = false;
    return inner().PostSend(copy);
  }
};

// Clears the solicited-event bit of the last write of every call or reply
// (the WRITE_WITH_IMM) only: the MRSP goes through, calls or replies stall.
class ForgetsSolicitedBitOnWriteWithImm final : public testing::ForwardingConnection {
 public:
  using ForwardingConnection::ForwardingConnection;
  Status PostSend(std::span<const SendRequest> requests) override {
    std::vector<SendRequest> copy(requests.begin(), requests.end());
    for (SendRequest& r : copy) {
      if (r.opcode == WorkOpcode::kRdmaWriteWithImm) r.solicited = false;
    }
    return inner().PostSend(copy);
  }
};

// Sends the status of a reply in bits 0..7 only (naarpc's former encoding).
class StatusInLowByteOnly final : public testing::ForwardingConnection {
 public:
  using ForwardingConnection::ForwardingConnection;
  Status PostSend(std::span<const SendRequest> requests) override {
    std::vector<SendRequest> copy(requests.begin(), requests.end());
    for (SendRequest& r : copy) {
      if (r.opcode == WorkOpcode::kRdmaWriteWithImm) r.imm_data &= 0xffu;
    }
    return inner().PostSend(copy);
  }
};

template <typename Decorator>
testing::WrappingTransport::Wrap Wrap() {
  return [](std::unique_ptr<Connection> c) -> std::unique_ptr<Connection> {
    return std::make_unique<Decorator>(std::move(c));
  };
}

void Fill(std::span<std::byte> b, uint8_t seed) {
  for (size_t i = 0; i < b.size(); ++i) b[i] = std::byte(uint8_t(seed + i));
}
::testing::AssertionResult BytesAre(std::span<const std::byte> b, uint8_t seed) {
  for (size_t i = 0; i < b.size(); ++i) {
    if (uint8_t(b[i]) != uint8_t(seed + i)) {
      return ::testing::AssertionFailure()
             << "byte " << i << " is " << int(uint8_t(b[i])) << ", expected " << int(uint8_t(seed + i));
    }
  }
  return ::testing::AssertionSuccess();
}
::testing::AssertionResult AllBytesAre(std::span<const std::byte> b, uint8_t v) {
  for (size_t i = 0; i < b.size(); ++i) {
    if (uint8_t(b[i]) != v) {
      return ::testing::AssertionFailure() << "byte " << i << " is " << int(uint8_t(b[i]))
                                           << ", expected " << int(v);
    }
  }
  return ::testing::AssertionSuccess();
}

// A reference host's call as text: its status number, or why it failed.
std::string StatusOf(ReferenceHost& h, uint8_t code, uint32_t user_bits, Deadline deadline) {
  Result<uint8_t> st = h.Call(code, user_bits, deadline);
  return st.ok() ? std::to_string(*st) : st.status().ToString();
}

class InteropTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    testing::TestTransport t = testing::MakeTestTransport(GetParam());
    if (!t.unavailable.empty()) GTEST_SKIP() << t.unavailable;
    transport_ = std::move(t.transport);
    address_ = t.address;
  }

  // --- naarpc host -> reference NAA
  void StartReferenceNaa(naaice::ReferenceNaaOptions options = RefKernels()) {
    auto naa = ReferenceNaa::Start(*transport_, address_, 0, std::move(options));
    ASSERT_TRUE(naa.ok()) << naa.status().ToString();
    ref_naa_ = std::move(naa).value();
  }
  Result<std::unique_ptr<ClientSession>> OpenOnReferenceNaa(std::vector<RegionSpec> layout,
                                                            Transport* via = nullptr,
                                                            ClientOptions options = {}) {
    options.dialect = Dialect::kReference;
    return ClientSession::Open(via ? *via : *transport_, address_, ref_naa_->port(),
                               std::move(layout), options);
  }
  void ExpectNoViolations() {
    if (ref_naa_ == nullptr) return;
    for (const std::string& v : ref_naa_->violations()) ADD_FAILURE() << "reference NAA: " << v;
  }

  // --- reference host -> naarpc NAA
  void StartNaarpcNaa(Transport* via = nullptr, NaaHandler* handler = nullptr) {
    auto s = NaaServer::Start(via ? *via : *transport_, address_, 0,
                              handler ? *handler : kernels_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    naarpc_naa_ = std::move(s).value();
  }
  // Strict completion order on the emulated transport (which keeps wire
  // order like an HCA); Soft-RoCE reorders on its own (reference_peer.h).
  Result<std::unique_ptr<ReferenceHost>> ReferenceHostOnNaarpc(std::vector<RefRegion> regions,
                                                               Deadline deadline = Deadline::After(20s)) {
    return ReferenceHost::Connect(*transport_, address_, naarpc_naa_->port(), std::move(regions),
                                  deadline, /*strict_order=*/GetParam() != "verbs");
  }

  void TearDown() override {
    ExpectNoViolations();
    if (naarpc_naa_) naarpc_naa_->Shutdown();
    if (ref_naa_) ref_naa_->Shutdown();
  }

  std::string address_;
  std::unique_ptr<Transport> transport_;
  NaarpcKernels kernels_;
  std::unique_ptr<ReferenceNaa> ref_naa_;
  std::unique_ptr<NaaServer> naarpc_naa_;
};

// ===== naarpc's client against the reference NAA ==============================

TEST_P(InteropTest, NaarpcClientRunsTheStockKernelsOfTheReferenceNaa) {
  StartReferenceNaa();
  auto s = OpenOnReferenceNaa({{"in", Direction::kIn, 100},
                               {"inout", Direction::kInOut, 37},
                               {"out", Direction::kOut, 4096}});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Fill((*s)->buffer(0), 10);
  // The reference NAA writes every output region back whole, on every call
  // (function 3 too): "out" shows its own buffer, incremented by every call,
  // over whatever the host left there.
  uint8_t out_total = 0;
  for (uint8_t code : {1, 2, 3, 1}) {
    Fill((*s)->buffer(1), 50);
    std::fill((*s)->buffer(2).begin(), (*s)->buffer(2).end(), std::byte{0xee});
    Status st = (*s)->Call(code, Deadline::After(20s));
    ASSERT_TRUE(st.ok()) << "function " << int(code) << ": " << st.ToString();
    const uint8_t add = code == 3 ? 0 : code;
    out_total = uint8_t(out_total + add);
    EXPECT_TRUE(BytesAre((*s)->buffer(1), uint8_t(50 + add))) << "function " << int(code);
    EXPECT_TRUE(AllBytesAre((*s)->buffer(2), out_total)) << "function " << int(code);
  }
  EXPECT_TRUE(BytesAre((*s)->buffer(0), 10));
  EXPECT_EQ(ref_naa_->calls_answered(), 4u);
}

TEST_P(InteropTest, NaarpcClientPassesUserBitsAndGetsApplicationErrors) {
  StartReferenceNaa();
  auto s = OpenOnReferenceNaa({{"x", Direction::kIn, 8}, {"y", Direction::kOut, 8}});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  CallOptions options;
  options.user_bits = 0xabcd00;  // low byte 0: success
  Status st = (*s)->Call(kEchoUserBits, Deadline::After(20s), options);
  ASSERT_TRUE(st.ok()) << st.ToString();
  uint32_t seen = 0;
  std::memcpy(&seen, (*s)->buffer(1).data(), 4);
  EXPECT_EQ(seen, 0xabcd00u);
  options.user_bits = 0x000011;  // the NAA answers status 0x11 (in bits 0..7)
  st = (*s)->Call(kEchoUserBits, Deadline::After(20s), options);
  EXPECT_EQ(st.code(), StatusCode::kNaaError) << st.ToString();
  EXPECT_EQ(st.wire_code(), std::optional<uint8_t>(0x11));
  // An application error leaves the session usable.
  options.user_bits = 0x000100;
  EXPECT_TRUE((*s)->Call(kEchoUserBits, Deadline::After(20s), options).ok());
}

TEST_P(InteropTest, NaarpcClientSendsASingleSendRegionOnlyOnce) {
  StartReferenceNaa();
  RegionSpec coeff{"coeff", Direction::kIn, 64};
  coeff.single_send = true;
  auto s = OpenOnReferenceNaa({coeff, {"x", Direction::kIn, 64}, {"y", Direction::kOut, 64}});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::fill((*s)->buffer(0).begin(), (*s)->buffer(0).end(), std::byte{5});
  Fill((*s)->buffer(1), 0);
  ASSERT_TRUE((*s)->Call(kAddCoeff, Deadline::After(20s)).ok());
  EXPECT_TRUE(BytesAre((*s)->buffer(2), 5));
  // Not sent again: the NAA keeps the first coefficients.
  std::fill((*s)->buffer(0).begin(), (*s)->buffer(0).end(), std::byte{9});
  Fill((*s)->buffer(1), 100);
  ASSERT_TRUE((*s)->Call(kAddCoeff, Deadline::After(20s)).ok());
  EXPECT_TRUE(BytesAre((*s)->buffer(2), 105));
}

// With a single-send region as its only input there is nothing to write
// after the first call; the call must reach the reference NAA all the same.
TEST_P(InteropTest, NaarpcClientCallsWhenASingleSendRegionIsItsOnlyInput) {
  StartReferenceNaa();
  RegionSpec coeff{"coeff", Direction::kIn, 64};
  coeff.single_send = true;
  auto s = OpenOnReferenceNaa({coeff, {"y", Direction::kOut, 64}});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::fill((*s)->buffer(0).begin(), (*s)->buffer(0).end(), std::byte{9});
  for (uint8_t call = 1; call <= 3; ++call) {
    std::fill((*s)->buffer(1).begin(), (*s)->buffer(1).end(), std::byte{0xee});
    Status st = (*s)->Call(1, Deadline::After(20s));
    ASSERT_TRUE(st.ok()) << "call " << int(call) << ": " << st.ToString();
    // Function 1 adds 1 to the NAA's "y" on every call and writes it back.
    EXPECT_TRUE(AllBytesAre((*s)->buffer(1), call)) << "call " << int(call);
  }
  EXPECT_EQ(ref_naa_->calls_answered(), 3u);
}

TEST_P(InteropTest, NaarpcClientUsesAnInternalRegionOfTheReferenceNaa) {
  StartReferenceNaa();
  auto s = OpenOnReferenceNaa({{"x", Direction::kIn, 8},
                               {"y", Direction::kOut, 8},
                               {"acc", Direction::kInternal, kAccBytes}});
  ASSERT_TRUE(s.ok()) << s.status().ToString();  // not advertised back
  EXPECT_TRUE((*s)->buffer(2).empty()) << "an internal region has no host buffer";
  uint64_t expected = 0;
  for (uint64_t x : {7u, 35u, 1000u}) {
    std::memcpy((*s)->buffer(0).data(), &x, 8);
    ASSERT_TRUE((*s)->Call(kAccumulate, Deadline::After(20s)).ok());
    expected += x;
    uint64_t y = 0;
    std::memcpy(&y, (*s)->buffer(1).data(), 8);
    EXPECT_EQ(y, expected);
  }
}

TEST_P(InteropTest, SeveralNaarpcClientsAtOnceOnOneReferenceNaa) {
  StartReferenceNaa();
  constexpr int kClients = 4, kCalls = 50;
  std::vector<std::thread> threads;
  std::vector<std::string> failures(kClients);
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      auto s = OpenOnReferenceNaa({{"data", Direction::kInOut, 512}});
      if (!s.ok()) {
        failures[c] = s.status().ToString();
        return;
      }
      for (int k = 0; k < kCalls; ++k) {
        const uint8_t seed = uint8_t(c * 31 + k);
        Fill((*s)->buffer(0), seed);
        Status st = (*s)->Call(2, Deadline::After(20s));
        if (!st.ok() || !BytesAre((*s)->buffer(0), uint8_t(seed + 2))) {
          failures[c] = "call " + std::to_string(k) + ": " + st.ToString();
          return;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int c = 0; c < kClients; ++c) EXPECT_EQ(failures[c], "") << "client " << c;
  EXPECT_EQ(ref_naa_->calls_answered(), uint64_t(kClients * kCalls));
}

TEST_P(InteropTest, AnUnknownFunctionCodeIsNeverAnsweredAndTheErrorSaysWhy) {
  StartReferenceNaa();
  auto s = OpenOnReferenceNaa({{"data", Direction::kInOut, 64}});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Status st = (*s)->Call(9, Deadline::After(500ms));
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_NE(st.message().find("never answers a function code it does not serve"),
            std::string::npos)
      << st.ToString();
  s->reset();  // disconnects: the NAA's connection ends, its counts are final
  ASSERT_TRUE(ref_naa_->WaitForClosedConnections(1, Deadline::After(20s)));
  EXPECT_EQ(ref_naa_->calls_ignored(), 1u);
}

// The reference NAA's MRSP errors (too many regions, not enough memory)
// reach naarpc's client as such, with the NAA's error code.
TEST_P(InteropTest, NaarpcClientGetsTheMrspErrorsOfTheReferenceNaa) {
  naaice::ReferenceNaaOptions limits = RefKernels();
  limits.max_regions = 4;
  limits.max_bytes = 4096;
  StartReferenceNaa(std::move(limits));
  auto too_many = OpenOnReferenceNaa(std::vector<RegionSpec>(5, {"r", Direction::kInOut, 64}));
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.status().code(), StatusCode::kMrspError) << too_many.status().ToString();
  EXPECT_EQ(too_many.status().wire_code(),
            std::optional<uint8_t>(uint8_t(MrspErrorCode::kTooManyRegions)));
  auto too_big = OpenOnReferenceNaa({{"in", Direction::kIn, 4096}, {"out", Direction::kOut, 64}});
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), StatusCode::kMrspError) << too_big.status().ToString();
  EXPECT_EQ(too_big.status().wire_code(),
            std::optional<uint8_t>(uint8_t(MrspErrorCode::kNotEnoughMemory)));
  // Within the limits the same NAA serves.
  auto fits = OpenOnReferenceNaa({{"in", Direction::kIn, 4000}, {"out", Direction::kOut, 64}});
  ASSERT_TRUE(fits.ok()) << fits.status().ToString();
  Status st = (*fits)->Call(3, Deadline::After(20s));
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(ref_naa_->calls_answered(), 1u);
}

// A naarpc client left in the spec dialect (request immediate without bit 7)
// against a reference NAA: the NAA never answers, and the client's error names
// the dialect it called in.
TEST_P(InteropTest, TheReferenceNaaNeverAnswersASpecDialectCall) {
  StartReferenceNaa();
  ClientOptions options;
  options.dialect = Dialect::kSpec;
  auto s = ClientSession::Open(*transport_, address_, ref_naa_->port(),
                               {{"data", Direction::kInOut, 64}}, options);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Status st = (*s)->Call(1, Deadline::After(500ms));
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_NE(st.message().find("in the spec dialect"), std::string::npos) << st.ToString();
  s->reset();  // disconnects: the NAA's connection ends, its counts are final
  ASSERT_TRUE(ref_naa_->WaitForClosedConnections(1, Deadline::After(20s)));
  EXPECT_EQ(ref_naa_->calls_answered(), 0u);
  EXPECT_EQ(ref_naa_->calls_ignored(), 1u);
  const std::vector<std::string> violations = ref_naa_->TakeViolations();
  ASSERT_EQ(violations.size(), 1u);
  EXPECT_NE(violations[0].find("without bit 7"), std::string::npos) << violations[0];
}

// Negative control: without the solicited bit the reference NAA is never
// woken by the MRSP request (it lands and is acknowledged), so naarpc's
// client waits in vain, and says what it saw.
TEST_P(InteropTest, WithoutTheSolicitedBitTheReferenceNaaNeverAnswers) {
  StartReferenceNaa();
  testing::WrappingTransport forgetful(*transport_, Wrap<ForgetsSolicitedBit>());
  ClientOptions options;
  // Long enough for the NAA's thread to take (acknowledge) the request on a
  // loaded machine.
  options.mrsp_timeout = 3s;
  auto s = OpenOnReferenceNaa({{"data", Direction::kInOut, 64}}, &forgetful, options);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kDeadlineExceeded) << s.status().ToString();
  EXPECT_NE(s.status().message().find("acknowledged the request but sent no answer"),
            std::string::npos)
      << s.status().ToString();
  EXPECT_EQ(ref_naa_->calls_answered(), 0u);
}

// Negative control: the MRSP carries the solicited bit, the call's last write
// does not: the call lands, and the reference NAA never sees it.
TEST_P(InteropTest, WithoutTheSolicitedBitOnItsLastWriteTheReferenceNaaNeverSeesTheCall) {
  StartReferenceNaa();
  testing::WrappingTransport forgetful(*transport_, Wrap<ForgetsSolicitedBitOnWriteWithImm>());
  auto s = OpenOnReferenceNaa({{"data", Direction::kInOut, 64}}, &forgetful);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Status st = (*s)->Call(1, Deadline::After(1s));
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  s->reset();  // disconnects: the NAA's connection ends, its counts are final
  ASSERT_TRUE(ref_naa_->WaitForClosedConnections(1, Deadline::After(20s)));
  EXPECT_EQ(ref_naa_->calls_answered(), 0u);
  EXPECT_EQ(ref_naa_->calls_ignored(), 0u);
}

// ===== the reference host against naarpc's NAA ================================

TEST_P(InteropTest, ReferenceHostRunsTheStockKernelsOnNaarpc) {
  services::naaice_stock::NaaiceStockKernels stock;  // what naa_server --naaice-stock-kernels serves
  StartNaarpcNaa(nullptr, &stock);
  auto h = ReferenceHostOnNaarpc(
      {{100, kIn}, {37, uint8_t(kIn | kOut)}, {4096, kOut}, {256, kInternal}});
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  Fill((*h)->buffer(0), 10);
  // Every output region written back whole on every call (function 3 too),
  // as the reference NAA does: over whatever the host left there.
  uint8_t out_total = 0;
  for (uint8_t code : {1, 2, 3, 2}) {
    Fill((*h)->buffer(1), 50);
    std::fill((*h)->buffer(2).begin(), (*h)->buffer(2).end(), std::byte{0xee});
    auto status = (*h)->Call(code, 0, Deadline::After(20s));
    ASSERT_TRUE(status.ok()) << status.status().ToString();
    EXPECT_EQ(*status, 0) << "function " << int(code);
    const uint8_t add = code == 3 ? 0 : code;
    out_total = uint8_t(out_total + add);
    EXPECT_TRUE(BytesAre((*h)->buffer(1), uint8_t(50 + add))) << "function " << int(code);
    EXPECT_TRUE(AllBytesAre((*h)->buffer(2), out_total)) << "function " << int(code);
  }
}

// The reference host reads the status from bits 8..15: it sees naarpc's
// errors (naarpc sends them in both bytes to reference-dialect hosts).
TEST_P(InteropTest, ReferenceHostSeesNaarpcErrorStatuses) {
  StartNaarpcNaa();
  auto h = ReferenceHostOnNaarpc({{8, kIn}, {8, kOut}});
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  auto app = (*h)->Call(kEchoUserBits, 0x11, Deadline::After(20s));
  ASSERT_TRUE(app.ok()) << app.status().ToString();
  EXPECT_EQ(*app, 0x11);
  auto unknown = (*h)->Call(99, 0, Deadline::After(20s));
  ASSERT_TRUE(unknown.ok()) << unknown.status().ToString();
  EXPECT_EQ(*unknown, kNaaStatusUnknownFunction);
  auto fine = (*h)->Call(kEchoUserBits, 0xabcd00, Deadline::After(20s));
  ASSERT_TRUE(fine.ok()) << fine.status().ToString();
  EXPECT_EQ(*fine, 0);
  uint32_t seen = 0;
  std::memcpy(&seen, (*h)->buffer(1).data(), 4);
  EXPECT_EQ(seen, 0xabcd00u);  // user bits reach naarpc's kernel
}

TEST_P(InteropTest, ReferenceHostSingleSendAndInternalRegionsOnNaarpc) {
  StartNaarpcNaa();
  auto h = ReferenceHostOnNaarpc({{64, uint8_t(kIn | kSingle)}, {64, kIn}, {64, kOut}});
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  std::fill((*h)->buffer(0).begin(), (*h)->buffer(0).end(), std::byte{5});
  Fill((*h)->buffer(1), 0);
  ASSERT_EQ(StatusOf(**h, kAddCoeff, 0, Deadline::After(20s)), "0");
  EXPECT_TRUE(BytesAre((*h)->buffer(2), 5));
  std::fill((*h)->buffer(0).begin(), (*h)->buffer(0).end(), std::byte{9});  // not sent again
  Fill((*h)->buffer(1), 100);
  ASSERT_EQ(StatusOf(**h, kAddCoeff, 0, Deadline::After(20s)), "0");
  EXPECT_TRUE(BytesAre((*h)->buffer(2), 105));

  auto acc = ReferenceHostOnNaarpc({{8, kIn}, {8, kOut}, {kAccBytes, kInternal}});
  ASSERT_TRUE(acc.ok()) << acc.status().ToString();
  uint64_t expected = 0;
  for (uint64_t x : {3u, 4u, 5000u}) {
    std::memcpy((*acc)->buffer(0).data(), &x, 8);
    ASSERT_EQ(StatusOf(**acc, kAccumulate, 0, Deadline::After(20s)), "0");
    expected += x;
    uint64_t y = 0;
    std::memcpy(&y, (*acc)->buffer(1).data(), 8);
    EXPECT_EQ(y, expected);
  }
}

// The reference host's only input is single-send: after the first call it
// carries the request in a zero-length WRITE_WITH_IMM, which naarpc serves.
TEST_P(InteropTest, ReferenceHostCallsNaarpcWhenASingleSendRegionIsItsOnlyInput) {
  StartNaarpcNaa();
  auto h = ReferenceHostOnNaarpc({{64, uint8_t(kIn | kSingle)}, {64, kOut}});
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  std::fill((*h)->buffer(0).begin(), (*h)->buffer(0).end(), std::byte{9});
  for (uint8_t call = 1; call <= 3; ++call) {
    std::fill((*h)->buffer(1).begin(), (*h)->buffer(1).end(), std::byte{0xee});
    ASSERT_EQ(StatusOf(**h, 1, 0, Deadline::After(20s)), "0") << "call " << int(call);
    // Function 1 adds 1 to the NAA's output region on every call.
    EXPECT_TRUE(AllBytesAre((*h)->buffer(1), call)) << "call " << int(call);
  }
}

// naarpc's NAA refuses more regions than its limit with MRSP error 0x03,
// which the reference host reads as such.
TEST_P(InteropTest, ReferenceHostGetsTheMrspErrorOfNaarpc) {
  StartNaarpcNaa();
  auto h = ReferenceHostOnNaarpc(
      std::vector<RefRegion>(kDefaultNaaMaxRegions + 1, RefRegion{64, uint8_t(kIn | kOut)}));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kMrspError) << h.status().ToString();
  EXPECT_EQ(h.status().wire_code(),
            std::optional<uint8_t>(uint8_t(MrspErrorCode::kTooManyRegions)));
}

// The reference host's own precondition (internal regions come last, as the
// library requires): a test cannot send a layout the reference never would.
TEST_P(InteropTest, ReferenceHostRefusesAnInternalRegionBeforeAParameterRegion) {
  auto h = ReferenceHost::Connect(*transport_, address_, /*port=*/1,
                                  {{64, kInternal}, {64, uint8_t(kIn | kOut)}},
                                  Deadline::After(20s));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument) << h.status().ToString();
}

TEST_P(InteropTest, SeveralReferenceHostsAtOnceOnNaarpc) {
  StartNaarpcNaa();
  constexpr int kHosts = 4, kCalls = 50;
  std::vector<std::thread> threads;
  std::vector<std::string> failures(kHosts);
  std::atomic<uint64_t> reordered{0};
  for (int c = 0; c < kHosts; ++c) {
    threads.emplace_back([&, c] {
      auto h = ReferenceHostOnNaarpc({{512, uint8_t(kIn | kOut)}});
      struct Count {
        std::atomic<uint64_t>& total;
        ReferenceHost* host;
        ~Count() { if (host) total += host->reordered_replies(); }
      } count{reordered, h.ok() ? h->get() : nullptr};
      if (!h.ok()) {
        failures[c] = h.status().ToString();
        return;
      }
      for (int k = 0; k < kCalls; ++k) {
        const uint8_t seed = uint8_t(c * 17 + k);
        Fill((*h)->buffer(0), seed);
        auto st = (*h)->Call(1, 0, Deadline::After(20s));
        if (!st.ok() || *st != 0 || !BytesAre((*h)->buffer(0), uint8_t(seed + 1))) {
          failures[c] = "call " + std::to_string(k) + ": " +
                        (st.ok() ? "status " + std::to_string(*st) : st.status().ToString());
          return;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int c = 0; c < kHosts; ++c) EXPECT_EQ(failures[c], "") << "host " << c;
  // Informational (Soft-RoCE only; always 0 where completion order is kept).
  std::printf("replies polled before the host's write completion: %llu of %d\n",
              static_cast<unsigned long long>(reordered.load()), kHosts * kCalls);
}

// A kernel timeout ends the connection (docs/protocol.md 7.4): the reference
// host, which knows nothing of that, reads 0x02 and its next call on the
// same connection fails instead of returning stale or clobbered data.
TEST_P(InteropTest, KernelTimeoutEndsTheReferenceHostsConnection) {
  StartNaarpcNaa();
  auto h = ReferenceHostOnNaarpc({{64, kIn}, {64, kOut}});
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  auto st = (*h)->Call(kOverrun, 0, Deadline::After(20s));
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(*st, kNaaStatusKernelTimeout);
  auto next = (*h)->Call(1, 0, Deadline::After(20s));
  EXPECT_FALSE(next.ok()) << "status " << int(next.ok() ? *next : 0);
  kernels_.ReleaseOverrun();
}

// Negative control: a status in bits 0..7 only reads as success to the
// reference host; this is why naarpc sends both bytes.
TEST_P(InteropTest, AStatusInBits0To7OnlyLooksLikeSuccessToTheReferenceHost) {
  testing::WrappingTransport low_byte(*transport_, Wrap<StatusInLowByteOnly>());
  StartNaarpcNaa(&low_byte);
  auto h = ReferenceHostOnNaarpc({{8, kIn}, {8, kOut}});
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  auto st = (*h)->Call(kEchoUserBits, 0x11, Deadline::After(20s));
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(*st, 0);  // 0x11 lost
}

// Negative control: without the solicited bit on naarpc's MRSP answer the
// reference host is never woken.
TEST_P(InteropTest, WithoutTheSolicitedBitTheReferenceHostNeverWakes) {
  testing::WrappingTransport forgetful(*transport_, Wrap<ForgetsSolicitedBit>());
  StartNaarpcNaa(&forgetful);
  auto h = ReferenceHostOnNaarpc({{8, kIn}, {8, kOut}}, Deadline::After(1s));
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kDeadlineExceeded) << h.status().ToString();
}

// Negative control: naarpc's MRSP answer carries the solicited bit, its reply
// to a call does not: the call ran on naarpc's NAA, and the reference host is
// never woken for the reply.
TEST_P(InteropTest, WithoutTheSolicitedBitOnTheReplyTheReferenceHostNeverWakes) {
  testing::WrappingTransport forgetful(*transport_, Wrap<ForgetsSolicitedBitOnWriteWithImm>());
  StartNaarpcNaa(&forgetful);
  auto h = ReferenceHostOnNaarpc({{8, kIn}, {8, kOut}});
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  auto st = (*h)->Call(1, 0, Deadline::After(1s));
  ASSERT_FALSE(st.ok()) << "status " << int(*st);
  EXPECT_EQ(st.status().code(), StatusCode::kDeadlineExceeded) << st.status().ToString();
  EXPECT_TRUE(kernels_.WaitForCalls(1, Deadline::After(20s))) << "the call never reached the NAA";
}

INSTANTIATE_TEST_SUITE_P(Transports, InteropTest, ::testing::Values("emulated", "verbs"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace naarpc
