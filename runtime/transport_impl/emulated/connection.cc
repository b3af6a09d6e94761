// The Connection calls of an emulated connection (connection.h).
#include "runtime/transport_impl/emulated/connection.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "runtime/transport_impl/emulated/sockets.h"

namespace naarpc {
namespace emulated {

EmuConnection::EmuConnection(UniqueFd fd, bool listener_side, std::string peer,
                             EmulatedOptions opts)
    : fd_(std::move(fd)),
      listener_side_(listener_side),
      peer_(std::move(peer)),
      opts_(std::move(opts)),
      mrs_(std::make_shared<MrTable>()) {
  // Blocking socket: every call passes MSG_DONTWAIT except the blocking
  // receive of PollCompletions (one syscall instead of poll + receive).
  int fl = ::fcntl(fd_.get(), F_GETFL);
  if (fl >= 0) ::fcntl(fd_.get(), F_SETFL, fl & ~O_NONBLOCK);
}

// What ibv_post_send refuses (EINVAL) for a bind or invalidate.
Status EmuConnection::CheckLocalRequest(const SendRequest& r) const {
  // The message is built only on refusal (this runs for every bind/invalidate).
  auto refuse = [&](const std::string& why) {
    return InvalidArgumentError("emulated transport: wr_id " + std::to_string(r.wr_id) + ": " +
                                why);
  };
  if (r.opcode == WorkOpcode::kLocalInvalidate) {
    return r.solicited ? refuse("the solicited bit on a LOCAL_INV") : Status::Ok();
  }
  const auto* w = dynamic_cast<const EmuMemoryWindow*>(r.window);
  if (w == nullptr || w->table() != mrs_.get()) {
    return refuse("BIND_MW without a window of this connection");
  }
  const auto* mr = dynamic_cast<const EmuMemoryRegion*>(r.window_region);
  if (mr == nullptr || mr->table() != mrs_.get()) {
    return refuse("BIND_MW without a region of this connection");
  }
  if (r.local.length == 0) return refuse("BIND_MW of 0 bytes");
  if ((r.window_access & ~(kAccessRemoteWrite | kAccessRemoteRead)) != 0 ||
      r.window_access == 0) {
    return refuse("BIND_MW access " + Hex(r.window_access) +
                  " (kAccessRemoteWrite and/or kAccessRemoteRead)");
  }
  if (r.solicited) return refuse("the solicited bit on a BIND_MW");
  return Status::Ok();
}

Status EmuConnection::PostRecv(uint64_t wr_id, const LocalBuffer& buffer) {
  std::lock_guard<OpMutex> lock(op_mu_);
  CheckDisconnectRequest();
  if (broken_) return DownError();
  if (opts_.recv_queue_depth != 0 && rq_.size() >= opts_.recv_queue_depth) {
    // As ibv_post_recv on a full receive queue (ENOMEM).
    return ResourceExhaustedError("emulated transport: receive queue full (depth " +
                                  std::to_string(opts_.recv_queue_depth) + ")");
  }
  RecvWr r;
  r.wr_id = wr_id;
  r.addr = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(buffer.addr));
  r.len = buffer.length;
  if (buffer.length > 0) {
    r.error = mrs_->Check(buffer.lkey, MrTable::kLkeyTag, buffer.addr, buffer.length,
                          kAccessLocalWrite, &r.mr_index, nullptr, &mr_cache_);
  }
  rq_.push_back(r);
  return Status::Ok();
}

Status EmuConnection::PostSend(std::span<const SendRequest> requests) {
  std::lock_guard<OpMutex> lock(op_mu_);
  CheckDisconnectRequest();
  if (broken_) return DownError();
  for (const SendRequest& r : requests) {
    if (r.opcode == WorkOpcode::kBindWindow || r.opcode == WorkOpcode::kLocalInvalidate) {
      if (Status st = CheckLocalRequest(r); !st.ok()) return st;
      continue;
    }
    if (r.opcode != WorkOpcode::kSend && r.opcode != WorkOpcode::kRdmaWrite &&
        r.opcode != WorkOpcode::kRdmaWriteWithImm) {
      return InvalidArgumentError("emulated transport: PostSend with a receive opcode");
    }
    if (r.solicited && r.opcode == WorkOpcode::kRdmaWrite) {
      return InvalidArgumentError(
          "emulated transport: the solicited-event bit applies to SEND and "
          "RDMA_WRITE_WITH_IMM only (wr_id " + std::to_string(r.wr_id) + ")");
    }
    if (r.sg_list.size() > max_send_sge()) {
      return InvalidArgumentError(
          "emulated transport: wr_id " + std::to_string(r.wr_id) + " has " +
          std::to_string(r.sg_list.size()) + " gather entries; the queue pair takes " +
          std::to_string(max_send_sge()) + " (max_send_sge): chain work requests");
    }
  }
  // Like an RC send queue: a slot is freed only by polling the completion of
  // its WR or of a later one (unsignaled WRs alone never free slots).
  const uint64_t unfreed = sq_.posted - cq_.freed_post_index();
  if (opts_.send_queue_depth != 0 && unfreed + requests.size() > opts_.send_queue_depth) {
    return ResourceExhaustedError(
        "emulated transport: send queue full (depth " + std::to_string(opts_.send_queue_depth) +
        ", " + std::to_string(unfreed) + " posted requests not yet freed by a polled completion, " +
        std::to_string(requests.size()) + " more)");
  }
  bool drop = false;
  for (const SendRequest& r : requests) {
    if (r.opcode == WorkOpcode::kBindWindow || r.opcode == WorkOpcode::kLocalInvalidate) {
      LocalWr l;
      l.wr_id = r.wr_id;
      l.after_seq = sq_.next_seq - 1;
      l.post_index = ++sq_.posted;
      l.opcode = r.opcode;
      l.signaled = r.signaled;
      if (r.opcode == WorkOpcode::kBindWindow) {
        auto* w = static_cast<EmuMemoryWindow*>(r.window);
        l.window.window_index = w->index();
        l.window.key = w->NextKey();
        w->set_rkey(l.window.key);  // the consumer's key for this bind, as ibv_inc_rkey
        l.window.mr_index = static_cast<const EmuMemoryRegion*>(r.window_region)->index();
        l.window.addr = r.local.addr;
        l.window.len = r.local.length;
        l.window.access = r.window_access;
      } else {
        l.window.window_index = r.rkey >> 8;
        l.window.key = r.rkey;
      }
      sq_.local.push_back(std::move(l));
      continue;
    }
    SendWr w;
    w.wr_id = r.wr_id;
    w.seq = sq_.next_seq;
    w.post_index = ++sq_.posted;
    w.opcode = r.opcode;
    w.len = r.local.length;
    w.signaled = r.signaled;
    w.msg.opcode = r.opcode;
    w.msg.solicited = r.solicited;
    w.msg.len = r.local.length;
    w.msg.remote_addr = r.remote_addr;
    w.msg.rkey = r.rkey;
    w.msg.imm = r.imm_data;
    if (!r.sg_list.empty()) {
      // Every entry checked like `local` (an HCA fails the WR with a local
      // protection error); the bytes are read when the frame is sent.
      uint64_t total = 0;
      uint32_t err = kEmuErrNone;
      for (const LocalBuffer& b : r.sg_list) {
        uint32_t index;
        if (b.length > 0) {
          err = mrs_->Check(b.lkey, MrTable::kLkeyTag, b.addr, b.length, 0, &index, nullptr,
                            &mr_cache_);
        }
        if (err != kEmuErrNone) break;
        total += b.length;
      }
      if (err == kEmuErrNone && total > UINT32_MAX) err = kEmuErrBadLkey;
      w.len = w.msg.len = static_cast<uint32_t>(std::min<uint64_t>(total, UINT32_MAX));
      if (err != kEmuErrNone) {
        w.fail = CompletionStatus::kLocalProtectionError;
        w.vendor_err = err;
      } else {
        std::vector<GatherPiece>& pieces = gathers_.New(&w.msg.gather);
        for (const LocalBuffer& b : r.sg_list) {
          if (b.length == 0) continue;
          pieces.push_back({reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(b.addr)),
                            static_cast<uint32_t>(b.length)});
        }
      }
    } else if (w.len > 0) {
      uint32_t index;
      uint32_t err = mrs_->Check(r.local.lkey, MrTable::kLkeyTag, r.local.addr, w.len, 0, &index,
                                 nullptr, &mr_cache_);
      if (err != kEmuErrNone) {
        w.fail = CompletionStatus::kLocalProtectionError;
        w.vendor_err = err;
      } else {
        w.msg.payload = reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(r.local.addr));
      }
    }
    const bool sendable = w.fail == CompletionStatus::kSuccess;
    bool duplicate = false, hold = false;
    if (opts_.faults && !drop) {
      FaultPoint p;
      p.is_listener_side = listener_side_;
      p.sequence = w.post_index - 1;
      p.opcode = w.opcode;
      p.length = w.len;
      p.has_imm = w.opcode == WorkOpcode::kRdmaWriteWithImm;
      p.imm_data = p.has_imm ? r.imm_data : 0;
      FaultAction a = opts_.faults->OnPost(p);
      switch (a.kind) {
        case FaultAction::Kind::kNone:
          break;
        case FaultAction::Kind::kDropConnection:
          // Send what precedes this WR, then drop.
          Pump();
          Push();
          drop = true;
          break;
        case FaultAction::Kind::kDelay:
          w.msg.delayed = true;
          w.msg.not_before = Clock::now() + a.delay;
          break;
        case FaultAction::Kind::kCorruptPayload:
          w.msg.corrupt_off = a.corrupt_offset;
          break;
        case FaultAction::Kind::kLoseMessage:
          if (w.opcode == WorkOpcode::kRdmaWriteWithImm) {
            w.msg.opcode = WorkOpcode::kRdmaWrite;
            w.msg.solicited = false;
            w.msg.imm = 0;
          }
          break;
        case FaultAction::Kind::kDuplicate:
          duplicate = sendable;
          break;
        case FaultAction::Kind::kSwapWithNext:
          hold = sendable;
          break;
        case FaultAction::Kind::kStallMidMessage:
          w.msg.stall_after = a.corrupt_offset;
          break;
      }
    }
    // The copy: its own request frame, right after the original's.
    std::optional<SendWr> copy;
    if (duplicate) {
      copy = w;
      gathers_.Ref(w.msg.gather);
      copy->signaled = false;
      copy->duplicate = true;
    }
    if (sq_.held_for_swap) {
      // The held WR and this one exchange their messages: the held message
      // goes on the wire right after this one's.
      SendWr& held = sq_.At(*sq_.held_for_swap);
      if (sendable) std::swap(held.msg, w.msg);
      held.held = false;
      sq_.held_for_swap.reset();
    }
    if (hold) {
      w.held = true;
      sq_.held_for_swap = w.seq;
    }
    sq_.wrs.push_back(std::move(w));
    ++sq_.next_seq;
    if (copy) {
      copy->seq = sq_.next_seq++;
      sq_.wrs.push_back(std::move(*copy));
    }
  }
  if (drop) {
    Break("fault injection dropped the connection", /*fault=*/false);
    return Status::Ok();
  }
  Pump();
  // Only binds/invalidates (no frame) and nothing queued: Pump executed
  // them; pushing would send a coalesced ack alone and wake the peer for it.
  const bool frames = std::any_of(requests.begin(), requests.end(), [](const SendRequest& r) {
    return r.opcode != WorkOpcode::kBindWindow && r.opcode != WorkOpcode::kLocalInvalidate;
  });
  if (!frames && out_.frames.empty() && !out_.lead_ctrl) return Status::Ok();
  // Blocked output: keep reading so a peer that is sending to us too can
  // make progress (no deadlock between two big senders).
  if (Push()) ReadInput();
  return Status::Ok();
}

template <typename Ready>
void EmuConnection::ProgressUntil(Deadline deadline, Ready&& ready) {
  for (;;) {
    CheckDisconnectRequest();
    if (ready() || broken_) return;
    Pump();
    if (ready() || broken_) return;
    const bool want_out = Push();  // also flushes coalesced acks
    if (broken_) return;
    WatchStall(/*looked=*/false);  // a message in progress: its deadline is a timer
    std::optional<Clock::time_point> timer = NextTimer();
    // Nothing to send: wait in the receive itself, until the deadline or
    // the next timer (a far one: a payload's stall watch, an RNR resend).
    if (!want_out && BlockingRead(timer ? Deadline::Earlier(deadline, Deadline::At(*timer))
                                        : deadline)) {
      WatchStall(/*looked=*/true);
      Pump();
      if (ready() || broken_ || deadline.expired()) return;
      continue;
    }
    Clock::time_point wake = deadline.when();
    if (timer) wake = std::min(wake, *timer);
    pollfd p{fd_.get(), static_cast<short>(POLLIN | (want_out ? POLLOUT : 0)), 0};
    int r = PollUntil(&p, 1, wake);
    if (r < 0) {
      Break("poll failed: " + Errno(errno));
      return;
    }
    if (r > 0) {
      if (p.revents & (POLLIN | POLLHUP | POLLERR)) ReadInput();
      if (!broken_ && (p.revents & POLLOUT)) Push();
    }
    WatchStall(/*looked=*/true);
    Pump();
    if (ready() || broken_ || deadline.expired()) return;
  }
}

Result<size_t> EmuConnection::PollCompletions(std::span<Completion> out, Deadline deadline) {
  std::lock_guard<OpMutex> lock(op_mu_);
  if (out.empty()) return InvalidArgumentError("emulated transport: empty completion array");
  ProgressUntil(deadline, [this] { return !cq_.empty(); });
  if (!cq_.empty()) return cq_.Drain(out);
  if (broken_) return DownError();
  return size_t{0};
}

Status EmuConnection::RequestNotify(NotifyMode mode) {
  std::lock_guard<OpMutex> lock(op_mu_);
  cq_.Arm(mode);
  return Status::Ok();
}

Result<bool> EmuConnection::WaitNotify(Deadline deadline) {
  std::lock_guard<OpMutex> lock(op_mu_);
  ProgressUntil(deadline, [this] { return cq_.event_pending(); });
  const bool event = cq_.TakeEvent();
  UpdateNotifyFd();  // its push may break the connection and raise one
  if (event || cq_.TakeEvent()) return true;
  if (broken_) return DownError();
  return false;
}

Result<size_t> EmuConnection::TryPollCompletions(std::span<Completion> out) {
  std::lock_guard<OpMutex> lock(op_mu_);
  if (out.empty()) return InvalidArgumentError("emulated transport: empty completion array");
  CheckDisconnectRequest();
  if (cq_.empty() && !broken_) {
    // What a NIC would have done meanwhile: one non-blocking progress step.
    Pump();
    Push();
    if (!broken_) ReadInput();
    WatchStall(/*looked=*/true);
    Pump();
  }
  if (!cq_.empty()) return cq_.Drain(out);
  if (broken_) return DownError();
  return size_t{0};
}

Status EmuConnection::Disconnect() {
  if (disconnect_requested_.exchange(true, std::memory_order_acq_rel)) return Status::Ok();
  // From the owning thread: flush pending acks, then flush the queues now.
  // From another thread (the owner may be blocked in poll): the shutdown
  // below wakes it and it breaks the connection itself.
  if (op_mu_.try_lock()) {
    if (!broken_) {
      Push();
      Break("disconnected locally", /*fault=*/false);
    }
    UpdateNotifyFd();
    op_mu_.unlock();
  }
  ::shutdown(fd_.get(), SHUT_RDWR);
  return Status::Ok();
}

int EmuConnection::notify_fd() {
  std::lock_guard<OpMutex> lock(op_mu_);
  if (notify_.ep.get() >= 0) return notify_.ep.get();
  // On failure errno says why (transport.h): kept past the closes.
  int err = 0;
  UniqueFd ep(::epoll_create1(EPOLL_CLOEXEC));
  if (ep.get() < 0) err = errno;
  UniqueFd timer(err == 0 ? ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC) : -1);
  if (err == 0 && timer.get() < 0) err = errno;
  epoll_event sock{}, tick{};
  sock.events = EPOLLIN | EPOLLRDHUP;
  tick.events = EPOLLIN;
  if (err == 0 && (::epoll_ctl(ep.get(), EPOLL_CTL_ADD, fd_.get(), &sock) != 0 ||
                   ::epoll_ctl(ep.get(), EPOLL_CTL_ADD, timer.get(), &tick) != 0)) {
    err = errno;
  }
  if (err != 0) {
    ep.Reset();
    timer.Reset();
    errno = err;
    return -1;
  }
  notify_.ep = std::move(ep);
  notify_.timer = std::move(timer);
  UpdateNotifyFd();
  return notify_.ep.get();
}

// With a notify fd, at the end of WaitNotify (the owner's last call before
// it sleeps on the fd, transport.h) and of Disconnect: pushes queued bytes
// and coalesced acks, then makes the fd wait for what the next progress
// step needs: input or a disconnect (always), room in the socket while
// output is queued, the next timer, or at once while an event is pending
// (raised by that push or by Disconnect). Other calls leave the fd alone:
// no system call for it per operation. Re-arming the timerfd clears its
// expirations. REQUIRES: op_mu_ held.
void EmuConnection::UpdateNotifyFd() {
  if (notify_.ep.get() < 0) return;
  Pump();
  const bool want_out = Push();
  if (want_out != notify_.out) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | (want_out ? EPOLLOUT : 0u);
    if (::epoll_ctl(notify_.ep.get(), EPOLL_CTL_MOD, fd_.get(), &ev) == 0) notify_.out = want_out;
  }
  // Clock is CLOCK_MONOTONIC; 1 ns after its epoch is long past.
  const std::optional<Clock::time_point> at =
      cq_.event_pending() ? std::optional(Clock::time_point(std::chrono::nanoseconds(1))) : NextTimer();
  if (at != notify_.timer_at && SetTimerFd(notify_.timer.get(), at)) notify_.timer_at = at;
}


}  // namespace emulated
}  // namespace naarpc
