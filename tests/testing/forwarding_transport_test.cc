// ForwardingConnection and WrappingTransport forward every virtual of the
// Connection / Transport interfaces (include/naarpc/transport.h): a wrapper
// that silently answers with a default (no memory windows, no local address)
// changes what the code under test does.
#include "tests/testing/forwarding_transport.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/transport_impl/emulated/emulated_transport.h"

namespace naarpc::testing {
namespace {

class FakeWindow final : public MemoryWindow {
 public:
  uint32_t rkey() const override { return 0x5eed; }
};

// Answers every call with a value no default returns, and logs it.
class FakeConnection final : public Connection {
 public:
  explicit FakeConnection(std::vector<std::string>* log) : log_(log) {}
  Result<std::unique_ptr<MemoryRegion>> RegisterMemory(void*, size_t, uint32_t) override {
    log_->push_back("RegisterMemory");
    return UnavailableError("fake RegisterMemory");
  }
  Status PostSend(std::span<const SendRequest>) override {
    log_->push_back("PostSend");
    return Status::Ok();
  }
  Status PostRecv(uint64_t, const LocalBuffer&) override {
    log_->push_back("PostRecv");
    return Status::Ok();
  }
  Result<size_t> PollCompletions(std::span<Completion>, Deadline) override {
    log_->push_back("PollCompletions");
    return size_t{3};
  }
  Status RequestNotify(NotifyMode) override {
    log_->push_back("RequestNotify");
    return Status::Ok();
  }
  Result<bool> WaitNotify(Deadline) override {
    log_->push_back("WaitNotify");
    return true;
  }
  Result<size_t> TryPollCompletions(std::span<Completion>) override {
    log_->push_back("TryPollCompletions");
    return size_t{4};
  }
  int notify_fd() override { return 42; }
  uint32_t max_send_sge() const override { return 30; }
  Result<std::unique_ptr<MemoryWindow>> AllocateWindow() override {
    log_->push_back("AllocateWindow");
    return std::unique_ptr<MemoryWindow>(std::make_unique<FakeWindow>());
  }
  bool supports_memory_windows() const override { return true; }
  uint32_t max_inline_data() const override { return 220; }
  uint32_t send_queue_depth() const override { return 77; }
  Status Disconnect() override {
    log_->push_back("Disconnect");
    return Status::Ok();
  }
  std::string peer_name() const override { return "fake peer"; }
  std::string down_reason() const override { return "fake reason"; }

 private:
  std::vector<std::string>* log_;
};

TEST(ForwardingConnectionTest, ForwardsEveryVirtual) {
  std::vector<std::string> log;
  ForwardingConnection c(std::make_unique<FakeConnection>(&log));
  EXPECT_EQ(c.RegisterMemory(nullptr, 8, 0).status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(c.PostSend({}).ok());
  EXPECT_TRUE(c.PostRecv(1, {}).ok());
  Completion out[4];
  EXPECT_EQ(*c.PollCompletions(out, Deadline::Now()), 3u);
  EXPECT_TRUE(c.RequestNotify(NotifyMode::kSolicitedOnly).ok());
  EXPECT_TRUE(*c.WaitNotify(Deadline::Now()));
  EXPECT_EQ(*c.TryPollCompletions(out), 4u);
  EXPECT_EQ(c.notify_fd(), 42);
  EXPECT_EQ(c.max_send_sge(), 30u);
  EXPECT_TRUE(c.supports_memory_windows());
  auto window = c.AllocateWindow();
  ASSERT_TRUE(window.ok()) << window.status().ToString();
  EXPECT_EQ((*window)->rkey(), 0x5eedu);
  EXPECT_EQ(c.max_inline_data(), 220u);
  EXPECT_EQ(c.send_queue_depth(), 77u);
  EXPECT_TRUE(c.Disconnect().ok());
  EXPECT_EQ(c.peer_name(), "fake peer");
  EXPECT_EQ(c.down_reason(), "fake reason");
  EXPECT_EQ(log, (std::vector<std::string>{"RegisterMemory", "PostSend", "PostRecv",
                                           "PollCompletions", "RequestNotify", "WaitNotify",
                                           "TryPollCompletions", "AllocateWindow", "Disconnect"}));
}

std::unique_ptr<Connection> Forward(std::unique_ptr<Connection> c) {
  return std::make_unique<ForwardingConnection>(std::move(c));
}

// Over the emulated transport (which has type-2 windows), both ends of a
// wrapped connection can allocate windows, as unwrapped ones can.
TEST(WrappingTransportTest, WrappedEmulatedConnectionsHaveMemoryWindows) {
  std::unique_ptr<Transport> inner = NewEmulatedTransport();
  WrappingTransport t(*inner, Forward);
  auto listener = t.Listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  Result<std::unique_ptr<Connection>> accepted = UnavailableError("not accepted");
  std::thread th([&] { accepted = (*listener)->Accept(Deadline::After(std::chrono::seconds(30))); });
  auto host = t.Connect("127.0.0.1", (*listener)->port(), Deadline::After(std::chrono::seconds(30)));
  th.join();
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  ASSERT_TRUE(accepted.ok()) << accepted.status().ToString();
  for (Connection* c : {host->get(), accepted->get()}) {
    ASSERT_NE(dynamic_cast<ForwardingConnection*>(c), nullptr);
    EXPECT_TRUE(c->supports_memory_windows());
    auto window = c->AllocateWindow();
    EXPECT_TRUE(window.ok()) << window.status().ToString();
  }
}

// WithLocalAddress reaches the inner transport, and what it returns wraps
// its connections too.
TEST(WrappingTransportTest, ForwardsWithLocalAddress) {
  std::unique_ptr<Transport> inner = NewEmulatedTransport();
  WrappingTransport t(*inner, Forward);
  auto local = t.WithLocalAddress("127.0.0.1");
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  EXPECT_EQ((*local)->name(), inner->name());
  auto listener = (*local)->Listen("127.0.0.1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  Result<std::unique_ptr<Connection>> accepted = UnavailableError("not accepted");
  std::thread th([&] { accepted = (*listener)->Accept(Deadline::After(std::chrono::seconds(30))); });
  auto host =
      (*local)->Connect("127.0.0.1", (*listener)->port(), Deadline::After(std::chrono::seconds(30)));
  th.join();
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  ASSERT_TRUE(accepted.ok()) << accepted.status().ToString();
  EXPECT_NE(dynamic_cast<ForwardingConnection*>(host->get()), nullptr);
  EXPECT_NE(dynamic_cast<ForwardingConnection*>(accepted->get()), nullptr);
}

}  // namespace
}  // namespace naarpc::testing
