#include "runtime/naa/connection_server.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

namespace naarpc::internal {

namespace {

// A host calling in a loop sends its next call about one round trip after
// our reply. The thread that served a call waits for it on the connection
// itself (a blocking wait, no spin) up to this long, when the engine lets it
// (another thread keeps serving every other connection, EventEngine::
// TryLinger), instead of going back to the epoll set at once: that saves
// the re-arming and the wake-up of every call in a loop.
constexpr auto kLingerAfterCall = std::chrono::milliseconds(50);

}  // namespace

ConnectionServer::~ConnectionServer() {
  if (place_.admission_id != 0) server_.shared->admission.Release(place_.admission_id);
}

void ConnectionServer::Log(const std::string& line) const {
  server_.shared->Log("naarpc NAA [" + place_.peer + "]: " + line);
}

void ConnectionServer::Finish(const Status& why) {
  protocol_.phase = Phase::kEnded;
  if (!why.ok() && why.code() != StatusCode::kDisconnected) {
    protocol_.sm.Fail();
    Log(why.ToString());
  } else if (!why.ok()) {
    // A host that leaves between calls is normal; one that leaves mid-call,
    // or a connection the transport broke on a fault (a protocol violation,
    // a stall), is logged with the transport's reason.
    std::string reason = conn_->down_reason();
    if (reason.empty()) reason = why.message();
    if (calls_.in_call) {
      Log("disconnected during a call of " + RoutineText(calls_.code) + ": " + reason);
    } else if (calls_.results_unacked) {
      Log("disconnected before acknowledging the results of " + RoutineText(calls_.code) +
          ": " + reason);
    } else if (conn_->down_on_fault()) {
      Log("disconnected: " + reason);
    }
  }
  // A kernel that overran its limit is not waited for: it was abandoned and
  // holds this object (the regions' memory) until it returns; the host's
  // access ends here, with the connection and the registrations.
  conn_->Disconnect().IgnoreError();
  for (auto& g : regions_.groups) g.mr.reset();
  ep_.ReleaseRegistrations();
}

void ConnectionServer::Ended() {
  {
    std::lock_guard<std::mutex> lock(conn_mu_);
    conn_.reset();
  }
  // Slot and memory are free before the server counts the connection
  // closed. Memory a kernel that overran its limit still uses, or that a
  // handler retained (NaaCall::retain_memory), goes back with the last
  // owner (~ConnectionServer); until then only the slot is free.
  if (place_.admission_id != 0) {
    if (calls_.kernel_overran || calls_.memory_retained.load()) {
      server_.shared->admission.Closed(place_.admission_id);
    } else {
      streams_.list.clear();
      streams_.ptrs.clear();
      view_.params_template.clear();
      view_.params.clear();
      view_.internal_template.clear();
      view_.internal.clear();
      regions_.groups.clear();  // the regions' memory
      place_.admission_slot = nullptr;
      server_.shared->admission.Release(std::exchange(place_.admission_id, 0));
    }
  }
  if (auto on_end = std::exchange(place_.on_end, nullptr)) on_end();
}

void ConnectionServer::Abort(Status why) {
  Finish(why);
  Ended();
}

void ConnectionServer::Reclaim() {
  Log("reclaimed: an idle session of the peer holding the most, taken for a newcomer "
      "(the host reconnects on its next call)");
  Interrupt();
}

void ConnectionServer::Interrupt() {
  std::lock_guard<std::mutex> lock(conn_mu_);
  if (conn_) conn_->Disconnect().IgnoreError();
}

Status ConnectionServer::Begin() {
  NAARPC_RETURN_IF_ERROR(protocol_.sm.Transition(CommState::kReady));
  NAARPC_RETURN_IF_ERROR(protocol_.sm.Transition(CommState::kConnected));
  protocol_.mrsp_deadline = Deadline::After(options().mrsp_timeout);
  errno = 0;
  place_.fd = conn_->notify_fd();
  if (place_.fd < 0) {
    const int err = errno;  // set if creating it failed (transport.h)
    const std::string what = "the " + place_.peer + " connection has no notify_fd" +
                             (err != 0 ? std::string(" (") + std::strerror(err) + ")" : "") +
                             ": the NAA's engine cannot drive it";
    return err == EMFILE || err == ENFILE || err == ENOMEM ? ResourceExhaustedError(what)
                                                           : FailedPreconditionError(what);
  }
  if (std::shared_ptr<void> prepared = conn_->TakeAcceptContext()) {
    // The listener's accept hook (NaaServer::Start) set it up and posted
    // the MRSP receive before the host could send.
    ep_ = std::move(*std::static_pointer_cast<Endpoint>(prepared));
  } else {
    NAARPC_RETURN_IF_ERROR(ep_.SetUp(*conn_));
    NAARPC_RETURN_IF_ERROR(ep_.PostMrspReceive());
  }
  return protocol_.sm.Transition(CommState::kMrspReceiving);
}

std::optional<Deadline> ConnectionServer::Drive() {
  Status s = Progress();
  if (EventEngine::GivenUp()) return std::nullopt;  // the watchdog ended it (RunKernel)
  if (s.ok() && protocol_.phase == Phase::kServing && NoteIdle()) protocol_.phase = Phase::kEnded;
  if (!s.ok() || protocol_.phase == Phase::kEnded) {
    Finish(s);
    return std::nullopt;
  }
  return protocol_.phase == Phase::kMrsp ? protocol_.mrsp_deadline : IdleDeadline();
}

Status ConnectionServer::Progress() {
  std::array<Completion, 8> batch;
  bool armed = false;
  bool down = false;                  // WaitNotify reported the connection down
  // kLingerAfterCall after the last call, on the coarse clock: a linger may
  // end a tick early, and the precise clock costs up to ~0.1 us per read
  // (VMs), twice per call in a loop.
  Deadline::Clock::time_point linger_until{};
  bool lingering = false;  // counted by the engine
  struct EndLinger {
    EventEngine& engine;
    bool& lingering;
    ~EndLinger() {
      if (lingering && !EventEngine::GivenUp()) engine.EndLinger();  // else: GiveUp did
    }
  } end_linger{server_.engine, lingering};
  for (;;) {
    const bool wait = lingering && Deadline::CoarseNow() < linger_until;
    Result<size_t> n = wait ? conn_->PollCompletions(batch, Deadline::At(linger_until))
                            : conn_->TryPollCompletions(batch);
    if (!n.ok()) return n.status();  // kDisconnected: the host left
    for (size_t i = 0; i < *n; ++i) {
      if (protocol_.phase == Phase::kMrsp) {
        NAARPC_RETURN_IF_ERROR(OnMrspRequest(batch[i]));
      } else {
        // The whole batch: a result write's completion after a call's must
        // not be lost (it frees send slots).
        bool host_left = false;
        NAARPC_RETURN_IF_ERROR(OnDataCompletion(batch[i], host_left));
        if (host_left) return DisconnectedError("the host left");
      }
      if (protocol_.phase == Phase::kEnded) return Status::Ok();
    }
    if (!calls_.queued.empty()) {
      NAARPC_RETURN_IF_ERROR(ServeQueuedCalls());
      if (protocol_.phase == Phase::kEnded) return Status::Ok();
      armed = false;  // the calls polled for themselves
      if (lingering || (lingering = server_.engine.TryLinger())) {
        linger_until = Deadline::CoarseNow() + kLingerAfterCall;
      }
      continue;
    }
    if (*n > 0) continue;
    if (protocol_.phase == Phase::kMrsp && protocol_.mrsp_deadline.expired()) {
      return DeadlineExceededError(
          "no MRSP request within " + std::to_string(options().mrsp_timeout.count()) +
          " ms of connecting (a NAAICE host sends it at once: the peer is not one, or is stuck)");
    }
    // Nothing left: arm, poll once more (a completion may have raced the
    // arming), then let the descriptor wait (transport.h, notify_fd).
    if (!armed) {
      NAARPC_RETURN_IF_ERROR(conn_->RequestNotify(NotifyMode::kNextCompletion));
      armed = true;
      continue;
    }
    Result<bool> event = conn_->WaitNotify(Deadline::Now());
    if (!event.ok()) {
      // Down: the loop above takes what is left (flushed work, handled as
      // any completion), then ends with the transport's status.
      if (down) return event.status();
      down = true;
      continue;
    }
    if (!*event) return Status::Ok();  // armed: the descriptor signals the next step
    armed = false;
  }
}

Status ConnectionServer::ServeQueuedCalls() {
  while (!calls_.queued.empty()) {
    const uint32_t imm = calls_.queued.Pop();
    // Reclaimed while the call came: the connection is closing anyway.
    if (place_.admission_slot == nullptr ||
        !server_.shared->admission.Busy(*place_.admission_slot)) {
      protocol_.phase = Phase::kEnded;
      return Status::Ok();
    }
    server_.engine.BeforeBlocking();  // the kernel may take long: others are served meanwhile
    calls_.in_call = true;
    calls_.code = static_cast<uint8_t>(imm & 0x7f);
    NAARPC_RETURN_IF_ERROR(HandleCall(imm));
    calls_.in_call = false;
    // (After a kernel timeout HandleCall fails: the connection ends,
    // docs/protocol.md 7.4.)
    server_.shared->admission.Idle(*place_.admission_slot);
  }
  return Status::Ok();
}

Status ConnectionServer::OnDataCompletion(const Completion& c, bool& host_left) {
  const WrKind kind = WrIdKind(c.wr_id);
  if (c.status != CompletionStatus::kSuccess) {
    if (c.status == CompletionStatus::kFlushed) {
      host_left = true;
      // A result write the host never acknowledged: it left mid-call (or
      // was killed before its transport acknowledged them).
      if (kind != WrKind::kDataRecv && calls_.count > 0) calls_.results_unacked = true;
      return Status::Ok();
    }
    return CompletionFailure(
        c, kind == WrKind::kDataRecv ? "receiving a call" : "writing results back", *conn_);
  }
  if (kind != WrKind::kDataRecv) {
    // Our MRSP send or a result write.
    ep_.OnSendCompleted(c.wr_id);
    return Status::Ok();
  }
  ep_.DataRecvConsumed();
  if (c.opcode != WorkOpcode::kRecvRdmaWithImm || !c.has_imm) {
    return ProtocolError("expected a WRITE_WITH_IMM starting a call, got a SEND");
  }
  if (!streams_.list.empty() && !calls_.queued.empty()) {
    // A streaming call's request is waiting: what follows it is its frames
    // (docs/protocol.md 15.2).
    streams_.early_frames.push_back({c.imm_data, c.byte_len});
    return Status::Ok();
  }
  if (calls_.queued.full()) {
    // More calls than posted receives: cannot happen on a conforming transport.
    return ProtocolError("more calls arrived than receives were posted");
  }
  calls_.queued.Push(c.imm_data);
  return Status::Ok();
}

Status ConnectionServer::ReclaimSendQueue() {
  return PollUntil(
      *conn_, Deadline::After(options().mrsp_timeout), "waiting for a result write to complete",
      [&](const Completion& c, bool& done) -> Status {
        bool host_left = false;
        NAARPC_RETURN_IF_ERROR(OnDataCompletion(c, host_left));
        if (host_left) return DisconnectedError("the host left while results were written");
        done = !ep_.send_budget().signal_pending();
        return Status::Ok();
      });
}

bool ConnectionServer::NoteIdle() {
  const auto zero = std::chrono::milliseconds::zero();
  if (options().idle_log_after <= zero && options().idle_timeout <= zero) return false;
  const auto now = Deadline::Clock::now();
  if (calls_.count != calls_.idle.calls_at_check) {  // a new idle spell
    calls_.idle.calls_at_check = calls_.count;
    calls_.idle.since = now;
    calls_.idle.logged = false;
    return false;
  }
  const auto idle = now - calls_.idle.since;
  const std::string since =
      calls_.count == 0 ? std::string("the MRSP") : "call " + std::to_string(calls_.count);
  const auto ms = [](auto d) {
    return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
  };
  if (options().idle_timeout > zero && idle >= options().idle_timeout) {
    Log("idle: no call for " + ms(idle) + " ms since " + since + "; closing the connection "
        "(ServerOptions::idle_timeout " + ms(options().idle_timeout) + " ms)");
    return true;
  }
  if (options().idle_log_after > zero && !calls_.idle.logged && idle >= options().idle_log_after) {
    calls_.idle.logged = true;
    Log("idle: no call for " + ms(idle) + " ms since " + since +
        " (connection kept open; logged once per idle spell)");
  }
  return false;
}

Deadline ConnectionServer::IdleDeadline() const {
  const auto zero = std::chrono::milliseconds::zero();
  Deadline next = Deadline::Infinite();
  if (options().idle_timeout > zero) {
    next = Deadline::At(calls_.idle.since + options().idle_timeout);
  }
  if (options().idle_log_after > zero && !calls_.idle.logged) {
    next = Deadline::Earlier(next, Deadline::At(calls_.idle.since + options().idle_log_after));
  }
  return next;
}

}  // namespace naarpc::internal
