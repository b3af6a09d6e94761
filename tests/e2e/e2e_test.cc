// End-to-end tests of the protocol engine: a ClientSession calling a
// NaaServer over a real transport, for every transport and wire dialect.
// Verbs cases skip without an RDMA device; they run in the Soft-RoCE guest.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "naarpc/client_session.h"
#include "naarpc/naa_server.h"
#include "runtime/transport_impl/emulated/emulated_transport.h"
#include "runtime/transport_impl/verbs/verbs_transport.h"
#include "tests/e2e/test_kernels.h"
#include "tests/testing/forwarding_transport.h"
#include "tests/testing/peer_process.h"
#include "tests/testing/withholding_connection.h"

extern char** environ;

namespace naarpc {
namespace {

using testing::kAccumulate;
using testing::kAppError;
using testing::kAppErrorStatus;
using testing::kEcho;
using testing::kEchoUserBits;
using testing::kHold;
using testing::kIncrementBytes;
using testing::kSleep;
using testing::kThrows;
using testing::kVectorAdd;
using testing::TestKernels;

struct E2eParam {
  std::string transport;
  Dialect dialect;
};

std::string ParamName(const ::testing::TestParamInfo<E2eParam>& info) {
  return info.param.transport + "_" + std::string(DialectName(info.param.dialect));
}

// Address the NAA listens on: loopback for the emulated transport; the
// guest's rxe netdev address for verbs (set by tools/rxe-vm).
std::string TestAddress(const std::string& transport) {
  if (transport == "verbs") {
    if (const char* a = std::getenv("NAARPC_TEST_ADDRESS")) return a;
  }
  return "127.0.0.1";
}

// send_queue_depth: 0 = the backend's default.
std::unique_ptr<Transport> MakeTransport(const std::string& name,
                                         std::shared_ptr<FaultInjector> faults = nullptr,
                                         uint32_t send_queue_depth = 0) {
  if (name == "verbs") {
    VerbsOptions verbs;
    if (send_queue_depth != 0) verbs.max_send_wr = send_queue_depth;
    auto t = NewVerbsTransport(verbs);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(t).value() : nullptr;
  }
  EmulatedOptions options;
  options.faults = std::move(faults);
  if (send_queue_depth != 0) options.send_queue_depth = send_queue_depth;
  return NewEmulatedTransport(options);
}

// A fault injector driven by a predicate.
class PredicateFaults : public FaultInjector {
 public:
  explicit PredicateFaults(std::function<FaultAction(const FaultPoint&)> f) : f_(std::move(f)) {}
  FaultAction OnPost(const FaultPoint& point) override {
    std::lock_guard<std::mutex> lock(mu_);
    return f_(point);
  }

 private:
  std::mutex mu_;
  std::function<FaultAction(const FaultPoint&)> f_;
};

std::vector<RegionSpec> VectorAddLayout(size_t n) {
  return {{"a", Direction::kIn, n * sizeof(float)},
          {"b", Direction::kIn, n * sizeof(float)},
          {"out", Direction::kOut, n * sizeof(float)}};
}

std::span<float> Floats(std::span<std::byte> b) {
  return {reinterpret_cast<float*>(b.data()), b.size() / sizeof(float)};
}

using testing::PeerProcess;

class E2eTest : public ::testing::TestWithParam<E2eParam> {
 protected:
  void SetUp() override {
    if (GetParam().transport == "verbs" && !RdmaDeviceAvailable()) {
      GTEST_SKIP() << "no RDMA device here; the verbs cases run inside the Soft-RoCE guest "
                      "(//tools/rxe-vm)";
    }
    transport_ = MakeTransport(GetParam().transport);
    ASSERT_NE(transport_, nullptr);
    server_options_.log = [this](std::string_view line) {
      {
        std::lock_guard<std::mutex> lock(log_mu_);
        server_log_.emplace_back(line);
      }
      log_cv_.notify_all();
    };
    server_ = StartServer(kernels_, server_options_);
  }

  void TearDown() override {
    kernels_.ReleaseHeld(1'000);  // kHold kernels a test left running
    if (server_) server_->Shutdown();
  }

  std::unique_ptr<NaaServer> StartServer(NaaHandler& handler, const ServerOptions& options) {
    auto s = NaaServer::Start(*transport_, address(), 0, handler, options);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  // Waits until the server logged a line containing `needle`.
  bool WaitForLog(const std::string& needle) {
    std::unique_lock<std::mutex> lock(log_mu_);
    return log_cv_.wait_for(lock, std::chrono::seconds(30), [&] {
      for (const auto& l : server_log_) {
        if (l.find(needle) != std::string::npos) return true;
      }
      return false;
    });
  }

  std::string address() const { return TestAddress(GetParam().transport); }
  bool emulated() const { return GetParam().transport == "emulated"; }
  bool reference() const { return GetParam().dialect == Dialect::kReference; }

  Result<std::unique_ptr<ClientSession>> Open(std::vector<RegionSpec> regions,
                                              ClientOptions options = {},
                                              NaaServer* server = nullptr,
                                              Transport* transport = nullptr) {
    options.dialect = GetParam().dialect;
    return ClientSession::Open(transport ? *transport : *transport_, address(),
                               (server ? server : server_.get())->port(), std::move(regions),
                               options);
  }

  std::unique_ptr<ClientSession> MustOpen(std::vector<RegionSpec> regions,
                                          ClientOptions options = {}) {
    auto s = Open(std::move(regions), options);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  // Fills a, b with call-specific values, calls, checks out == a + b.
  void VectorAddOnce(ClientSession& s, int salt) {
    auto a = Floats(s.buffer(0)), b = Floats(s.buffer(1)), out = Floats(s.buffer(2));
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = float(i) * 0.5f + float(salt);
      b[i] = float(salt) * 3.0f - float(i);
      out[i] = -1.0f;
    }
    Status st = s.Call(kVectorAdd, Deadline::After(std::chrono::seconds(20)));
    ASSERT_TRUE(st.ok()) << st.ToString();
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(out[i], a[i] + b[i]) << "element " << i << " salt " << salt;
    }
  }

  void SmallSendQueueCalls(uint32_t depth);

  std::unique_ptr<Transport> transport_;
  TestKernels kernels_;
  ServerOptions server_options_;
  std::unique_ptr<NaaServer> server_;
  std::mutex log_mu_;
  std::condition_variable log_cv_;
  std::vector<std::string> server_log_;
};

TEST_P(E2eTest, VectorAddManyCallsReuseOneConnection) {
  auto s = MustOpen(VectorAddLayout(1024));
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->state(), CommState::kMrspDone);
  for (int call = 0; call < 25; ++call) VectorAddOnce(*s, call);
  EXPECT_EQ(s->state(), CommState::kFinished);
  EXPECT_EQ(s->calls_completed(), 25u);
  EXPECT_EQ(kernels_.calls.load(), 25u);
  EXPECT_EQ(server_->connections_accepted(), 1u);
  EXPECT_TRUE(s->Close().ok());
  EXPECT_EQ(s->state(), CommState::kDisconnected);
}

// Open() reports its two phases: both ran (a connection, then an MRSP that
// the NAA answered), and together they lie within Open()'s own span.
TEST_P(E2eTest, OpenReportsItsConnectAndMrspPhases) {
  const auto before = std::chrono::steady_clock::now();
  auto s = MustOpen(VectorAddLayout(1024));
  const auto open_span = std::chrono::steady_clock::now() - before;
  ASSERT_NE(s, nullptr);
  const SetupTimes& t = s->setup_times();
  EXPECT_GT(t.connect.count(), 0);
  EXPECT_GT(t.register_and_mrsp.count(), 0);
  EXPECT_LE(t.connect + t.register_and_mrsp, open_span);
  EXPECT_EQ(server_->connections_accepted(), 1u);
}

TEST_P(E2eTest, InternalRegionPersistsAcrossCalls) {
  const size_t n = 256;
  auto s = MustOpen({{"x", Direction::kIn, n * 4},
                     {"total", Direction::kOut, n * 4},
                     {"acc", Direction::kInternal, n * 4, /*naa_address=*/0x1000}});
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->buffer(2).empty()) << "internal regions have no host buffer";
  for (int call = 1; call <= 3; ++call) {
    auto x = Floats(s->buffer(0));
    for (size_t i = 0; i < n; ++i) x[i] = float(i + call);
    ASSERT_TRUE(s->Call(kAccumulate, Deadline::After(std::chrono::seconds(20))).ok());
    auto total = Floats(s->buffer(1));
    for (size_t i = 0; i < n; ++i) {
      // sum_{c=1..call} (i + c)
      ASSERT_EQ(total[i], float(call * i + call * (call + 1) / 2)) << i;
    }
  }
}

TEST_P(E2eTest, InOutRegionIncrementsEveryByte) {
  auto s = MustOpen({{"data", Direction::kInOut, 4096}});
  ASSERT_NE(s, nullptr);
  auto data = s->buffer(0);
  for (size_t i = 0; i < data.size(); ++i) data[i] = std::byte(i * 7);
  for (int call = 0; call < 3; ++call) {
    ASSERT_TRUE(s->Call(kIncrementBytes, Deadline::After(std::chrono::seconds(20))).ok());
  }
  for (size_t i = 0; i < data.size(); ++i) ASSERT_EQ(uint8_t(data[i]), uint8_t(i * 7 + 3)) << i;
}

TEST_P(E2eTest, ApplicationErrorReachesCallerAndSessionStaysUsable) {
  auto s = MustOpen(VectorAddLayout(16));
  ASSERT_NE(s, nullptr);
  auto out = Floats(s->buffer(2));
  std::fill(out.begin(), out.end(), 7.0f);
  Status st = s->Call(kAppError, Deadline::After(std::chrono::seconds(20)));
  EXPECT_EQ(st.code(), StatusCode::kNaaError) << st.ToString();
  ASSERT_TRUE(st.wire_code().has_value());
  EXPECT_EQ(*st.wire_code(), kAppErrorStatus);
  EXPECT_NE(st.message().find("0x42"), std::string::npos) << st.message();
  for (float v : out) EXPECT_EQ(v, 7.0f) << "an error reply writes no data";
  EXPECT_EQ(s->state(), CommState::kFinished) << "an NAA error is not a session failure";
  VectorAddOnce(*s, 1);
}

TEST_P(E2eTest, UnknownFunctionCodeGetsStatus3) {
  auto s = MustOpen(VectorAddLayout(16));
  ASSERT_NE(s, nullptr);
  Status st = s->Call(99, Deadline::After(std::chrono::seconds(20)));
  EXPECT_EQ(st.code(), StatusCode::kNaaError);
  EXPECT_EQ(st.wire_code(), std::optional<uint8_t>(kNaaStatusUnknownFunction));
  VectorAddOnce(*s, 2);
}

TEST_P(E2eTest, KernelExceptionBecomesStatusAndServerSurvives) {
  auto s = MustOpen(VectorAddLayout(16));
  ASSERT_NE(s, nullptr);
  Status st = s->Call(kThrows, Deadline::After(std::chrono::seconds(20)));
  EXPECT_EQ(st.wire_code(), std::optional<uint8_t>(kNaaStatusKernelFailed)) << st.ToString();
  VectorAddOnce(*s, 3);
  std::lock_guard<std::mutex> lock(log_mu_);
  ASSERT_FALSE(server_log_.empty());
  EXPECT_NE(server_log_.back().find("kernel exploded"), std::string::npos);
}

// A kernel that overruns its time limit until the test releases it, then
// writes into its output region (the late write a runaway kernel makes);
// kEcho copies in to out.
class OverrunKernels final : public NaaHandler {
 public:
  static constexpr uint8_t kOverrun = 9;
  uint8_t Handle(NaaCall& call) override {
    auto& p = call.params;
    if (call.function_code == kOverrun) {
      release_.wait();
      std::fill(p[1].data.begin(), p[1].data.end(), std::byte{0xee});
      returned_.set_value();
      return kNaaStatusSuccess;
    }
    std::memcpy(p[1].data.data(), p[0].data.data(), p[0].data.size());
    return kNaaStatusSuccess;
  }
  std::chrono::milliseconds KernelTimeout(uint8_t code) const override {
    return code == kOverrun ? std::chrono::milliseconds(50) : std::chrono::milliseconds::zero();
  }
  void Release() { released_.set_value(); }
  void AwaitReturn() { returned_.get_future().wait(); }

 private:
  std::promise<void> released_, returned_;
  std::shared_future<void> release_ = released_.get_future().share();
};

// docs/protocol.md 7.4: after a kernel timeout the NAA answers 0x02 and
// closes the connection, so no later call can share memory with the kernel,
// which runs on by itself; the host's session goes to ERROR.
TEST_P(E2eTest, KernelTimeoutClosesTheConnectionAndNoLaterCallSharesItsMemory) {
  OverrunKernels kernels;
  auto server = StartServer(kernels, server_options_);
  ASSERT_NE(server, nullptr);
  const std::vector<RegionSpec> layout = {{"in", Direction::kIn, 4096},
                                          {"out", Direction::kOut, 4096}};
  auto a = Open(layout, {}, server.get());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  Status st = (*a)->Call(OverrunKernels::kOverrun, Deadline::After(std::chrono::seconds(20)));
  EXPECT_EQ(st.code(), StatusCode::kNaaError) << st.ToString();
  EXPECT_EQ(st.wire_code(), std::optional<uint8_t>(kNaaStatusKernelTimeout)) << st.ToString();
  EXPECT_EQ((*a)->state(), CommState::kError);
  EXPECT_EQ((*a)->Call(kEcho, Deadline::After(std::chrono::seconds(20))).code(),
            StatusCode::kFailedPrecondition);
  // While the kernel still runs, a new connection's calls are exact.
  auto b = Open(layout, {}, server.get());
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  for (int call = 0; call < 3; ++call) {
    auto in = (*b)->buffer(0);
    for (size_t i = 0; i < in.size(); ++i) in[i] = std::byte(uint8_t(i * 7 + call));
    ASSERT_TRUE((*b)->Call(kEcho, Deadline::After(std::chrono::seconds(20))).ok());
    ASSERT_EQ(std::memcmp((*b)->buffer(1).data(), in.data(), in.size()), 0) << "call " << call;
  }
  kernels.Release();
  kernels.AwaitReturn();  // its late write went to its own memory
  auto in = (*b)->buffer(0);
  std::fill(in.begin(), in.end(), std::byte{0x11});
  ASSERT_TRUE((*b)->Call(kEcho, Deadline::After(std::chrono::seconds(20))).ok());
  for (std::byte x : (*b)->buffer(1)) ASSERT_EQ(x, std::byte{0x11});
  std::lock_guard<std::mutex> lock(log_mu_);
  bool logged = false;
  for (const auto& line : server_log_) logged |= line.find("closing the connection") != std::string::npos;
  EXPECT_TRUE(logged);
}

// The NAA closes the connection right after its kernel-timeout status: a
// host that polls late gets the status and the flush of its spare receive
// in one batch, and the status decides the call.
TEST_P(E2eTest, KernelTimeoutStatusInOneBatchWithTheFlushesDecidesTheCall) {
  OverrunKernels kernels;
  auto server = StartServer(kernels, server_options_);
  ASSERT_NE(server, nullptr);
  testing::WithholdingConnection* withholding = nullptr;
  testing::WrappingTransport wrapping(*transport_, [&](std::unique_ptr<Connection> c) {
    auto w = std::make_unique<testing::WithholdingConnection>(std::move(c));
    withholding = w.get();
    return std::unique_ptr<Connection>(std::move(w));
  });
  auto a = Open({{"in", Direction::kIn, 4096}, {"out", Direction::kOut, 4096}}, {}, server.get(),
                &wrapping);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_NE(withholding, nullptr);
  withholding->Arm();
  Status st = (*a)->Call(OverrunKernels::kOverrun, Deadline::After(std::chrono::seconds(20)));
  EXPECT_TRUE(withholding->handed_answer_with_flush());
  EXPECT_EQ(st.code(), StatusCode::kNaaError) << st.ToString();
  EXPECT_EQ(st.wire_code(), std::optional<uint8_t>(kNaaStatusKernelTimeout)) << st.ToString();
  EXPECT_EQ((*a)->state(), CommState::kError);
  kernels.Release();
  kernels.AwaitReturn();
}

// Call i fills all of its output with byte 0xa0 + i but sends back only
// reply_lengths[i] bytes of it (kFail: an application error instead).
class ReplyLengths final : public NaaHandler {
 public:
  static constexpr uint8_t kFill = 10;
  static constexpr size_t kFail = SIZE_MAX;
  explicit ReplyLengths(std::vector<size_t> lengths) : lengths_(std::move(lengths)) {}
  uint8_t Handle(NaaCall& call) override {
    if (call.function_code != kFill || call.params.size() != 2) return kNaaStatusUnknownFunction;
    const size_t i = calls_++;
    NaaRegion& out = call.params[1];
    std::fill(out.data.begin(), out.data.end(), std::byte(uint8_t(0xa0 + i)));
    if (lengths_[i] == kFail) return kAppErrorStatus;
    out.reply_length = lengths_[i];
    return kNaaStatusSuccess;
  }

 private:
  const std::vector<size_t> lengths_;
  size_t calls_ = 0;  // one connection: its calls come one at a time
};

// The NAA re-posts a reply's writes while nothing they were built from
// changed: a reply of another length, after an error, of nothing, still
// writes exactly its prefix of the output, and not a byte past it.
TEST_P(E2eTest, EachReplyWritesExactlyItsLengthCallAfterCall) {
  constexpr size_t kOut = 256;
  const std::vector<size_t> lengths = {kOut, 16, 16, kOut, 0, 0, 100, ReplyLengths::kFail,
                                       100,  kOut, ReplyLengths::kFail, kOut, 1};
  ReplyLengths kernels(lengths);
  auto server = StartServer(kernels, server_options_);
  ASSERT_NE(server, nullptr);
  auto s = Open({{"in", Direction::kIn, 64}, {"out", Direction::kOut, kOut}}, {}, server.get());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (size_t i = 0; i < lengths.size(); ++i) {
    auto out = (*s)->buffer(1);
    std::fill(out.begin(), out.end(), std::byte{0x11});
    const Status st = (*s)->Call(ReplyLengths::kFill, Deadline::After(std::chrono::seconds(20)));
    if (lengths[i] == ReplyLengths::kFail) {
      EXPECT_EQ(st.wire_code(), std::optional<uint8_t>(kAppErrorStatus)) << "call " << i;
      continue;
    }
    ASSERT_TRUE(st.ok()) << "call " << i << ": " << st.ToString();
    for (size_t b = 0; b < kOut; ++b) {
      const std::byte want = b < lengths[i] ? std::byte(uint8_t(0xa0 + i)) : std::byte{0x11};
      ASSERT_EQ(out[b], want) << "call " << i << " (reply of " << lengths[i] << " bytes), byte " << b;
    }
  }
}

TEST_P(E2eTest, ShutdownWaitsOnlyItsGraceForAKernelThatOverranItsLimit) {
  OverrunKernels kernels;
  ServerOptions options = server_options_;
  options.shutdown_grace = std::chrono::milliseconds(0);
  auto server = StartServer(kernels, options);
  ASSERT_NE(server, nullptr);
  auto a = Open({{"in", Direction::kIn, 64}, {"out", Direction::kOut, 64}}, {}, server.get());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ((*a)->Call(OverrunKernels::kOverrun, Deadline::After(std::chrono::seconds(20)))
                .wire_code(),
            std::optional<uint8_t>(kNaaStatusKernelTimeout));
  server->Shutdown();  // returns although the kernel is still blocked
  server.reset();
  {
    std::lock_guard<std::mutex> lock(log_mu_);
    ASSERT_FALSE(server_log_.empty());
    EXPECT_NE(server_log_.back().find("1 kernel(s) that overran their time limit still running"),
              std::string::npos)
        << server_log_.back();
  }
  kernels.Release();
  kernels.AwaitReturn();
}

TEST_P(E2eTest, ClientDeadlineFailsSessionButServerKeepsServing) {
  auto s = MustOpen({{"x", Direction::kIn, 4}, {"out", Direction::kOut, 4}});
  ASSERT_NE(s, nullptr);
  const uint32_t x = 7;
  std::memcpy(s->buffer(0).data(), &x, 4);
  // The kernel returns only when released, after the call: only the
  // deadline can end it.
  Status st = s->Call(kHold, Deadline::After(std::chrono::milliseconds(50)));
  kernels_.ReleaseHeld();
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_EQ(s->state(), CommState::kError);
  st = s->Call(kHold, Deadline::After(std::chrono::seconds(1)));
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  auto other = MustOpen(VectorAddLayout(8));
  ASSERT_NE(other, nullptr);
  VectorAddOnce(*other, 4);
}

TEST_P(E2eTest, BadCallArgumentsSendNothing) {
  auto s = MustOpen(VectorAddLayout(16));
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->Call(0, Deadline::After(std::chrono::seconds(1))).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(s->Call(128, Deadline::After(std::chrono::seconds(1))).code(),
            StatusCode::kInvalidArgument);
  const uint64_t too_long[3] = {16 * 4 + 1, 0, 0};
  CallOptions bad_len;
  bad_len.send_lengths = too_long;
  Status st = s->Call(kVectorAdd, Deadline::After(std::chrono::seconds(1)), bad_len);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("'a'"), std::string::npos) << st.message();
  const uint64_t wrong_count[2] = {1, 1};
  CallOptions bad_count;
  bad_count.send_lengths = wrong_count;
  EXPECT_EQ(s->Call(kVectorAdd, Deadline::After(std::chrono::seconds(1)), bad_count).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(kernels_.calls.load(), 0u);
  VectorAddOnce(*s, 5);
}

TEST_P(E2eTest, SendLengthWritesOnlyAPrefix) {
  auto s = MustOpen({{"in", Direction::kIn, 1000}, {"out", Direction::kOut, 1000}});
  ASSERT_NE(s, nullptr);
  auto in = s->buffer(0);
  for (size_t i = 0; i < in.size(); ++i) in[i] = std::byte(0xa0 + i % 16);
  const uint64_t lengths[2] = {10, 0};
  CallOptions options;
  options.send_lengths = lengths;
  ASSERT_TRUE(s->Call(kEcho, Deadline::After(std::chrono::seconds(20)), options).ok());
  auto out = s->buffer(1);
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_EQ(out[i], i < 10 ? in[i] : std::byte(0)) << "byte " << i;
  }
}

TEST_P(E2eTest, WholeCallsBetweenPrefixCallsSendWholeInputs) {
  // From the second call on, a call sending every input whole posts the
  // requests built once (BeginCall); a prefix call between them must not
  // change what they send.
  auto s = MustOpen({{"in", Direction::kIn, 1000}, {"out", Direction::kOut, 1000}});
  ASSERT_NE(s, nullptr);
  auto in = s->buffer(0);
  auto out = s->buffer(1);
  const uint64_t lengths[2] = {10, 0};
  CallOptions prefix;
  prefix.send_lengths = lengths;
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const bool whole = round != 2;
    for (size_t i = 0; i < in.size(); ++i) in[i] = std::byte(round * 16 + i % 13);
    ASSERT_TRUE(
        s->Call(kEcho, Deadline::After(std::chrono::seconds(20)), whole ? CallOptions{} : prefix)
            .ok());
    for (size_t i = 0; i < (whole ? out.size() : 10); ++i) {
      ASSERT_EQ(out[i], in[i]) << "byte " << i;
    }
  }
}

TEST_P(E2eTest, ParametersLargerThanARegionAreSplit) {
  // 10000 floats -> 10 wire regions each; the NAA joins them back.
  ServerOptions split = server_options_;
  split.split_region_size = 4096;
  auto server = StartServer(kernels_, split);
  ASSERT_NE(server, nullptr);
  ClientOptions options;
  options.max_region_size = 4096;
  auto s = Open(VectorAddLayout(10000), options, server.get());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  VectorAddOnce(**s, 6);
  VectorAddOnce(**s, 7);
  server->Shutdown();
}

// Selective signaling (runtime/engine/send_queue_budget.h) on a send queue of 8
// slots, both sides: each call writes 3 input regions (plus metadata on the
// first) and each reply 3 return regions, so only some writes are signaled,
// the NAA may have to wait for a signaled reply before posting the next, and
// the verbs queue (which enforces its depth) must never overflow.
TEST_P(E2eTest, SmallSendQueueSignalsSelectivelyAndNeverOverflows) {
  for (uint32_t depth : {8u, 32u}) {
    SCOPED_TRACE("send queue depth " + std::to_string(depth));
    SmallSendQueueCalls(depth);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

void E2eTest::SmallSendQueueCalls(uint32_t depth) {
  auto small = MakeTransport(GetParam().transport, nullptr, depth);
  ASSERT_NE(small, nullptr);
  ServerOptions split = server_options_;
  split.split_region_size = 1024;
  auto server = NaaServer::Start(*small, address(), 0, kernels_, split);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ClientOptions options;
  options.max_region_size = 1024;
  auto s = Open(VectorAddLayout(768), options, server->get(), small.get());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (int call = 0; call < 200; ++call) {
    VectorAddOnce(**s, call);
    if (::testing::Test::HasFatalFailure()) break;
  }
  EXPECT_EQ((*s)->calls_completed(), 200u);
  EXPECT_TRUE((*s)->Close().ok());
  (*server)->Shutdown();
}

// A transport whose accepted (NAA-side) connections hold back every receive
// posted after a WRITE_WITH_IMM (i.e. the replacement the NAA posts after a
// reply) until the connection's next completion is returned: the host's next
// call always arrives while that replacement is not posted yet. Independent
// of timing: the emulated transport processes an arriving message in the
// polling thread, before the completion it yields is returned.
class LateReplacementReceiveTransport {
 public:
  explicit LateReplacementReceiveTransport(std::unique_ptr<Transport> inner)
      : inner_(std::move(inner)),
        // Only accepted (NAA-side) connections hold receives back.
        naa_side_(*inner_, [this](std::unique_ptr<Connection> c) {
          return std::unique_ptr<Connection>(std::make_unique<LateConnection>(std::move(c), this));
        }) {}
  // The transport for the NAA (its Listen wraps accepted connections).
  Transport& naa_transport() { return naa_side_; }
  // Receives that were held back and then posted.
  int late_receives() const { return late_.load(); }

 private:
  class LateConnection final : public testing::ForwardingConnection {
   public:
    LateConnection(std::unique_ptr<Connection> inner, LateReplacementReceiveTransport* owner)
        : ForwardingConnection(std::move(inner)), owner_(owner) {}
    Status PostSend(std::span<const SendRequest> requests) override {
      for (const SendRequest& r : requests) {
        if (r.opcode == WorkOpcode::kRdmaWriteWithImm) replied_ = true;
      }
      return inner().PostSend(requests);
    }
    Status PostRecv(uint64_t wr_id, const LocalBuffer& buffer) override {
      if (replied_ || !held_.empty()) {  // later receives keep their order
        replied_ = false;
        held_.push_back({wr_id, buffer});
        return Status::Ok();
      }
      return inner().PostRecv(wr_id, buffer);
    }
    // However the NAA takes its completions (blocking or event-driven).
    Result<size_t> PollCompletions(std::span<Completion> out, Deadline deadline) override {
      NAARPC_ASSIGN_OR_RETURN(size_t n, inner().PollCompletions(out, deadline));
      return PostHeldIfAny(n);
    }
    Result<size_t> TryPollCompletions(std::span<Completion> out) override {
      NAARPC_ASSIGN_OR_RETURN(size_t n, inner().TryPollCompletions(out));
      return PostHeldIfAny(n);
    }

   private:
    Result<size_t> PostHeldIfAny(size_t n) {
      if (n > 0) {
        for (const Held& h : held_) {
          NAARPC_RETURN_IF_ERROR(inner().PostRecv(h.wr_id, h.buffer));
          ++owner_->late_;
        }
        held_.clear();
      }
      return n;
    }
    struct Held {
      uint64_t wr_id;
      LocalBuffer buffer;
    };
    LateReplacementReceiveTransport* owner_;
    bool replied_ = false;
    std::vector<Held> held_;
  };

  std::unique_ptr<Transport> inner_;
  testing::WrappingTransport naa_side_;
  std::atomic<int> late_{0};
};

// docs/protocol.md 7.2: the NAA keeps a spare receive posted, so the host's
// next call finds a receive although the NAA replaces the consumed one only
// after its reply. Here every replacement is late; without the spare the
// next call meets RNR (the emulated transport gives up after 6 retries).
TEST_P(E2eTest, SpareReceiveTakesTheNextCallWhileTheReplacementIsLate) {
  LateReplacementReceiveTransport late(MakeTransport(GetParam().transport));
  auto server = NaaServer::Start(late.naa_transport(), address(), 0, kernels_, server_options_);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto s = Open(VectorAddLayout(64), {}, server->get());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  constexpr int kCalls = 8;
  for (int call = 0; call < kCalls; ++call) {
    VectorAddOnce(**s, 40 + call);
    if (::testing::Test::HasFatalFailure()) break;
  }
  EXPECT_EQ((*s)->calls_completed(), uint64_t{kCalls});
  // The replacement after each reply but the last was posted only when the
  // NAA saw the next call, which the spare had taken.
  EXPECT_GE(late.late_receives(), kCalls - 1);
  EXPECT_TRUE((*s)->Close().ok());
  (*server)->Shutdown();
}

TEST_P(E2eTest, MetadataRewrittenEveryCallOnRequest) {
  ClientOptions options;
  options.metadata_every_call = true;
  auto s = MustOpen(VectorAddLayout(32), options);
  ASSERT_NE(s, nullptr);
  for (int call = 0; call < 3; ++call) VectorAddOnce(*s, 20 + call);
}

TEST_P(E2eTest, AdjacentSmallRegionsStaySeparateParameters) {
  // One host array holding two inputs back to back: two parameters, not one.
  std::vector<float> ab(2 * 64, 1.5f);
  auto layout = VectorAddLayout(64);
  layout[0].external_buffer = ab.data();
  layout[1].external_buffer = ab.data() + 64;
  auto s = MustOpen(layout);
  ASSERT_NE(s, nullptr);
  VectorAddOnce(*s, 13);
}

TEST_P(E2eTest, MrspTooManyRegions) {
  ServerOptions small = server_options_;
  small.max_regions = 3;
  auto server = StartServer(kernels_, small);
  ASSERT_NE(server, nullptr);
  auto s = Open({{"a", Direction::kIn, 8},
                 {"b", Direction::kIn, 8},
                 {"c", Direction::kIn, 8},
                 {"out", Direction::kOut, 8}},
                {}, server.get());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kMrspError) << s.status().ToString();
  EXPECT_EQ(s.status().wire_code(), std::optional<uint8_t>(0x03));
  EXPECT_NE(s.status().message().find("too many regions"), std::string::npos);
}

TEST_P(E2eTest, MrspInvalidNaaAddress) {
  auto s = Open({{"x", Direction::kIn, 64},
                 {"out", Direction::kOut, 64},
                 {"acc", Direction::kInternal, 64, server_options_.naa_memory_size}});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kMrspError) << s.status().ToString();
  EXPECT_EQ(s.status().wire_code(), std::optional<uint8_t>(0x02));
}

TEST_P(E2eTest, MrspNotEnoughMemory) {
  auto s = Open({{"x", Direction::kIn, 64},
                 {"out", Direction::kOut, 64},
                 {"acc", Direction::kInternal, 4096, server_options_.naa_memory_size - 100}});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().wire_code(), std::optional<uint8_t>(0x01)) << s.status().ToString();
  // The server goes on serving.
  auto ok = MustOpen(VectorAddLayout(4));
  ASSERT_NE(ok, nullptr);
  VectorAddOnce(*ok, 8);
}

TEST_P(E2eTest, LayoutErrorsAreReportedBeforeConnecting) {
  auto no_out = Open({{"a", Direction::kIn, 8}});
  EXPECT_EQ(no_out.status().code(), StatusCode::kInvalidArgument);
  auto zero = Open({{"a", Direction::kIn, 0}, {"o", Direction::kOut, 8}});
  EXPECT_EQ(zero.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(zero.status().message().find("'a'"), std::string::npos);
  std::vector<RegionSpec> many;
  for (int i = 0; i < 300; ++i) many.push_back({"p" + std::to_string(i), Direction::kInOut, 8});
  auto too_many = Open(many);
  EXPECT_EQ(too_many.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(server_->connections_accepted(), 0u);
}

TEST_P(E2eTest, ConcurrentClients) {
  constexpr int kClients = 4, kCalls = 30;
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([this, c] {
      auto s = MustOpen(VectorAddLayout(512));
      ASSERT_NE(s, nullptr);
      for (int i = 0; i < kCalls; ++i) VectorAddOnce(*s, c * 1000 + i);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(kernels_.calls.load(), uint64_t(kClients * kCalls));
  EXPECT_EQ(server_->connections_accepted(), uint64_t(kClients));
}

TEST_P(E2eTest, SingleSendRegionIsWrittenOnlyOnce) {
  if (!reference()) {
    auto s = Open({{"a", Direction::kIn, 8, 0, /*single_send=*/true}, {"o", Direction::kOut, 8}});
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << "spec dialect has no flags";
    return;
  }
  auto layout = VectorAddLayout(64);
  layout[1].single_send = true;
  auto s = MustOpen(layout);
  ASSERT_NE(s, nullptr);
  VectorAddOnce(*s, 1);
  auto a = Floats(s->buffer(0)), b = Floats(s->buffer(1)), out = Floats(s->buffer(2));
  std::vector<float> first_b(b.begin(), b.end());
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = 1.0f;
    b[i] = 1000.0f;  // not sent again
  }
  ASSERT_TRUE(s->Call(kVectorAdd, Deadline::After(std::chrono::seconds(20))).ok());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(out[i], 1.0f + first_b[i]);
}

TEST_P(E2eTest, UserBitsReachTheNaa) {
  auto s = MustOpen({{"in", Direction::kIn, 4}, {"out", Direction::kOut, 4}});
  ASSERT_NE(s, nullptr);
  CallOptions options;
  options.user_bits = 0xabcdef;
  Status st = s->Call(kEchoUserBits, Deadline::After(std::chrono::seconds(20)), options);
  if (!reference()) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    return;
  }
  ASSERT_TRUE(st.ok()) << st.ToString();
  uint32_t echoed = 0;
  std::memcpy(&echoed, s->buffer(1).data(), 4);
  EXPECT_EQ(echoed, 0xabcdefu);
}

TEST_P(E2eTest, ZeroCopyExternalBuffers) {
  std::vector<float> a(128, 2.0f), b(128, 3.0f), out(128, 0.0f);
  auto layout = VectorAddLayout(128);
  layout[0].external_buffer = a.data();
  layout[1].external_buffer = b.data();
  layout[2].external_buffer = out.data();
  auto s = MustOpen(layout);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->buffer(2).data(), reinterpret_cast<std::byte*>(out.data()));
  ASSERT_TRUE(s->Call(kVectorAdd, Deadline::After(std::chrono::seconds(20))).ok());
  for (float v : out) EXPECT_EQ(v, 5.0f);
}

TEST_P(E2eTest, ServerShutdownWithIdleConnections) {
  auto s = MustOpen(VectorAddLayout(4));
  ASSERT_NE(s, nullptr);
  VectorAddOnce(*s, 9);
  server_->Shutdown();
  // The NAA is gone: the next call fails promptly, never hangs.
  Status st = s->Call(kVectorAdd, Deadline::After(std::chrono::seconds(20)));
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
}

// --- Faults (emulated transport's fault injection) -------------------------

TEST_P(E2eTest, NaaDisconnectMidCallFailsPromptly) {
  if (!emulated()) {
    GTEST_SKIP() << "fault injection is an emulated-transport feature; on verbs "
                    "NaaProcessKilledMidCallFailsPromptly covers a NAA lost mid-call";
  }
  // The NAA drops the connection instead of writing the result back.
  auto faults = std::make_shared<PredicateFaults>([](const FaultPoint& p) {
    FaultAction a;
    if (p.is_listener_side && p.opcode == WorkOpcode::kRdmaWriteWithImm) {
      a.kind = FaultAction::Kind::kDropConnection;
    }
    return a;
  });
  auto faulty = MakeTransport("emulated", faults);
  TestKernels kernels;
  auto s = NaaServer::Start(*faulty, address(), 0, kernels, server_options_);
  ASSERT_TRUE(s.ok());
  auto server = std::move(s).value();
  auto session = Open(VectorAddLayout(64), {}, server.get());
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  // kDisconnected, not the deadline: the call noticed the disconnect.
  Status st = (*session)->Call(kVectorAdd, Deadline::After(std::chrono::seconds(30)));
  EXPECT_EQ(st.code(), StatusCode::kDisconnected) << st.ToString();
  EXPECT_EQ((*session)->state(), CommState::kError);
  server->Shutdown();
}

TEST_P(E2eTest, HostDisconnectMidCallLeavesServerServingOthers) {
  if (!emulated()) {
    GTEST_SKIP() << "fault injection is an emulated-transport feature; on verbs "
                    "HostProcessKilledMidCallLeavesNaaServingOthers covers a host lost mid-call";
  }
  // The host's connection dies as it posts the WRITE_WITH_IMM of its call.
  auto faults = std::make_shared<PredicateFaults>([](const FaultPoint& p) {
    FaultAction a;
    if (!p.is_listener_side && p.opcode == WorkOpcode::kRdmaWriteWithImm) {
      a.kind = FaultAction::Kind::kDropConnection;
    }
    return a;
  });
  auto faulty = MakeTransport("emulated", faults);
  auto doomed = Open(VectorAddLayout(64), {}, nullptr, faulty.get());
  ASSERT_TRUE(doomed.ok()) << doomed.status().ToString();
  Status st = (*doomed)->Call(kVectorAdd, Deadline::After(std::chrono::seconds(30)));
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  auto healthy = MustOpen(VectorAddLayout(64));
  ASSERT_NE(healthy, nullptr);
  VectorAddOnce(*healthy, 10);
}

TEST_P(E2eTest, CorruptMrspRequestIsRejectedByTheNaa) {
  if (!emulated()) {
    GTEST_SKIP() << "fault injection is an emulated-transport feature; on verbs "
                    "WireConformance.NaaRejectsTruncatedRequestAndKeepsServing sends a bad MRSP";
  }
  // Flip the type byte of the host's MRSP request (the first SEND).
  auto faults = std::make_shared<PredicateFaults>([](const FaultPoint& p) {
    FaultAction a;
    if (!p.is_listener_side && p.opcode == WorkOpcode::kSend) {
      a.kind = FaultAction::Kind::kCorruptPayload;
      a.corrupt_offset = 0;
    }
    return a;
  });
  auto faulty = MakeTransport("emulated", faults);
  ClientOptions options;
  options.mrsp_timeout = std::chrono::seconds(10);
  auto s = Open(VectorAddLayout(8), options, nullptr, faulty.get());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().code(), StatusCode::kDeadlineExceeded) << s.status().ToString();
  // The NAA said why it dropped the host.
  EXPECT_TRUE(WaitForLog("MRSP"));
  auto healthy = MustOpen(VectorAddLayout(8));
  ASSERT_NE(healthy, nullptr);
  VectorAddOnce(*healthy, 11);
}

TEST_P(E2eTest, DelayedRepliesStillArrive) {
  if (!emulated()) {
    // Verbs: the delay comes from a slow kernel, so each reply arrives long
    // after the host's bounded spin, through the completion channel.
    auto s = MustOpen({{"ms", Direction::kIn, 4}, {"out", Direction::kOut, 4}});
    ASSERT_NE(s, nullptr);
    for (uint32_t ms : {20u, 60u, 5u}) {
      std::memcpy(s->buffer(0).data(), &ms, 4);
      ASSERT_TRUE(s->Call(kSleep, Deadline::After(std::chrono::seconds(10))).ok());
      uint32_t out = 0;
      std::memcpy(&out, s->buffer(1).data(), 4);
      EXPECT_EQ(out, ms);
    }
    return;
  }
  auto faults = std::make_shared<PredicateFaults>([](const FaultPoint& p) {
    FaultAction a;
    if (p.is_listener_side) {
      a.kind = FaultAction::Kind::kDelay;
      a.delay = std::chrono::milliseconds(20);
    }
    return a;
  });
  auto faulty = MakeTransport("emulated", faults);
  TestKernels kernels;
  auto server = NaaServer::Start(*faulty, address(), 0, kernels, server_options_);
  ASSERT_TRUE(server.ok());
  auto s = Open(VectorAddLayout(32), {}, server->get());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  VectorAddOnce(**s, 12);
  (*server)->Shutdown();
}

// --- Two processes ------------------------------------------------------------

// The software NAA runs in its own process (tests/e2e/peer_process); on
// verbs both processes share the rxe device.
class TwoProcesses {
 public:
  // Starts the NAA process; port() is 0 if that failed.
  TwoProcesses(const std::string& transport, const std::string& address) {
    naa_ = PeerProcess::Start("peer_process", {"naa", "--transport=" + transport, "--address=" + address});
    if (!naa_) return;
    std::string line;
    if (naa_->ExpectPrefix("port ", line)) port_ = uint16_t(std::stoi(line.substr(5)));
  }
  uint16_t port() const { return port_; }
  PeerProcess& naa() { return *naa_; }

 private:
  std::unique_ptr<PeerProcess> naa_;
  uint16_t port_ = 0;
};

TEST_P(E2eTest, CallsBetweenTwoProcesses) {
  TwoProcesses peer(GetParam().transport, address());
  ASSERT_NE(peer.port(), 0) << "the NAA process did not start";
  ClientOptions options;
  options.dialect = GetParam().dialect;
  auto s = ClientSession::Open(*transport_, address(), peer.port(), VectorAddLayout(2048), options);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (int i = 0; i < 10; ++i) VectorAddOnce(**s, 100 + i);
  ASSERT_TRUE((*s)->Close().ok());
  peer.naa().CloseStdin();  // the NAA process shuts down cleanly
  EXPECT_EQ(peer.naa().Wait(), 0);
}

TEST_P(E2eTest, NaaProcessKilledMidCallFailsPromptly) {
  TwoProcesses peer(GetParam().transport, address());
  ASSERT_NE(peer.port(), 0) << "the NAA process did not start";
  ClientOptions options;
  options.dialect = GetParam().dialect;
  auto s = ClientSession::Open(*transport_, address(), peer.port(),
                               {{"ms", Direction::kIn, 4}, {"out", Direction::kOut, 4}}, options);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const uint32_t ms = 20'000;  // the NAA's kernel is busy when it dies
  std::memcpy((*s)->buffer(0).data(), &ms, 4);
  auto call = std::async(std::launch::async, [&] {
    return (*s)->Call(kSleep, Deadline::After(std::chrono::seconds(60)));
  });
  // Killed while its kernel runs (it says so when the kernel starts).
  ASSERT_TRUE(peer.naa().Expect("kernel " + std::to_string(kSleep)));
  peer.naa().Kill(SIGKILL);
  // kDisconnected (not the 60 s deadline): the host noticed the death.
  const Status st = call.get();
  EXPECT_EQ(st.code(), StatusCode::kDisconnected) << st.ToString();
  EXPECT_EQ((*s)->state(), CommState::kError);
  EXPECT_EQ(peer.naa().Wait(), 128 + SIGKILL);
}

TEST_P(E2eTest, HostProcessKilledMidCallLeavesNaaServingOthers) {
  auto host = PeerProcess::Start("peer_process", {"host", "--transport=" + GetParam().transport,
                                  "--address=" + address(), "--port=" + std::to_string(server_->port()),
                                  "--dialect=" + std::string(reference() ? "reference" : "spec")});
  ASSERT_NE(host, nullptr);
  ASSERT_TRUE(host->Expect("calling"));
  // Killed while the NAA runs its call (kHold: until released, below).
  ASSERT_TRUE(kernels_.WaitForCalls(1, Deadline::After(std::chrono::seconds(30))));
  host->Kill(SIGKILL);
  EXPECT_EQ(host->Wait(), 128 + SIGKILL);
  kernels_.ReleaseHeld();
  // Others are served meanwhile, and the dead host's connection goes away.
  auto healthy = MustOpen(VectorAddLayout(64));
  ASSERT_NE(healthy, nullptr);
  VectorAddOnce(*healthy, 13);
  EXPECT_TRUE(server_->WaitForOpenConnectionsAtMost(1, Deadline::After(std::chrono::seconds(30))))
      << "the killed host's connection is still open";
  VectorAddOnce(*healthy, 14);
}

INSTANTIATE_TEST_SUITE_P(
    Transports, E2eTest,
    ::testing::Values(E2eParam{"emulated", Dialect::kSpec}, E2eParam{"emulated", Dialect::kReference},
                      E2eParam{"verbs", Dialect::kSpec}, E2eParam{"verbs", Dialect::kReference}),
    ParamName);

}  // namespace
}  // namespace naarpc
