// Listener::SetAcceptHook on both transports: the hook runs on each new
// connection before the peer learns it was accepted, so a receive it posts
// is there for the peer's first message even when the peer sends at once
// and may not retry (rnr_retry_count 0: a missing receive fails its send
// with kRnrRetryExceeded instead of waiting). What the hook returns reaches
// the connection Accept returns; a failing hook refuses that connection
// and Accept goes on with the next.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "naarpc/transport.h"
#include "tests/testing/test_transport.h"

namespace naarpc {
namespace {

using namespace std::chrono_literals;

constexpr auto kTimeout = 10s;
constexpr uint64_t kRecvId = 42;

using Buf64 = std::vector<uint8_t>;

struct Prepared {
  std::vector<uint8_t> data = std::vector<uint8_t>(64, 0);
  std::unique_ptr<MemoryRegion> mr;
  Connection* conn = nullptr;
};

// A transport whose sends are never retried after an RNR NAK.
testing::TestTransport NoRnrRetryTransport(const std::string& name) {
  testing::TestTransport t = testing::MakeTestTransport(name);
  if (!t.unavailable.empty()) return t;
  if (name == "verbs") {
    VerbsOptions o;
    o.rnr_retry_count = 0;
    auto v = NewVerbsTransport(o);
    if (!v.ok()) {
      t.unavailable = v.status().ToString();
      return t;
    }
    t.transport = std::move(v).value();
  } else {
    EmulatedOptions o;
    o.rnr_retry_count = 0;
    t.transport = NewEmulatedTransport(o);
  }
  return t;
}

class AcceptHookTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    testing::TestTransport t = NoRnrRetryTransport(GetParam());
    if (!t.unavailable.empty()) GTEST_SKIP() << t.unavailable;
    transport_ = std::move(t.transport);
    address_ = t.address;
    auto l = transport_->Listen(address_, 0);
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    listener_ = std::move(l).value();
  }

  // Connects, and sends `text` the moment the connection is up.
  Result<std::unique_ptr<Connection>> ConnectAndSend(const char* text, Buf64& src) {
    auto c = transport_->Connect(address_, listener_->port(), Deadline::After(kTimeout));
    if (!c.ok()) return c.status();
    std::memcpy(src.data(), text, std::strlen(text) + 1);
    auto mr = (*c)->RegisterMemory(src.data(), src.size(), 0);
    if (!mr.ok()) return mr.status();
    src_mr_.push_back(std::move(mr).value());
    SendRequest r;
    r.wr_id = 7;
    r.opcode = WorkOpcode::kSend;
    r.local = {reinterpret_cast<uintptr_t>(src.data()), static_cast<uint32_t>(std::strlen(text) + 1),
               src_mr_.back()->lkey()};
    NAARPC_RETURN_IF_ERROR((*c)->PostSend(std::span<const SendRequest>(&r, 1)));
    return c;
  }

  std::unique_ptr<Transport> transport_;
  std::string address_;
  std::unique_ptr<Listener> listener_;
  std::vector<std::unique_ptr<MemoryRegion>> src_mr_;
};

// One completion of `c` (the deadline is a safety net, never reached).
Completion OneCompletion(Connection& c) {
  Completion got[1];
  auto n = c.PollCompletions(got, Deadline::After(kTimeout));
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(n.ok() ? *n : 0, 1u);
  return got[0];
}

TEST_P(AcceptHookTest, TheHooksReceiveTakesAMessageSentTheMomentTheConnectionIsUp) {
  int hooked = 0;
  ASSERT_TRUE(listener_->SetAcceptHook([&](Connection& conn) -> Result<std::shared_ptr<void>> {
    ++hooked;
    auto p = std::make_shared<Prepared>();
    p->conn = &conn;
    NAARPC_ASSIGN_OR_RETURN(p->mr, conn.RegisterMemory(p->data.data(), p->data.size(),
                                                       kAccessLocalWrite));
    NAARPC_RETURN_IF_ERROR(conn.PostRecv(
        kRecvId, {reinterpret_cast<uintptr_t>(p->data.data()), 64, p->mr->lkey()}));
    return std::shared_ptr<void>(p);
  }));
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE("connection " + std::to_string(round));
    std::optional<Result<std::unique_ptr<Connection>>> accepted;
    std::thread th([&] { accepted.emplace(listener_->Accept(Deadline::After(kTimeout))); });
    Buf64 src(64, 0);
    auto host = ConnectAndSend("first words", src);
    th.join();
    ASSERT_TRUE(host.ok()) << host.status().ToString();
    ASSERT_TRUE(accepted->ok()) << accepted->status().ToString();
    Connection& naa = ***accepted;
    // The hook ran on this very connection, and its result came along.
    auto context = std::static_pointer_cast<Prepared>(naa.TakeAcceptContext());
    ASSERT_NE(context, nullptr);
    EXPECT_EQ(context->conn, &naa);
    EXPECT_EQ(naa.TakeAcceptContext(), nullptr);  // once
    // It arrived: with no retry after an RNR NAK, a send that met no
    // receive would have failed at the host and never arrived.
    const Completion got = OneCompletion(naa);
    EXPECT_EQ(got.status, CompletionStatus::kSuccess) << CompletionStatusName(got.status);
    EXPECT_EQ(got.wr_id, kRecvId);
    EXPECT_STREQ(reinterpret_cast<const char*>(context->data.data()), "first words");
  }
  EXPECT_EQ(hooked, 5);
}

TEST_P(AcceptHookTest, AFailingHookRefusesThatConnectionAndAcceptGoesOn) {
  std::mutex mu;
  std::condition_variable cv;
  int calls = 0;
  std::vector<int> accepted;  // the hook's number for each accepted connection
  std::vector<std::unique_ptr<Connection>> kept;
  ASSERT_TRUE(listener_->SetAcceptHook([&](Connection&) -> Result<std::shared_ptr<void>> {
    std::lock_guard<std::mutex> lock(mu);
    if (++calls == 1) return ResourceExhaustedError("no memory for this one");
    return std::shared_ptr<void>(std::make_shared<int>(calls));
  }));
  std::thread acceptor([&] {
    for (;;) {
      auto a = listener_->Accept(Deadline::After(kTimeout));
      if (!a.ok()) return;  // shut down
      auto number = std::static_pointer_cast<int>((*a)->TakeAcceptContext());
      std::lock_guard<std::mutex> lock(mu);
      accepted.push_back(number ? *number : -1);
      kept.push_back(std::move(a).value());
      cv.notify_all();
    }
  });
  // The first connection meets the failing hook. Verbs: rdma_cm rejects it
  // and the host's Connect tries again (VerbsOptions::connect_retries), so
  // it ends up accepted by the hook's second run. Emulated: the hello was
  // through, so the host's Connect returns, and the connection is closed.
  const bool retried = GetParam() == "verbs";
  auto first = transport_->Connect(address_, listener_->port(), Deadline::After(kTimeout));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  if (!retried) {
    Completion c[1];
    auto n = (*first)->PollCompletions(c, Deadline::After(kTimeout));
    EXPECT_EQ(n.status().code(), StatusCode::kDisconnected) << n.status().ToString();
  }
  auto second = transport_->Connect(address_, listener_->port(), Deadline::After(kTimeout));
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  const size_t expected = retried ? 2 : 1;
  {
    std::unique_lock<std::mutex> lock(mu);
    EXPECT_TRUE(cv.wait_for(lock, kTimeout, [&] { return accepted.size() == expected; }));
  }
  listener_->Shutdown();
  acceptor.join();
  // Never the refused one: every accepted connection came from a hook run
  // that succeeded, and its result came along.
  const std::vector<int> want = retried ? std::vector<int>{2, 3} : std::vector<int>{2};
  EXPECT_EQ(accepted, want);
}

INSTANTIATE_TEST_SUITE_P(Transports, AcceptHookTest, ::testing::Values("emulated", "verbs"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace naarpc
