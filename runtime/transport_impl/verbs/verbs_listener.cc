#include "runtime/transport_impl/verbs/verbs_listener.h"

#include <arpa/inet.h>

#include <atomic>
#include <cerrno>
#include <map>
#include <utility>

#include "runtime/transport_impl/verbs/verbs_cm.h"
#include "runtime/transport_impl/verbs/verbs_connection.h"

namespace naarpc {
namespace verbs {
namespace {

class VerbsListener final : public Listener {
 public:
  VerbsListener(EventChannelPtr channel, CmIdPtr id, const VerbsOptions& opt)
      : channel_(std::move(channel)), id_(std::move(id)), opt_(opt) {
    port_ = ntohs(rdma_get_src_port(id_.get()));
  }

  // Every connection in set-up progresses at once: a peer that never
  // completes the rdma_cm exchange (no RTU) does not delay another. Its id
  // stays on the listener's channel until ESTABLISHED, then moves to a
  // channel of its own; set-ups unfinished after kSetupTimeout are dropped.
  Result<std::unique_ptr<Connection>> Accept(Deadline deadline) override {
    for (;;) {
      DropExpiredSetups();
      Deadline wait = deadline;
      for (const auto& [id, setup] : setups_) wait = Deadline::Earlier(wait, setup.deadline);
      auto next = NextCmEvent(channel_.get(), wait, wake_.fd(), &shutdown_);
      if (!next.ok()) {
        if (next.status().code() == StatusCode::kDeadlineExceeded && !deadline.expired()) {
          continue;  // a set-up's time ran out, not ours
        }
        return next.status();
      }
      CmEventPtr ev = std::move(next).value();
      if (ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL) {
        return UnavailableError("listener: RDMA device removed");
      }
      rdma_cm_id* raw_id = ev->id;
      if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
        ev.reset();  // ack before anything may destroy the id
        BeginSetup(raw_id);
        continue;
      }
      auto it = setups_.find(raw_id);
      if (it == setups_.end()) continue;  // not ours (the listening id's own events)
      const bool established = ev->event == RDMA_CM_EVENT_ESTABLISHED && ev->status == 0;
      ev.reset();  // acked: the id may now migrate or be destroyed
      std::shared_ptr<Core> core = std::move(it->second.core);
      std::unique_ptr<VerbsConnection> conn = std::move(it->second.conn);
      setups_.erase(it);
      if (!established) continue;  // rejected, unreachable, gone: the next one
      auto ch = NewEventChannel();
      if (!ch.ok()) return ch.status().WithContext("accept");
      core->channel = std::move(*ch);
      if (rdma_migrate_id(raw_id, core->channel.get()) != 0) {
        return InternalError(ErrnoText("rdma_migrate_id", errno));
      }
      if (!conn) conn = std::make_unique<VerbsConnection>(std::move(core), opt_);
      conn->Established();
      return std::unique_ptr<Connection>(std::move(conn));
    }
  }

  bool SetAcceptHook(AcceptHook hook) override {
    hook_ = std::move(hook);
    return true;
  }

  uint16_t port() const override { return port_; }

  void Shutdown() override {
    shutdown_.store(true);
    wake_.Signal();
  }

 private:
  static constexpr auto kSetupTimeout = std::chrono::seconds(10);
  struct Setup {
    std::shared_ptr<Core> core;  // id on the listener's channel until established
    // With an accept hook: the connection it prepared (its QP in INIT, the
    // hook's receives posted). Declared after `core`: destroyed first.
    std::unique_ptr<VerbsConnection> conn;
    Deadline deadline = Deadline::Infinite();
  };

  // Creates the resources of a requested connection, runs the accept hook
  // on it (the QP exists and takes receives; the peer cannot send before
  // rdma_accept), and accepts it; a failure rejects it.
  void BeginSetup(rdma_cm_id* raw_id) {
    auto core = std::make_shared<Core>();
    core->id.reset(raw_id);
    if (Status s = core->CreateResources(opt_); !s.ok()) {
      rdma_reject(raw_id, nullptr, 0);
      return;  // core destroys the id
    }
    std::unique_ptr<VerbsConnection> conn;
    if (hook_) {
      conn = std::make_unique<VerbsConnection>(core, opt_);
      auto context = hook_(*conn);
      if (!context.ok()) {
        rdma_reject(raw_id, nullptr, 0);
        return;
      }
      conn->SetAcceptContext(std::move(context).value());
    }
    rdma_conn_param param = ConnParam(opt_);
    if (rdma_accept(raw_id, &param) != 0) return;  // the client went away
    setups_.insert_or_assign(raw_id, Setup{std::move(core), std::move(conn),
                                           Deadline::After(kSetupTimeout)});
  }

  void DropExpiredSetups() {
    for (auto it = setups_.begin(); it != setups_.end();) {
      it = it->second.deadline.expired() ? setups_.erase(it) : std::next(it);
    }
  }

  EventChannelPtr channel_;
  CmIdPtr id_;  // destroyed before channel_
  VerbsOptions opt_;
  uint16_t port_ = 0;
  EventFd wake_;
  std::atomic<bool> shutdown_{false};
  AcceptHook hook_;
  // Connections in set-up (Accept only: one caller at a time). Declared
  // last: their ids use channel_, so they go first.
  std::map<rdma_cm_id*, Setup> setups_;
};

}  // namespace

std::unique_ptr<Listener> NewListener(EventChannelPtr channel, CmIdPtr id,
                                      const VerbsOptions& opt) {
  return std::make_unique<VerbsListener>(std::move(channel), std::move(id), opt);
}

}  // namespace verbs
}  // namespace naarpc
