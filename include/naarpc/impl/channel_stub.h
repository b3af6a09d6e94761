// What a generated <Service>ChannelClient needs: one <Service>Client per
// NAA of a Channel (made on first use), and the loops that run a call's
// attempts on them, blocking or from the clients' completion engines.
#ifndef NAARPC_IMPL_CHANNEL_STUB_H_
#define NAARPC_IMPL_CHANNEL_STUB_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "naarpc/channel.h"
#include "naarpc/deadline.h"
#include "naarpc/impl/codegen_support.h"
#include "naarpc/status.h"
#include "naarpc/transport.h"

namespace naarpc::codegen {

// REQUIRES: Client(Transport&, std::string host, uint16_t port, const StubOptions&).
template <typename Client>
class ChannelStubs {
 public:
  // REQUIRES: `transport` outlives the stubs. With the channel's
  // local_address, the clients connect through
  // transport.WithLocalAddress(it); if that fails, so does every call.
  ChannelStubs(Transport& transport, std::shared_ptr<Channel> channel, StubOptions options)
      : transport_(transport), channel_(std::move(channel)), options_(std::move(options)) {
    if (const std::string& local = channel_->options().local_address; !local.empty()) {
      auto bound = transport.WithLocalAddress(local);
      if (bound.ok()) {
        bound_ = std::move(bound).value();
      } else {
        unusable_ = bound.status().WithContext("the channel's local address (NAA_LOCAL_IP) " +
                                               local);
      }
    }
  }
  // Ends the calls in flight (kCancelled, as ~Client does); retries of
  // failed attempts that would start now end with kCancelled instead.
  ~ChannelStubs() {
    std::vector<std::unique_ptr<Client>> clients;
    {
      std::lock_guard<std::mutex> lock(mu_);
      closing_ = true;
      clients.swap(clients_);
    }
    clients.clear();  // their engines' callbacks may run here, and see closing_
  }
  ChannelStubs(const ChannelStubs&) = delete;
  ChannelStubs& operator=(const ChannelStubs&) = delete;

  Channel& channel() const { return *channel_; }

  // The client of NAA `index`; nullptr once the stubs are being destroyed
  // (or if they cannot connect from the local address).
  Client* At(size_t index) {
    std::lock_guard<std::mutex> lock(mu_);
    return AtLocked(index);
  }

  // `attempt(client, deadline)` runs one attempt.
  template <typename F>
  Status Call(std::string_view routine, bool idempotent, std::optional<uint64_t> key,
              Deadline deadline, F&& attempt) {
    Channel::Attempts attempts(*channel_, routine, idempotent, key, deadline);
    while (true) {
      Result<size_t> naa = attempts.Next();
      if (!naa.ok()) return naa.status();
      Client* client = At(*naa);
      Status final;
      if (client == nullptr) {
        attempts.EndWithoutNaa(Unusable(routine), &final);
        return final;
      }
      Status s = attempt(*client, attempts.attempt_deadline());
      if (!EndAttempt(attempts, std::move(s), &final)) return final;
    }
  }

  // `attempt(client, deadline, done)` starts one attempt: the client's
  // <R>Async, which calls `done` on its engine thread. `done` of the call
  // runs once, on an engine thread.
  using Done = std::function<void(Status)>;
  template <typename F>
  void CallAsync(std::string_view routine, bool idempotent, std::optional<uint64_t> key,
                 Deadline deadline, F attempt, Done done) {
    auto op = std::make_shared<Op<F>>(*channel_, routine, idempotent, key, deadline,
                                      std::move(attempt), std::move(done));
    StartNext(std::move(op));
  }

 private:
  template <typename F>
  struct Op {
    Op(Channel& channel, std::string_view routine, bool idempotent, std::optional<uint64_t> key,
       Deadline deadline, F f, Done d)
        : attempts(channel, routine, idempotent, key, deadline),
          name(routine),
          attempt(std::move(f)),
          done(std::move(d)) {}
    Channel::Attempts attempts;
    std::string name;
    F attempt;
    Done done;
  };

  // Attempts::End, but a deadline that passed waiting for a free session
  // of the NAA's client is the caller's, not the NAA's failure.
  static bool EndAttempt(Channel::Attempts& attempts, Status s, Status* final) {
    if (IsNoFreeSession(s)) {
      attempts.EndWithoutNaa(std::move(s), final);
      return false;
    }
    return attempts.End(std::move(s), final);
  }

  // Why At() gives no client.
  Status Unusable(std::string_view routine) const {
    if (!unusable_.ok()) return unusable_.WithContext(routine);
    return CancelledError(std::string(routine) + ": the client was destroyed");
  }

  Client* AtLocked(size_t index) {
    if (closing_ || !unusable_.ok()) return nullptr;
    if (clients_.size() <= index) clients_.resize(index + 1);
    if (!clients_[index]) {
      const NaaAddress a = channel_->naa(index);
      StubOptions options = options_;
      options.session.retry_refused_connect =
          options.session.retry_refused_connect && channel_->retry_refused_connect();
      clients_[index] =
          std::make_unique<Client>(bound_ ? *bound_ : transport_, a.host, a.port, options);
    }
    return clients_[index].get();
  }

  // The first attempt on the caller's thread, the others on the engine
  // thread of the attempt before (a Submit to another client's engine
  // never runs its callback on the caller's stack).
  template <typename F>
  void StartNext(std::shared_ptr<Op<F>> op) {
    Result<size_t> naa = op->attempts.Next();
    if (!naa.ok()) {  // only after a failed attempt: on an engine thread
      op->done(naa.status());
      return;
    }
    std::unique_lock<std::mutex> lock(mu_);
    Client* client = AtLocked(*naa);
    if (client == nullptr) {
      Status why = Unusable(op->name);
      lock.unlock();
      Status final;
      op->attempts.EndWithoutNaa(std::move(why), &final);
      op->done(std::move(final));
      return;
    }
    // Under the lock: the destructor cannot take the client away meanwhile.
    op->attempt(*client, op->attempts.attempt_deadline(), [this, op](Status s) {
      Status final;
      if (EndAttempt(op->attempts, std::move(s), &final)) {
        StartNext(op);
      } else {
        op->done(std::move(final));
      }
    });
  }

  Transport& transport_;
  const std::shared_ptr<Channel> channel_;
  const StubOptions options_;
  std::unique_ptr<Transport> bound_;  // transport_ from the local address
  Status unusable_;                   // why there is no bound_ (if it is needed)
  std::mutex mu_;
  bool closing_ = false;                         // guarded by mu_
  std::vector<std::unique_ptr<Client>> clients_;  // guarded by mu_
};

}  // namespace naarpc::codegen

#endif  // NAARPC_IMPL_CHANNEL_STUB_H_
