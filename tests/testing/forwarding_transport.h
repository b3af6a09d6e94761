// Decorators for tests: a Connection / Listener / Transport that forwards
// every call to an inner one, so a test overrides only what it changes
// (fault models, peers that misbehave on purpose).
#ifndef NAARPC_TESTS_TESTING_FORWARDING_TRANSPORT_H_
#define NAARPC_TESTS_TESTING_FORWARDING_TRANSPORT_H_

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "naarpc/transport.h"

namespace naarpc::testing {

class ForwardingConnection : public Connection {
 public:
  explicit ForwardingConnection(std::unique_ptr<Connection> inner) : inner_(std::move(inner)) {}
  Result<std::unique_ptr<MemoryRegion>> RegisterMemory(void* addr, size_t length,
                                                       uint32_t access) override {
    return inner_->RegisterMemory(addr, length, access);
  }
  Status PostSend(std::span<const SendRequest> requests) override {
    return inner_->PostSend(requests);
  }
  Status PostRecv(uint64_t wr_id, const LocalBuffer& buffer) override {
    return inner_->PostRecv(wr_id, buffer);
  }
  Result<size_t> PollCompletions(std::span<Completion> out, Deadline deadline) override {
    return inner_->PollCompletions(out, deadline);
  }
  Status RequestNotify(NotifyMode mode) override { return inner_->RequestNotify(mode); }
  Result<bool> WaitNotify(Deadline deadline) override { return inner_->WaitNotify(deadline); }
  int notify_fd() override { return inner_->notify_fd(); }
  Result<size_t> TryPollCompletions(std::span<Completion> out) override {
    return inner_->TryPollCompletions(out);
  }
  uint32_t max_inline_data() const override { return inner_->max_inline_data(); }
  uint32_t max_send_sge() const override { return inner_->max_send_sge(); }
  Result<std::unique_ptr<MemoryWindow>> AllocateWindow() override {
    return inner_->AllocateWindow();
  }
  bool supports_memory_windows() const override { return inner_->supports_memory_windows(); }
  uint32_t send_queue_depth() const override { return inner_->send_queue_depth(); }
  Status Disconnect() override { return inner_->Disconnect(); }
  std::string peer_name() const override { return inner_->peer_name(); }
  std::string down_reason() const override { return inner_->down_reason(); }

 protected:
  Connection& inner() { return *inner_; }

 private:
  std::unique_ptr<Connection> inner_;
};

// Wraps every connection a transport makes or accepts with `wrap`.
class WrappingTransport final : public Transport {
 public:
  using Wrap = std::function<std::unique_ptr<Connection>(std::unique_ptr<Connection>)>;
  // REQUIRES: `inner` outlives this transport.
  WrappingTransport(Transport& inner, Wrap wrap) : inner_(inner), wrap_(std::move(wrap)) {}
  WrappingTransport(std::unique_ptr<Transport> inner, Wrap wrap)
      : owned_(std::move(inner)), inner_(*owned_), wrap_(std::move(wrap)) {}

  std::string_view name() const override { return inner_.name(); }
  using Transport::Connect;
  Result<std::unique_ptr<Connection>> Connect(const std::string& host, uint16_t port,
                                              Deadline deadline,
                                              const ConnectOptions& options) override {
    NAARPC_ASSIGN_OR_RETURN(std::unique_ptr<Connection> c,
                            inner_.Connect(host, port, deadline, options));
    return wrap_(std::move(c));
  }
  Result<std::unique_ptr<Listener>> Listen(const std::string& host, uint16_t port) override {
    NAARPC_ASSIGN_OR_RETURN(std::unique_ptr<Listener> l, inner_.Listen(host, port));
    return std::unique_ptr<Listener>(std::make_unique<WrappingListener>(std::move(l), wrap_));
  }
  // The inner transport's, wrapped the same way.
  Result<std::unique_ptr<Transport>> WithLocalAddress(
      const std::string& local_address) const override {
    NAARPC_ASSIGN_OR_RETURN(std::unique_ptr<Transport> t, inner_.WithLocalAddress(local_address));
    return std::unique_ptr<Transport>(std::make_unique<WrappingTransport>(std::move(t), wrap_));
  }

 private:
  class WrappingListener final : public Listener {
   public:
    WrappingListener(std::unique_ptr<Listener> inner, Wrap wrap)
        : inner_(std::move(inner)), wrap_(std::move(wrap)) {}
    // SetAcceptHook is deliberately not forwarded (the default, false): the
    // hook would prepare the inner connection, and what it keeps (an NAA's
    // endpoint holds the Connection*) would bypass the wrapper. The caller
    // then prepares each connection after Accept, on the wrapper.
    Result<std::unique_ptr<Connection>> Accept(Deadline deadline) override {
      NAARPC_ASSIGN_OR_RETURN(std::unique_ptr<Connection> c, inner_->Accept(deadline));
      return wrap_(std::move(c));
    }
    uint16_t port() const override { return inner_->port(); }
    void Shutdown() override { inner_->Shutdown(); }

   private:
    std::unique_ptr<Listener> inner_;
    Wrap wrap_;
  };

  std::unique_ptr<Transport> owned_;  // set by the owning constructor
  Transport& inner_;
  Wrap wrap_;
};

}  // namespace naarpc::testing

#endif  // NAARPC_TESTS_TESTING_FORWARDING_TRANSPORT_H_
