// A verbs connection (verbs_connection.h): posting, completions, waits.
#include "runtime/transport_impl/verbs/verbs_connection.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "runtime/sockaddr_text.h"
#include "runtime/spin_budget.h"
#include "runtime/transport_impl/verbs/verbs_cm.h"

namespace naarpc {
namespace verbs {
namespace {

// How long a broken connection waits for flush completions of outstanding
// work before reporting kDisconnected.
constexpr auto kFlushGrace = std::chrono::seconds(2);
constexpr timespec kZeroTimeout{0, 0};
// Internal wr_id layout: top bit marks receives, the rest is a sequence.
constexpr uint64_t kRecvBit = 1ull << 63;

}  // namespace

VerbsConnection::VerbsConnection(std::shared_ptr<Core> core, const VerbsOptions& opt)
    : core_(std::move(core)), opt_(opt) {
  peer_ = SockaddrToString(rdma_get_peer_addr(core_->id.get()));
}

Status VerbsConnection::PostSend(std::span<const SendRequest> requests) {
  if (requests.empty()) return Status::Ok();
  if (IsDown()) return DisconnectedError("PostSend: " + DownReason());
  // Reused across calls: no allocation on the data path once warm.
  std::vector<ibv_send_wr>& wrs = work_.wr_scratch;
  std::vector<ibv_sge>& sges = work_.sge_scratch;
  // One slot per request (its `local`) plus its gather list: sized before
  // any pointer into it is taken.
  size_t sge_total = 0;
  for (const SendRequest& r : requests) {
    if (r.sg_list.size() > core_->max_send_sge) {
      return InvalidArgumentError(
          "PostSend: wr_id " + std::to_string(r.wr_id) + " has " +
          std::to_string(r.sg_list.size()) + " gather entries; the queue pair takes " +
          std::to_string(core_->max_send_sge) + " (max_send_sge): chain work requests");
    }
    sge_total += std::max<size_t>(r.sg_list.size(), 1);
  }
  if (wrs.size() < requests.size()) wrs.resize(requests.size());
  if (sges.size() < sge_total) sges.resize(sge_total);
  size_t sge_next = 0;
  uint64_t seq = work_.next_send_seq;
  for (size_t i = 0; i < requests.size(); ++i) {
    const SendRequest& r = requests[i];
    ibv_send_wr& wr = wrs[i];
    wr = {};
    switch (r.opcode) {
      case WorkOpcode::kSend: wr.opcode = IBV_WR_SEND; break;
      case WorkOpcode::kRdmaWrite: wr.opcode = IBV_WR_RDMA_WRITE; break;
      case WorkOpcode::kRdmaWriteWithImm:
        wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.imm_data = htonl(r.imm_data);
        break;
      case WorkOpcode::kBindWindow: {
        auto* w = dynamic_cast<VerbsMemoryWindow*>(r.window);
        auto* m = dynamic_cast<const VerbsMemoryRegion*>(r.window_region);
        if (w == nullptr || m == nullptr || w->core() != core_.get() || m->core() != core_.get()) {
          return InvalidArgumentError("PostSend: wr_id " + std::to_string(r.wr_id) +
                                      ": BIND_MW needs a window and a region of this connection");
        }
        if (r.solicited) return InvalidArgumentError("PostSend: the solicited bit on a BIND_MW");
        wr.opcode = IBV_WR_BIND_MW;
        wr.bind_mw.mw = w->mw();
        wr.bind_mw.rkey = ibv_inc_rkey(w->mw()->rkey);
        wr.bind_mw.bind_info.mr = m->mr();
        wr.bind_mw.bind_info.addr = r.local.addr;
        wr.bind_mw.bind_info.length = r.local.length;
        wr.bind_mw.bind_info.mw_access_flags = static_cast<unsigned>(r.window_access);
        break;
      }
      case WorkOpcode::kLocalInvalidate:
        if (r.solicited) return InvalidArgumentError("PostSend: the solicited bit on a LOCAL_INV");
        wr.opcode = IBV_WR_LOCAL_INV;
        wr.invalidate_rkey = r.rkey;
        break;
      default:
        return InvalidArgumentError("PostSend: opcode must be SEND or RDMA WRITE[_WITH_IMM]");
    }
    if (r.opcode == WorkOpcode::kBindWindow || r.opcode == WorkOpcode::kLocalInvalidate) {
      wr.wr_id = seq + i;
      ++sge_next;
      if (r.signaled) wr.send_flags |= IBV_SEND_SIGNALED;
      wr.next = i + 1 < requests.size() ? &wrs[i + 1] : nullptr;
      continue;
    }
    if (r.opcode != WorkOpcode::kSend) {
      wr.wr.rdma.remote_addr = r.remote_addr;
      wr.wr.rdma.rkey = r.rkey;
    }
    wr.wr_id = seq + i;
    if (!r.sg_list.empty()) {
      wr.sg_list = &sges[sge_next];
      for (const LocalBuffer& b : r.sg_list) sges[sge_next++] = {b.addr, b.length, b.lkey};
      wr.num_sge = static_cast<int>(r.sg_list.size());
    } else if (r.local.length > 0) {
      sges[sge_next] = {r.local.addr, r.local.length, r.local.lkey};
      wr.sg_list = &sges[sge_next++];
      wr.num_sge = 1;
      if (r.local.length <= core_->max_inline) wr.send_flags |= IBV_SEND_INLINE;
    } else {
      ++sge_next;
    }
    if (r.signaled) wr.send_flags |= IBV_SEND_SIGNALED;
    if (r.solicited) {
      if (r.opcode == WorkOpcode::kRdmaWrite) {
        return InvalidArgumentError(
            "PostSend: the solicited-event bit applies to SEND and RDMA_WRITE_WITH_IMM only");
      }
      wr.send_flags |= IBV_SEND_SOLICITED;
    }
    wr.next = i + 1 < requests.size() ? &wrs[i + 1] : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  int rc = ibv_post_send(core_->qp.get(), wrs.data(), &bad);
  size_t posted = rc == 0 ? requests.size() : static_cast<size_t>(bad - wrs.data());
  for (size_t i = 0; i < posted; ++i) {
    if (requests[i].opcode == WorkOpcode::kBindWindow) {
      // The consumer's key for this bind (ibv_inc_rkey): what the peer
      // writes with, and where the next bind's key starts.
      static_cast<VerbsMemoryWindow*>(requests[i].window)->mw()->rkey = wrs[i].bind_mw.rkey;
    }
    work_.sends.push_back({seq + i, requests[i].wr_id, requests[i].opcode, requests[i].signaled});
    if (requests[i].signaled) ++work_.signaled_pending;
  }
  work_.next_send_seq += posted;
  hybrid_.posted_since_sleep = true;
  if (rc != 0) {
    std::string msg = ErrnoText("ibv_post_send", rc) + " (posted " +
                      std::to_string(posted) + " of " +
                      std::to_string(requests.size()) + ")";
    if (rc == ENOMEM) return ResourceExhaustedError(msg + ": send queue full");
    return InvalidArgumentError(msg);
  }
  return Status::Ok();
}

Status VerbsConnection::PostRecv(uint64_t wr_id, const LocalBuffer& buffer) {
  if (IsDown()) return DisconnectedError("PostRecv: " + DownReason());
  ibv_sge sge{buffer.addr, buffer.length, buffer.lkey};
  ibv_recv_wr wr{};
  wr.wr_id = kRecvBit | work_.next_recv_seq;
  if (buffer.length > 0) {
    wr.sg_list = &sge;
    wr.num_sge = 1;
  }
  ibv_recv_wr* bad = nullptr;
  int rc = ibv_post_recv(core_->qp.get(), &wr, &bad);
  if (rc != 0) {
    std::string msg = ErrnoText("ibv_post_recv", rc);
    if (rc == ENOMEM) return ResourceExhaustedError(msg + ": receive queue full");
    return InvalidArgumentError(msg);
  }
  work_.recvs.push_back({work_.next_recv_seq++, wr_id});
  return Status::Ok();
}

// Polls the CQ once and converts up to out.size() completions (inline, only
// used here: inlined into the spin loop).
inline Result<size_t> VerbsConnection::DrainCq(std::span<Completion> out) {
  constexpr size_t kBatch = 16;
  ibv_wc wcs[kBatch];
  int want = static_cast<int>(std::min(out.size(), kBatch));
  int n = ibv_poll_cq(core_->cq.get(), want, wcs);
  if (n < 0) return InternalError("ibv_poll_cq failed");
  for (int i = 0; i < n; ++i) {
    out[i] = Convert(wcs[i]);
    // A flush means the QP broke: pick up the CM event that says why
    // (disconnect, device removal) so down_reason() can name it.
    if (wcs[i].status == IBV_WC_WR_FLUSH_ERR && !down_.is_down) HandleCmEvents();
  }
  return static_cast<size_t>(n);
}

inline Completion VerbsConnection::Convert(const ibv_wc& wc) {
  Completion c;
  c.status = MapWcStatus(wc.status);
  c.vendor_err = wc.vendor_err;
  if (wc.wr_id & kRecvBit) {
    uint64_t seq = wc.wr_id & ~kRecvBit;
    // Receives complete in posting order.
    while (!work_.recvs.empty() && work_.recvs.front().seq < seq) work_.recvs.pop_front();
    if (!work_.recvs.empty() && work_.recvs.front().seq == seq) {
      c.wr_id = work_.recvs.front().user_wr_id;
      work_.recvs.pop_front();
    }
    c.opcode = WorkOpcode::kRecv;
    // Our receive WQEs are well-formed (one SGE), so a local QP operation
    // error on one means the message did not fit: rxe reports overlong
    // SENDs that way where HCAs report LOC_LEN_ERR.
    if (wc.status == IBV_WC_LOC_QP_OP_ERR) c.status = CompletionStatus::kLocalLengthError;
    if (wc.status == IBV_WC_SUCCESS) {
      c.byte_len = wc.byte_len;
      if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) c.opcode = WorkOpcode::kRecvRdmaWithImm;
      if (wc.wc_flags & IBV_WC_WITH_IMM) {
        c.has_imm = true;
        c.imm_data = ntohl(wc.imm_data);
      }
    }
    return c;
  }
  // Sends complete in order: earlier unsignaled ones finished silently.
  uint64_t seq = wc.wr_id;
  while (!work_.sends.empty() && work_.sends.front().seq < seq) work_.sends.pop_front();
  if (!work_.sends.empty() && work_.sends.front().seq == seq) {
    const PostedWork::SendEntry& e = work_.sends.front();
    c.wr_id = e.user_wr_id;
    c.opcode = e.opcode;
    if (e.signaled && work_.signaled_pending > 0) --work_.signaled_pending;
    work_.sends.pop_front();
  }
  return c;
}

// The spin loop is the hottest code of a 64 B call. Aligned (2 KiB, the
// function is smaller; the slow path is out of line) so that it never
// straddles a 4 KiB page: an emulated CPU chains translated code only
// within a page (bench/guest/README.md); hardware is indifferent.
Result<size_t> VerbsConnection::PollCompletions(std::span<Completion> out,
                                                Deadline deadline) {
  if (out.empty()) return InvalidArgumentError("PollCompletions: empty output span");
  // Bounded spin, only while work is outstanding.
  if (opt_.poll_spin.count() > 0 && Outstanding()) {
    SpinBudget spin(opt_.poll_spin, deadline, /*yield_cpu=*/true);
    do {
      NAARPC_ASSIGN_OR_RETURN(size_t n, DrainCq(out));
      if (n > 0) return n;
    } while (spin.Continue());
  }
  return WaitForCompletions(out, deadline);
}

Status VerbsConnection::RequestNotify(NotifyMode mode) {
  const int solicited_only = mode == NotifyMode::kSolicitedOnly ? 1 : 0;
  if (int rc = ibv_req_notify_cq(core_->cq.get(), solicited_only); rc != 0) {
    return InternalError(ErrnoText("ibv_req_notify_cq", rc));
  }
  // The HCA keeps the wider arming; PollCompletions re-arms for every
  // completion unless this one already does.
  armed_ = armed_ || mode == NotifyMode::kNextCompletion;
  return Status::Ok();
}

bool VerbsConnection::TakeCqEvent() {
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  if (ibv_get_cq_event(core_->comp_channel.get(), &ev_cq, &ev_ctx) != 0) return false;
  ibv_ack_cq_events(ev_cq, 1);
  armed_ = false;  // an event disarms the CQ
  return true;
}

Result<bool> VerbsConnection::WaitNotify(Deadline deadline) {
  for (;;) {
    NoteLocalDisconnect();
    // CM events are read when the ppoll below finds the CM channel
    // readable: its fd stays readable while an event is queued.
    if (down_.is_down && notify_.flush_timer.get() >= 0) {
      uint64_t expirations;
      ssize_t n = read(notify_.flush_timer.get(), &expirations, sizeof(expirations));
      (void)n;
    }
    pollfd fds[3] = {{core_->comp_channel->fd, POLLIN, 0},
                     {core_->channel->fd, POLLIN, 0},
                     {wake_.fd(), POLLIN, 0}};
    // Non-blocking first: an event already raised is taken at once.
    int rc = ppoll(fds, 3, &kZeroTimeout, nullptr);
    if (rc == 0) {
      if (DownAndSettled()) return DisconnectedError(DownReason());
      if (deadline.expired()) return false;
      Deadline wait = down_.is_down ? Deadline::Earlier(deadline, down_.flush_deadline) : deadline;
      const timespec timeout = TimeLeft(wait);
      rc = ppoll(fds, 3, wait.infinite() ? nullptr : &timeout, nullptr);
    }
    if (rc < 0 && errno != EINTR) return InternalError(ErrnoText("ppoll", errno));
    if (fds[2].revents & POLLIN) wake_.Drain();
    if (fds[1].revents & POLLIN) HandleCmEvents();
    if ((fds[0].revents & POLLIN) && TakeCqEvent()) return true;
  }
}

Result<size_t> VerbsConnection::TryPollCompletions(std::span<Completion> out) {
  if (out.empty()) return InvalidArgumentError("TryPollCompletions: empty output span");
  NAARPC_ASSIGN_OR_RETURN(size_t n, DrainCq(out));
  if (n > 0) return n;
  NoteLocalDisconnect();
  return NoCompletionWithoutSleep();
}

Result<size_t> VerbsConnection::NoCompletionWithoutSleep() {
  HandleCmEvents();
  if (DownAndSettled()) return DisconnectedError(DownReason());
  return size_t{0};
}

// An epoll set (made on first use) of what WaitNotify waits on: the
// completion channel, the CM event channel, wake_ (Disconnect), and a
// timer for the end of the flush grace, so that a broken connection whose
// flushes do not come still reports kDisconnected. WaitNotify(now) clears
// them all (the timer once it expired).
int VerbsConnection::notify_fd() {
  if (notify_.ep.get() >= 0) return notify_.ep.get();
  UniqueFd ep(epoll_create1(EPOLL_CLOEXEC));
  UniqueFd timer(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  if (ep.get() < 0 || timer.get() < 0) return -1;
  for (int fd : {core_->comp_channel->fd, core_->channel->fd, wake_.fd(), timer.get()}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    if (epoll_ctl(ep.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return -1;
  }
  notify_.ep = std::move(ep);
  notify_.flush_timer = std::move(timer);
  if (down_.is_down) ArmFlushTimer();
  return notify_.ep.get();
}

// Also safe from another thread: wakes a blocked PollCompletions.
Status VerbsConnection::Disconnect() {
  if (!disconnect_requested_.exchange(true)) {
    // Moves the QP to ERR (flushing outstanding work) and sends DREQ.
    if (!disconnect_sent_.exchange(true)) rdma_disconnect(core_->id.get());
    wake_.Signal();
  }
  return Status::Ok();
}

// PollCompletions after the spin found nothing: sleeps on the completion
// channel (and CM events, and Disconnect), with the predictive wake.
// Out of line, so the spin loop above stays small (DrainCq inlined).
Result<size_t> VerbsConnection::WaitForCompletions(std::span<Completion> out,
                                                   Deadline deadline) {
  // The first sleep after a post is the one whose length repeats from call
  // to call; it is measured and, once learnt, planned (WakePredictor).
  const bool measured = hybrid_.posted_since_sleep && opt_.predictive_wake;
  hybrid_.posted_since_sleep = false;
  std::optional<Deadline::Clock::time_point> slept_at;
  std::optional<WakePredictor::Plan> plan;
  for (;;) {
    NAARPC_ASSIGN_OR_RETURN(size_t n, DrainCq(out));
    if (n > 0) {
      if (plan) ++hybrid_.stats.planned_early;
      if (measured && slept_at) hybrid_.predictor.OnCompleted(Deadline::Clock::now() - *slept_at);
      return n;
    }
    NoteLocalDisconnect();
    Deadline wait = deadline;
    if (down_.is_down) {
      if (DownAndSettled()) return DisconnectedError(DownReason());
      wait = Deadline::Earlier(deadline, down_.flush_deadline);
    }
    if (!armed_) {
      // Arm, then poll again before sleeping (no lost wake-up).
      if (int rc = ibv_req_notify_cq(core_->cq.get(), 0); rc != 0) {
        return InternalError(ErrnoText("ibv_req_notify_cq", rc));
      }
      armed_ = true;
      continue;
    }
    // A past deadline: no sleep, so a caller polling with one still sees
    // a disconnect.
    if (deadline.expired()) return NoCompletionWithoutSleep();
    if (!slept_at) {
      slept_at = Deadline::Clock::now();
      ++hybrid_.stats.sleeps;
      if (measured && !down_.is_down && (plan = hybrid_.predictor.PlanWait())) ++hybrid_.stats.planned;
    }
    const bool planned_wake_pending = plan.has_value();
    if (planned_wake_pending) wait = Deadline::Earlier(wait, Deadline::At(*slept_at + plan->wake_after));
    pollfd fds[3] = {{core_->comp_channel->fd, POLLIN, 0},
                     {core_->channel->fd, POLLIN, 0},
                     {wake_.fd(), POLLIN, 0}};
    const timespec timeout = TimeLeft(wait);
    int rc = ppoll(fds, 3, wait.infinite() ? nullptr : &timeout, nullptr);
    if (fds[2].revents & POLLIN) wake_.Drain();
    if (rc < 0 && errno != EINTR) return InternalError(ErrnoText("ppoll", errno));
    // CM events (a disconnect) only when the channel says so: a read per
    // sleep would be a system call on every call that sleeps.
    if (fds[1].revents & POLLIN) HandleCmEvents();
    if (fds[0].revents & POLLIN) TakeCqEvent();
    if (rc == 0 && planned_wake_pending && !deadline.expired() &&
        Deadline::Clock::now() >= *slept_at + plan->wake_after) {
      // Woken by the plan, before the completion: spin through it.
      SpinBudget spin(plan->spin_until - plan->wake_after, deadline, /*yield_cpu=*/true);
      plan.reset();
      do {
        NAARPC_ASSIGN_OR_RETURN(size_t got, DrainCq(out));
        if (got > 0) {
          ++hybrid_.stats.planned_hits;
          hybrid_.predictor.OnCompleted(Deadline::Clock::now() - *slept_at);
          return got;
        }
      } while (spin.Continue());
      ++hybrid_.stats.planned_misses;
      continue;  // the completion, when it comes, is the wait's sample
    }
    if (rc == 0 && deadline.expired()) {
      NAARPC_ASSIGN_OR_RETURN(size_t last, DrainCq(out));
      return last;
    }
  }
}

std::string VerbsConnection::DownReason() const {
  return "connection to " + peer_ + " is down: " +
         (down_.is_down ? down_.reason : std::string("connection closed locally"));
}

void VerbsConnection::MarkDown(std::string reason) {
  if (down_.is_down) return;
  down_.is_down = true;
  down_.reason = std::move(reason);
  down_.flush_deadline = Deadline::After(kFlushGrace);
  if (notify_.flush_timer.get() >= 0) ArmFlushTimer();
}

// Drains pending CM events without blocking.
void VerbsConnection::HandleCmEvents() {
  for (;;) {
    rdma_cm_event* raw = nullptr;
    if (rdma_get_cm_event(core_->channel.get(), &raw) != 0) return;
    CmEventPtr ev(raw);
    switch (ev->event) {
      case RDMA_CM_EVENT_DISCONNECTED:
      case RDMA_CM_EVENT_TIMEWAIT_EXIT:
      case RDMA_CM_EVENT_DEVICE_REMOVAL:
        if (!disconnect_sent_.exchange(true)) {
          // Completes the DREQ/DREP exchange and moves the QP to ERR so
          // outstanding work is flushed.
          rdma_disconnect(core_->id.get());
        }
        MarkDown(ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL
                     ? "RDMA device removed"
                     : "peer disconnected (" + CmEventText(ev.get()) + ")");
        break;
      default:
        break;
    }
  }
}

}  // namespace verbs
}  // namespace naarpc
