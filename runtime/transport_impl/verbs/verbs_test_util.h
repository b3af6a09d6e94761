// Shared by the verbs transport's tests (verbs_*_test.cc): the skip without
// a device, status macros, polling and work-request helpers, and VerbsTest
// (a connected client/server pair on the device's address).
#ifndef NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_VERBS_TEST_UTIL_H_
#define NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_VERBS_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "naarpc/transport.h"
#include "runtime/transport_impl/verbs/verbs_transport.h"
#include "tests/testing/connection_helpers.h"
#include "tests/testing/hang_guard.h"

namespace naarpc {
namespace verbs_testing {

using namespace std::chrono_literals;

inline constexpr char kSkipMessage[] =
    "no RDMA device: run inside the Soft-RoCE guest "
    "(tools/rxe-vm/rxe-vm -- <test binary>, or bazel test "
    "//tools/rxe-vm:verbs_in_guest_test)";

#define EXPECT_OK(expr)                                       \
  do {                                                        \
    const auto& s_ = (expr);                                  \
    EXPECT_TRUE(s_.ok()) << #expr << ": " << s_.ToString();   \
  } while (0)
#define ASSERT_OK(expr)                                       \
  do {                                                        \
    const auto& s_ = (expr);                                  \
    ASSERT_TRUE(s_.ok()) << #expr << ": " << s_.ToString();   \
  } while (0)

// Hang guard: the deadline of waits that end by themselves (completions on
// their way, a connection going down, an accept or connect that must
// succeed or fail). It times nothing: it only turns a hang into a failure,
// and is generous so that no loaded machine (or TCG guest) ever reaches it.
// Tests assert behaviour, never how long something took (speed belongs in
// bench/).
inline constexpr auto kHangGuard = 60s;

// Polls until `n` completions have been collected; fails at the deadline (by
// default a hang guard).
inline std::vector<Completion> PollN(Connection& c, size_t n,
                                     Deadline deadline = Deadline::After(kHangGuard)) {
  std::vector<Completion> got;
  Completion buf[8];
  while (got.size() < n) {
    auto r = c.PollCompletions(std::span<Completion>(buf, 1), deadline);
    if (!r.ok()) {
      ADD_FAILURE() << "PollCompletions: " << r.status().ToString();
      break;
    }
    if (*r == 0) {
      ADD_FAILURE() << "deadline with " << got.size() << " of " << n << " completions";
      break;
    }
    got.insert(got.end(), buf, buf + *r);
  }
  return got;
}

inline LocalBuffer Buf(const MemoryRegion& mr, size_t offset, uint32_t length) {
  return {mr.remote_addr() + offset, length, mr.lkey()};
}

using naarpc::testing::HangGuard;
using naarpc::testing::Req;

class VerbsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!RdmaDeviceAvailable()) GTEST_SKIP() << kSkipMessage;
    // The harness names the rxe netdev address; otherwise probe for one.
    if (const char* a = std::getenv("NAARPC_TEST_ADDRESS"); a != nullptr && *a != '\0') {
      addr_ = a;
    } else {
      auto addr = FindRdmaIpv4Address();
      ASSERT_OK(addr.status());
      addr_ = *addr;
    }
    VerbsOptions opt;
    opt.connect_retries = 3;
    opt.predictive_wake = true;  // the PredictiveWake* tests (off by default)
    auto t = NewVerbsTransport(opt);
    ASSERT_OK(t.status());
    transport_ = std::move(*t);
    auto l = transport_->Listen(addr_, 0);
    ASSERT_OK(l.status());
    listener_ = std::move(*l);
    ASSERT_NE(listener_->port(), 0);
    ConnectPair(&client_, &server_);
  }

  void ConnectPair(std::unique_ptr<Connection>* client, std::unique_ptr<Connection>* server) {
    auto accepted = std::async(std::launch::async,
                               [&] { return listener_->Accept(Deadline::After(10s)); });
    auto c = transport_->Connect(addr_, listener_->port(), Deadline::After(10s));
    auto s = accepted.get();
    ASSERT_OK(c.status());
    ASSERT_OK(s.status());
    *client = std::move(*c);
    *server = std::move(*s);
  }

  std::unique_ptr<MemoryRegion> Register(Connection& c, std::vector<uint8_t>& mem,
                                         uint32_t access) {
    auto mr = c.RegisterMemory(mem.data(), mem.size(), access);
    EXPECT_TRUE(mr.ok()) << mr.status().ToString();
    return mr.ok() ? std::move(*mr) : nullptr;
  }

  std::string addr_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Listener> listener_;
  std::unique_ptr<Connection> client_;
  std::unique_ptr<Connection> server_;
};

}  // namespace verbs_testing
}  // namespace naarpc

#endif  // NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_VERBS_TEST_UTIL_H_
