// End to end through generated stubs and skeletons: every service, both wire
// dialects, sync / async / zero-copy, application errors, kernel timeouts and
// client deadlines, wrong argument sizes, an unknown function code.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cmath>
#include <cstdlib>
#include <future>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "naarpc/impl/codegen_support.h"
#include "naarpc/naa_server.h"
#include "naarpc/transport_factory.h"
#include "runtime/transport_impl/verbs/verbs_transport.h"
#include "services/accumulator/accumulator_service.h"
#include "services/checked/checked_service.h"
#include "services/increment/increment_service.h"
#include "services/matrix/matrix_service.h"
#include "services/vector/vector_service.h"
#include "tests/services/testing.naa.h"
#include "tests/testing/release_gate.h"

namespace {

using naarpc::Dialect;
using naarpc::StatusCode;
namespace vec = naarpc::services::vector;
namespace mat = naarpc::services::matrix;
namespace acc = naarpc::services::accumulator;
namespace chk = naarpc::services::checked;
namespace inc = naarpc::services::increment;
namespace e2e = naarpc::testing::e2e;

// Sleep(ms) sleeps ms milliseconds; Sleep(kHeld) instead waits until the
// test releases it (naarpc::testing::ReleaseGate).
class SleepyImpl final : public e2e::SleepyService {
 public:
  static constexpr uint32_t kHeld = UINT32_MAX;
  e2e::SleepyError Sleep(const naarpc::NaaCall&, uint32_t ms, uint32_t& slept) override {
    if (ms == kHeld) {
      held_.Wait();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    }
    slept = ms;
    return e2e::SleepyError::kOk;
  }
  e2e::SleepyError Nap(const naarpc::NaaCall& call, uint32_t ms, uint32_t& slept) override {
    return Sleep(call, ms, slept);
  }
  // Lets `n` held kernels return.
  void Release(uint64_t n = 1) { held_.Release(n); }

 private:
  naarpc::testing::ReleaseGate held_;
};

// Wait: signals that it runs (the first time), then waits until released
// (once released, it returns at once); y = x.
class LatchImpl final : public e2e::LatchService {
 public:
  e2e::LatchError Wait(const naarpc::NaaCall&, uint32_t x, uint32_t& y) override {
    std::call_once(started_once_, [&] { started_.set_value(); });
    release_.wait();
    y = x;
    return e2e::LatchError::kOk;
  }
  void AwaitStarted() { started_.get_future().wait(); }
  void Release() {
    std::call_once(released_once_, [&] { released_.set_value(); });
  }

 private:
  std::once_flag started_once_, released_once_;
  std::promise<void> started_, released_;
  std::shared_future<void> release_ = released_.get_future().share();
};

struct ServicesParam {
  const char* transport;
  Dialect dialect;
};

// Address of the NAA: loopback, or the rxe netdev's inside the Soft-RoCE guest.
std::string Address(const char* transport) {
  if (std::string(transport) == "verbs") {
    if (const char* a = std::getenv("NAARPC_TEST_ADDRESS")) return a;
  }
  return "127.0.0.1";
}

class ServicesTest : public ::testing::TestWithParam<ServicesParam> {
 protected:
  void SetUp() override {
    if (std::string(GetParam().transport) == "verbs" && !naarpc::RdmaDeviceAvailable()) {
      GTEST_SKIP() << "no RDMA device here; the verbs cases run inside the Soft-RoCE guest "
                      "(//tools/rxe-vm)";
    }
    address_ = Address(GetParam().transport);
    auto t = naarpc::NewTransport(GetParam().transport);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    transport_ = std::move(t).value();
    auto h = naarpc::codegen::CompositeHandler::Create(
        {&vector_, &matrix_, &accumulator_, &checked_, &increment_, &sleepy_, &latch_});
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    handler_ = std::move(h).value();
    auto s = naarpc::NaaServer::Start(*transport_, address_, 0, *handler_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
    options_.session.dialect = GetParam().dialect;
  }
  void TearDown() override {
    // Kernels a failed test left held must not outlive their handlers.
    sleepy_.Release(1'000);
    latch_.Release();
    if (server_) server_->Shutdown();
  }
  template <typename Client>
  std::unique_ptr<Client> Make() {
    return std::make_unique<Client>(*transport_, address_, server_->port(), options_);
  }

  std::string address_;
  vec::VectorArithServiceImpl vector_;
  mat::MatrixServiceImpl matrix_;
  acc::AccumulatorServiceImpl accumulator_;
  chk::CheckedMathServiceImpl checked_;
  inc::IncrementServiceImpl increment_;
  SleepyImpl sleepy_;
  LatchImpl latch_;
  std::unique_ptr<naarpc::Transport> transport_;
  std::unique_ptr<naarpc::codegen::CompositeHandler> handler_;
  std::unique_ptr<naarpc::NaaServer> server_;
  naarpc::codegen::StubOptions options_;
  std::mt19937 rng_{42};
};

std::vector<float> RandomFloats(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> d(-100, 100);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST_P(ServicesTest, VectorFixedSizeRoutines) {
  auto client = Make<vec::VectorArithClient>();
  for (int round = 0; round < 3; ++round) {
    auto a = RandomFloats(rng_, 1024), b = RandomFloats(rng_, 1024);
    std::vector<float> sum(1024), diff(1024), prod(1024);
    ASSERT_TRUE(client->Add(a, b, sum).ok());
    ASSERT_TRUE(client->Sub(a, b, diff).ok());
    ASSERT_TRUE(client->Mul(a, b, prod).ok());
    for (size_t i = 0; i < 1024; ++i) {
      ASSERT_EQ(sum[i], a[i] + b[i]);
      ASSERT_EQ(diff[i], a[i] - b[i]);
      ASSERT_EQ(prod[i], a[i] * b[i]);
    }
  }
}

TEST_P(ServicesTest, VectorVariableLengthRoutines) {
  auto client = Make<vec::VectorArithClient>();
  for (size_t n : {size_t{0}, size_t{1}, size_t{777}, size_t{65536}}) {
    std::vector<double> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = static_cast<double>(i) - 3.5;
    std::vector<double> scaled = x;
    ASSERT_TRUE(client->Scale(-2.0, &scaled).ok()) << n;
    ASSERT_EQ(scaled.size(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(scaled[i], -2.0 * x[i]);
    double dot = -1, want = 0;
    for (size_t i = 0; i < n; ++i) want += x[i] * scaled[i];
    ASSERT_TRUE(client->Dot(x, scaled, &dot).ok());
    EXPECT_EQ(dot, want);
  }
  std::vector<int64_t> in = {5, -1, 10, 0, 7}, sums;
  ASSERT_TRUE(client->Prefix(in, &sums).ok());
  EXPECT_EQ(sums, (std::vector<int64_t>{5, 4, 14, 14, 21}));
}

TEST_P(ServicesTest, KernelExceptionIsKernelFailed) {
  auto client = Make<vec::VectorArithClient>();
  double dot = 0;
  naarpc::Status st = client->Dot(std::vector<double>{1, 2}, std::vector<double>{1}, &dot);
  EXPECT_EQ(st.code(), StatusCode::kNaaError);
  EXPECT_EQ(st.wire_code(), naarpc::kNaaStatusKernelFailed);
  EXPECT_NE(st.message().find("KERNEL_FAILED"), std::string::npos) << st.message();
  EXPECT_TRUE(client->Dot(std::vector<double>{2}, std::vector<double>{3}, &dot).ok());
  EXPECT_EQ(dot, 6.0);
}

TEST_P(ServicesTest, AsyncCallsRunConcurrently) {
  auto client = Make<vec::VectorArithClient>();
  constexpr int kCalls = 12;
  std::vector<std::vector<float>> as, bs, outs(kCalls, std::vector<float>(1024));
  for (int i = 0; i < kCalls; ++i) {
    as.push_back(RandomFloats(rng_, 1024));
    bs.push_back(RandomFloats(rng_, 1024));
  }
  std::vector<std::future<naarpc::Status>> futures;
  for (int i = 0; i < kCalls; ++i) futures.push_back(client->AddAsync(as[i], bs[i], outs[i]));
  for (int i = 0; i < kCalls; ++i) {
    naarpc::Status st = futures[i].get();
    ASSERT_TRUE(st.ok()) << st.ToString();
    for (size_t j = 0; j < 1024; ++j) ASSERT_EQ(outs[i][j], as[i][j] + bs[i][j]);
  }
  // Never more connections for Add than the pool allows.
  EXPECT_GE(server_->connections_accepted(), 1u);
  EXPECT_LE(server_->connections_accepted(), options_.max_sessions_per_routine);
}

TEST_P(ServicesTest, CallbackFormDeliversTheStatusAndResults) {
  auto client = Make<vec::VectorArithClient>();
  std::vector<float> a = RandomFloats(rng_, 1024), b = RandomFloats(rng_, 1024), out(1024);
  std::promise<naarpc::Status> done;
  client->AddAsync(a, b, out, [&](naarpc::Status st) { done.set_value(std::move(st)); });
  naarpc::Status st = done.get_future().get();
  ASSERT_TRUE(st.ok()) << st.ToString();
  for (size_t j = 0; j < 1024; ++j) ASSERT_EQ(out[j], a[j] + b[j]);
}

// A dropped future does not wait for its call (the test would deadlock:
// the call is running and ends only after Release()). Destroying the client
// afterwards ends the call either way (answered, or cancelled: see
// async_engine_test).
TEST_P(ServicesTest, DroppedFutureDoesNotWaitForItsCall) {
  auto client = Make<e2e::LatchClient>();
  uint32_t y = 0;
  (void)client->WaitAsync(42, &y, naarpc::Deadline::After(std::chrono::seconds(60)));
  latch_.AwaitStarted();
  latch_.Release();
  client.reset();
  EXPECT_TRUE(y == 0 || y == 42) << y;
}

// A zero-copy call object keeps its connection and pool alive after the
// client is gone (it holds shared ownership; ASan would see a use after
// free otherwise).
TEST_P(ServicesTest, ZeroCopyCallOutlivesItsClient) {
  auto client = Make<vec::VectorArithClient>();
  auto call = client->NewAddCall();
  ASSERT_TRUE(call.ok()) << call.status().ToString();
  client.reset();
  for (size_t i = 0; i < 1024; ++i) {
    call->a()[i] = float(i);
    call->b()[i] = 2.0f;
  }
  naarpc::Status st = call->Invoke();
  ASSERT_TRUE(st.ok()) << st.ToString();
  for (size_t i = 0; i < 1024; ++i) ASSERT_EQ(call->out()[i], float(i) + 2.0f);
}

TEST_P(ServicesTest, ZeroCopyCallFillsRegisteredBuffersInPlace) {
  auto client = Make<vec::VectorArithClient>();
  auto call = client->NewAddCall();
  ASSERT_TRUE(call.ok()) << call.status().ToString();
  for (int round = 1; round <= 2; ++round) {
    std::span<float> a = call->a(), b = call->b();
    ASSERT_EQ(a.size(), 1024u);
    for (size_t i = 0; i < 1024; ++i) {
      a[i] = static_cast<float>(i * round);
      b[i] = 0.5f;
    }
    ASSERT_TRUE(call->Invoke().ok());
    for (size_t i = 0; i < 1024; ++i) ASSERT_EQ(call->out()[i], static_cast<float>(i * round) + 0.5f);
  }
  auto scale = client->NewScaleCall();
  ASSERT_TRUE(scale.ok());
  scale->factor()[0] = 3.0;
  scale->x()[0] = 1.5;
  scale->x()[1] = -2.0;
  scale->set_x_size(2);
  ASSERT_TRUE(scale->Invoke().ok());
  ASSERT_EQ(scale->x_size(), 2u);
  EXPECT_EQ(scale->x()[0], 4.5);
  EXPECT_EQ(scale->x()[1], -6.0);
  scale->set_x_size(65537);
  EXPECT_EQ(scale->Invoke().code(), StatusCode::kInvalidArgument);
}

TEST_P(ServicesTest, MatrixMultiply) {
  auto client = Make<mat::MatrixClient>();
  std::uniform_int_distribution<int> d(-4, 4);
  std::vector<float> a(4096), b(4096), c(4096);
  for (float& x : a) x = static_cast<float>(d(rng_));
  for (float& x : b) x = static_cast<float>(d(rng_));
  ASSERT_TRUE(client->Multiply(a, b, c).ok());
  for (size_t i = 0; i < 64; ++i) {
    for (size_t j = 0; j < 64; ++j) {
      float want = 0;
      for (size_t k = 0; k < 64; ++k) want += a[i * 64 + k] * b[k * 64 + j];
      ASSERT_EQ(c[i * 64 + j], want) << i << "," << j;
    }
  }
}

TEST_P(ServicesTest, AccumulatorKeepsStateInInternalRegionsPerConnection) {
  auto client = Make<acc::AccumulatorClient>();
  double total = 0;
  uint64_t count = 0;
  ASSERT_TRUE(client->Accumulate(std::vector<double>{1, 2, 3}, &total, &count).ok());
  EXPECT_EQ(total, 6.0);
  EXPECT_EQ(count, 3u);
  ASSERT_TRUE(client->Accumulate(std::vector<double>{10}, &total, &count).ok());
  EXPECT_EQ(total, 16.0);
  EXPECT_EQ(count, 4u);
  auto other = Make<acc::AccumulatorClient>();  // a new connection starts at zero
  ASSERT_TRUE(other->Accumulate(std::vector<double>{5}, &total, &count).ok());
  EXPECT_EQ(total, 5.0);
  EXPECT_EQ(count, 1u);
}

TEST_P(ServicesTest, ApplicationErrorsAreNamed) {
  auto client = Make<chk::CheckedMathClient>();
  std::vector<int32_t> q;
  naarpc::Status st = client->Divide(std::vector<int32_t>{6, 1}, std::vector<int32_t>{3, 0}, &q);
  EXPECT_EQ(st.code(), StatusCode::kNaaError);
  EXPECT_EQ(st.wire_code(), 0x11);
  EXPECT_EQ(chk::CheckedMathErrorFromStatus(st), chk::CheckedMathError::kDivisionByZero);
  EXPECT_EQ(st.message(), "CheckedMath.Divide: NAA status 0x11 DIVISION_BY_ZERO");

  st = client->Divide(std::vector<int32_t>{6, 1}, std::vector<int32_t>{3}, &q);
  EXPECT_EQ(chk::CheckedMathErrorFromStatus(st), chk::CheckedMathError::kLengthMismatch);
  st = client->Divide(std::vector<int32_t>{INT32_MIN}, std::vector<int32_t>{-1}, &q);
  EXPECT_EQ(chk::CheckedMathErrorFromStatus(st), chk::CheckedMathError::kOverflow);

  // The session survives application errors.
  ASSERT_TRUE(client->Divide(std::vector<int32_t>{7, -9}, std::vector<int32_t>{2, 3}, &q).ok());
  EXPECT_EQ(q, (std::vector<int32_t>{3, -3}));

  std::vector<int64_t> roots;
  st = client->Isqrt(std::vector<int64_t>{4, -1}, &roots);
  EXPECT_EQ(st.wire_code(), 0x13);
  EXPECT_NE(st.message().find("NEGATIVE_INPUT"), std::string::npos);
  ASSERT_TRUE(client->Isqrt(std::vector<int64_t>{0, 1, 15, 16, 1000000007}, &roots).ok());
  EXPECT_EQ(roots, (std::vector<int64_t>{0, 1, 3, 4, 31622}));
}

TEST_P(ServicesTest, IncrementEveryByte) {
  auto client = Make<inc::IncrementClient>();
  std::vector<uint8_t> data(4096);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7);
  const std::vector<uint8_t> before = data;
  ASSERT_TRUE(client->IncrementBytes(data).ok());
  for (size_t i = 0; i < data.size(); ++i) ASSERT_EQ(data[i], uint8_t(before[i] + 1));
}

TEST_P(ServicesTest, KernelTimeoutAndClientDeadline) {
  auto client = Make<e2e::SleepyClient>();
  uint32_t slept = 0;
  // Nap's own limit (a minute) overrides the service's 100 ms.
  ASSERT_TRUE(client->Nap(5, &slept).ok());
  EXPECT_EQ(slept, 5u);
  // Sleep overruns the service's 100 ms limit (the kernel is held until the
  // NAA has answered): the NAA reports 0x02. (The 60 s deadline only turns a
  // watchdog that never fires into a failure instead of a hang.)
  naarpc::Status st =
      client->Sleep(SleepyImpl::kHeld, &slept, naarpc::Deadline::After(std::chrono::seconds(60)));
  sleepy_.Release();
  EXPECT_EQ(st.code(), StatusCode::kNaaError) << st.ToString();
  EXPECT_EQ(st.wire_code(), naarpc::kNaaStatusKernelTimeout);
  EXPECT_NE(st.message().find("KERNEL_TIMEOUT"), std::string::npos) << st.message();
  // A caller's deadline ends a call to a kernel without a time limit that
  // waits until released: the client gives up.
  auto latched = Make<e2e::LatchClient>();
  uint32_t y = 0;
  st = latched->Wait(7, &y, naarpc::Deadline::After(std::chrono::milliseconds(20)));
  latch_.Release();
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  // The failed sessions are replaced on the next call.
  st = client->Nap(1, &slept, naarpc::Deadline::After(std::chrono::seconds(60)));
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(slept, 1u);
  st = latched->Wait(8, &y, naarpc::Deadline::After(std::chrono::seconds(60)));
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(y, 8u);
}

// A stub's deadline bounds connect + MRSP + call: against an NAA that takes
// the connection and never answers the MRSP, a call with a short deadline
// ends with it (not after the 10 s MRSP timeout), naming the phase.
TEST_P(ServicesTest, StubDeadlineCoversTheConnectionSetUp) {
  auto listener = transport_->Listen(address_, 0);
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  std::promise<void> done;
  std::thread silent([&] {
    auto conn = (*listener)->Accept(naarpc::Deadline::After(std::chrono::seconds(20)));
    if (!conn.ok()) return;
    std::vector<uint8_t> buf(naarpc::kMaxMrspMessageSize);
    auto mr = (*conn)->RegisterMemory(buf.data(), buf.size(), naarpc::kAccessLocalWrite);
    if (mr.ok()) {
      (*conn)->PostRecv(1, {(*mr)->remote_addr(), uint32_t(buf.size()), (*mr)->lkey()})
          .IgnoreError();
    }
    done.get_future().wait();  // holds the connection, never answers
  });
  vec::VectorArithClient client(*transport_, address_, (*listener)->port(), options_);
  std::vector<float> a(1024), b(1024), out(1024);
  naarpc::Status st = client.Add(a, b, out, naarpc::Deadline::After(std::chrono::seconds(1)));
  done.set_value();
  silent.join();
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  // Normally the MRSP phase ("... before the NAA acknowledged/answered the
  // MRSP request"); the connection phase if the accepting thread was slow to
  // run. Either way the call's deadline, not the 10 s MRSP timeout, ended it.
  EXPECT_NE(st.message().find("the call's deadline passed before the "), std::string::npos)
      << st.ToString();
}

TEST_P(ServicesTest, WrongSizesFailWithoutSending) {
  auto client = Make<vec::VectorArithClient>();
  std::vector<float> a(1023), b(1024), out(1024);
  naarpc::Status st = client->Add(a, b, out);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(),
            "VectorArith.Add: parameter 'a' needs exactly 1024 elements (f32), got 1023; "
            "nothing was sent");
  std::vector<double> big(65537);
  EXPECT_EQ(client->Scale(1.0, &big).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client->AddAsync(a, b, out).get().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(server_->connections_accepted(), 0u);
}

TEST_P(ServicesTest, UnknownFunctionCodeReachesServer) {
  auto client = Make<e2e::StrangerClient>();
  uint32_t y = 0;
  naarpc::Status st = client->Nobody(1, &y);
  EXPECT_EQ(st.code(), StatusCode::kNaaError) << st.ToString();
  EXPECT_EQ(st.wire_code(), naarpc::kNaaStatusUnknownFunction);
  EXPECT_NE(st.message().find("UNKNOWN_FUNCTION"), std::string::npos) << st.message();
}

INSTANTIATE_TEST_SUITE_P(
    TransportsAndDialects, ServicesTest,
    ::testing::Values(ServicesParam{"emulated", Dialect::kSpec},
                      ServicesParam{"emulated", Dialect::kReference},
                      ServicesParam{"verbs", Dialect::kSpec},
                      ServicesParam{"verbs", Dialect::kReference}),
    [](const auto& info) {
      return std::string(info.param.transport) +
             (info.param.dialect == Dialect::kSpec ? "_spec" : "_reference");
    });

}  // namespace
