// The queue pair of an emulated connection (connection.h): the send
// queue in order (acks, NAKs, RNR go-back-N, local BIND_MW / LOCAL_INV),
// the responder (receives, key checks, completions) and the error state.
#include "runtime/transport_impl/emulated/connection.h"

#include <sys/socket.h>

#include <algorithm>
#include <utility>

namespace naarpc {
namespace emulated {

void EmuConnection::Break(std::string reason, bool fault) {
  if (broken_) return;
  broken_ = true;
  broken_on_fault_ = fault;
  broken_reason_ = std::move(reason);
  // Outstanding send-queue work flushed in posting order.
  size_t li = 0;
  for (const SendWr& w : sq_.wrs) {
    for (; li < sq_.local.size() && sq_.local[li].post_index < w.post_index; ++li) {
      Complete(sq_.local[li].wr_id, sq_.local[li].opcode, CompletionStatus::kFlushed, 0, 0,
               sq_.local[li].post_index);
    }
    CompleteSend(w, CompletionStatus::kFlushed, 0);
    gathers_.Release(w.msg.gather);
  }
  for (; li < sq_.local.size(); ++li) {
    Complete(sq_.local[li].wr_id, sq_.local[li].opcode, CompletionStatus::kFlushed, 0, 0,
             sq_.local[li].post_index);
  }
  sq_.local.clear();
  sq_.wrs.clear();
  in_.window_index = 0;
  sq_.held_for_swap.reset();
  for (const RecvWr& r : rq_) Complete(r.wr_id, WorkOpcode::kRecv, CompletionStatus::kFlushed, 0, 0, 0);
  rq_.clear();
  out_.frames.clear();
  out_.lead_ctrl = false;
  in_.payload_pending = false;
  in_.dest = nullptr;
  ::shutdown(fd_.get(), SHUT_RDWR);
}

// A request from the peer failed here: NAK it and enter the error state.
void EmuConnection::ResponderFail(uint64_t seq, CompletionStatus st, uint32_t vendor,
                                  std::string reason) {
  // The NAK can only go out at a frame boundary; if we are in the middle of
  // a frame the peer just sees the disconnect.
  if (out_.frames.empty() || out_.frames.front().sent == 0) {
    out_.frames.clear();
    out_.lead_ctrl = false;
    OutFrame f;
    Header h;
    h.type = kFrameNak;
    h.seq = seq;
    h.key = static_cast<uint32_t>(st);
    h.imm = vendor;
    EncodeHeader(h, f.hdr.bytes);
    out_.frames.push_back(std::move(f));
    Push();
  }
  Break(std::move(reason));
}

// Moves eligible WRs into the output queue, in order, and retires a head WR
// that failed locally.
void EmuConnection::PumpQueued() {
  if (broken_) return;
  std::optional<Clock::time_point> now;
  auto Now = [&] {
    if (!now) now = Clock::now();
    return *now;
  };
  if (sq_.rnr_pause_until) {
    if (sq_.next_tx_seq < sq_.next_seq && Now() < *sq_.rnr_pause_until) return;
    sq_.rnr_pause_until.reset();
  }
  while (sq_.next_tx_seq < sq_.next_seq) {
    if (!RunLocal(sq_.next_tx_seq)) break;
    SendWr& w = sq_.At(sq_.next_tx_seq);
    if (w.fail != CompletionStatus::kSuccess || w.held) break;
    if (w.msg.delayed) {
      if (Now() < w.msg.not_before) break;
      w.msg.delayed = false;
    }
    EnqueueFrame(w);
    ++sq_.next_tx_seq;
  }
  RunLocal(sq_.next_tx_seq);
  RetireLocal();
  if (broken_) return;
  // A failed WR is reported once everything before it has completed.
  if (!sq_.wrs.empty() && sq_.wrs.front().seq == sq_.next_tx_seq &&
      (sq_.local.empty() || sq_.local.front().after_seq >= sq_.next_tx_seq) &&
      sq_.wrs.front().fail != CompletionStatus::kSuccess) {
    SendWr w = sq_.wrs.front();
    sq_.wrs.pop_front();
    gathers_.Release(w.msg.gather);
    ++sq_.next_tx_seq;
    CompleteSend(w, w.fail, w.vendor_err);
    Break(std::string(CompletionStatusName(w.fail)) + " on wr_id " + std::to_string(w.wr_id));
  }
}

std::optional<Clock::time_point> EmuConnection::NextTimerQueued() const {
  if (broken_) return std::nullopt;
  std::optional<Clock::time_point> send;
  if (sq_.next_tx_seq < sq_.next_seq) {
    const SendWr& w = sq_.wrs[sq_.next_tx_seq - sq_.wrs.front().seq];
    if (sq_.rnr_pause_until) {
      send = sq_.rnr_pause_until;
    } else if (w.fail == CompletionStatus::kSuccess && !w.held && w.msg.delayed) {
      send = w.msg.not_before;
    }
  }
  if (!stall_.deadline) return send;
  return send ? std::min(*send, *stall_.deadline) : stall_.deadline;
}

void EmuConnection::WatchStallPending(bool looked) {
  // Staged bytes without a payload pending: a header read in part
  // (ParseBuffered leaves less than kHdrSize).
  const bool header = !in_.payload_pending && in_.wpos > in_.rpos;
  if (broken_ || opts_.stall_timeout.count() <= 0 || (!in_.payload_pending && !header)) {
    stall_.deadline.reset();
    return;
  }
  const uint64_t seq = header ? 0 : in_.hdr.seq;  // request frames start at 1
  const uint32_t done = header ? static_cast<uint32_t>(in_.wpos - in_.rpos) : in_.done;
  const Clock::time_point now = Clock::now();
  if (!stall_.deadline || seq != stall_.seq || done != stall_.done) {
    stall_.deadline = now + opts_.stall_timeout;
    stall_.seq = seq;
    stall_.done = done;
    return;
  }
  if (!looked || now < *stall_.deadline) return;
  const std::string what =
      header ? "a frame header: " + std::to_string(done) + " of its " + std::to_string(kHdrSize)
             : "a message: " + std::to_string(done) + " of its " + std::to_string(in_.hdr.length);
  Break("the peer stopped sending in the middle of " + what + " bytes, nothing more for " +
        std::to_string(opts_.stall_timeout.count()) + " ms (EmulatedOptions::stall_timeout)");
}


// The region a payload lands in is still registered (it may be
// deregistered between two calls while a large write is arriving).
bool EmuConnection::InDestValid() {
  if (in_.window_index != 0 &&
      !mrs_->WindowOpen(in_.window_index, static_cast<uint8_t>(in_.hdr.key & 0xff))) {
    // Only a deallocated window (or its region) closes under a landing
    // write: an invalidate waits for it (RunLocal).
    ResponderFail(in_.hdr.seq, CompletionStatus::kRemoteAccessError, kEmuErrWindowInvalid,
                  "memory window deallocated while data arrived through it");
    return false;
  }
  if (in_.mr_index == 0 || mrs_->Exists(in_.mr_index, &mr_cache_)) return true;
  ResponderFail(in_.hdr.seq,
                in_.hdr.type == kFrameSend ? CompletionStatus::kRemoteInvalidRequest
                                           : CompletionStatus::kRemoteAccessError,
                kEmuErrRegionGone, "target region deregistered while data arrived");
  return false;
}


void EmuConnection::ProcessRequest(const Header& h) {
  in_.hdr = h;
  in_.done = 0;
  in_.dest = nullptr;
  in_.mr_index = 0;
  in_.window_index = 0;
  const bool retransmitted = in_.rnr && h.seq == in_.expected_seq;
  if (in_.rnr && h.seq > in_.expected_seq) {  // sent before our RNR NAK: drop
    in_.payload_pending = h.length > 0;
    return;
  }
  if (h.seq != in_.expected_seq) {
    Break("protocol error: request sequence " + std::to_string(h.seq) + ", expected " +
          std::to_string(in_.expected_seq));
    return;
  }
  if (retransmitted) in_.rnr = false;
  if ((h.type == kFrameSend || h.type == kFrameWriteImm) && rq_.empty()) {
    // RNR: NAK it, drop its payload and everything after it until resent.
    OutFrame f;
    Header nak;
    nak.type = kFrameRnrNak;
    nak.seq = h.seq;
    EncodeHeader(nak, f.hdr.bytes);
    QueueUrgent(std::move(f));
    in_.rnr = true;
    in_.payload_pending = h.length > 0;
    return;
  }
  ++in_.expected_seq;
  if (h.type == kFrameSend) {
    RecvWr& r = rq_.front();
    if (h.length > 0) {
      uint32_t err = r.error;
      if (err == kEmuErrNone && r.mr_index != 0 && !mrs_->Exists(r.mr_index, &mr_cache_)) {
        err = kEmuErrBadLkey;
      }
      if (err == kEmuErrNone && h.length > r.len) {
        Complete(r.wr_id, WorkOpcode::kRecv, CompletionStatus::kLocalLengthError, h.length,
                 kEmuErrRecvTooSmall, 0);
        rq_.pop_front();
        ResponderFail(h.seq, CompletionStatus::kRemoteInvalidRequest, kEmuErrRecvTooSmall,
                      "SEND of " + std::to_string(h.length) +
                          " bytes into a receive buffer of " + std::to_string(r.len));
        return;
      }
      if (err != kEmuErrNone) {
        Complete(r.wr_id, WorkOpcode::kRecv, CompletionStatus::kLocalProtectionError, 0, err, 0);
        rq_.pop_front();
        ResponderFail(h.seq, CompletionStatus::kRemoteInvalidRequest, kEmuErrRecvBufferInvalid,
                      "receive buffer with an invalid lkey or access");
        return;
      }
      in_.dest = r.addr;
      in_.mr_index = r.mr_index;
    }
  } else if (h.length > 0) {  // WRITE / WRITE_IMM
    uint32_t err = mrs_->Check(h.key, MrTable::kRkeyTag, h.addr, h.length, kAccessRemoteWrite,
                               &in_.mr_index, &in_.window_index, &mr_cache_);
    if (err != kEmuErrNone) {
      ResponderFail(h.seq, CompletionStatus::kRemoteAccessError, err,
                    "remote access error (rkey " + Hex(h.key) + ", addr " + Hex(h.addr) +
                        ", length " + std::to_string(h.length) + ")");
      return;
    }
    in_.dest = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(h.addr));
  }
  if (h.length == 0) {
    FinishRequest();
  } else {
    in_.payload_pending = true;
  }
}

void EmuConnection::FinishRequest() {
  in_.payload_pending = false;
  in_.dest = nullptr;
  in_.window_index = 0;
  if (in_.rnr || in_.hdr.type == 0) return;  // a dropped request
  if (in_.hdr.type != kFrameWrite) {
    RecvWr r = rq_.front();
    rq_.pop_front();
    Completion c;
    c.wr_id = r.wr_id;
    c.byte_len = in_.hdr.length;
    if (in_.hdr.type == kFrameSend) {
      c.opcode = WorkOpcode::kRecv;
    } else {
      c.opcode = WorkOpcode::kRecvRdmaWithImm;
      c.has_imm = true;
      c.imm_data = in_.hdr.imm;
    }
    cq_.Add(c, 0, (in_.hdr.flags & kFrameFlagSolicited) != 0);
  }
  out_.acked = in_.hdr.seq;
}

bool EmuConnection::RunLocalWrs(uint64_t before_seq) {
  for (LocalWr& l : sq_.local) {
    if (l.after_seq >= before_seq) return true;
    if (l.executed) {
      if (l.fail != CompletionStatus::kSuccess) return false;
      continue;
    }
    // Verbs ordering: an invalidate takes effect after a write landing
    // through the window has been placed whole (a write either lands
    // completely before the invalidate completes or fails completely).
    if (l.opcode == WorkOpcode::kLocalInvalidate && in_.payload_pending &&
        in_.window_index == l.window.window_index) {
      return false;
    }
    ExecuteLocal(l);
    if (l.fail != CompletionStatus::kSuccess) return false;
  }
  return true;
}

void EmuConnection::ExecuteLocal(LocalWr& l) {
  l.executed = true;
  std::string refused = l.opcode == WorkOpcode::kLocalInvalidate ? mrs_->Invalidate(l.window)
                                                                 : mrs_->Bind(l.window);
  if (refused.empty()) return;
  l.fail = CompletionStatus::kLocalProtectionError;
  l.vendor_err = kEmuErrWindowBind;
  l.fail_reason = std::move(refused);
}

void EmuConnection::RetireLocalWrs() {
  while (!broken_ && !sq_.local.empty()) {
    const LocalWr& l = sq_.local.front();
    if (!l.executed) return;
    if (!sq_.wrs.empty() && sq_.wrs.front().seq <= l.after_seq) return;  // an earlier frame is pending
    LocalWr done = std::move(sq_.local.front());
    sq_.local.pop_front();
    if (done.fail != CompletionStatus::kSuccess) {
      Complete(done.wr_id, done.opcode, done.fail, 0, done.vendor_err, done.post_index);
      Break(done.fail_reason + " (wr_id " + std::to_string(done.wr_id) + ")");
      return;
    }
    if (done.signaled) {
      Complete(done.wr_id, done.opcode, CompletionStatus::kSuccess, 0, 0, done.post_index);
    }
  }
}

void EmuConnection::HandleAck(uint64_t count) {
  if (count > out_.sent_seq) {
    Break("protocol error: ack for a request not sent");
    return;
  }
  while (!sq_.wrs.empty() && sq_.wrs.front().seq <= count) {
    RetireLocal();  // local WRs posted before this frame complete first
    if (broken_) return;
    const SendWr& w = sq_.wrs.front();
    if (w.signaled) CompleteSend(w, CompletionStatus::kSuccess, 0);
    gathers_.Release(w.msg.gather);
    sq_.wrs.pop_front();
  }
  RetireLocal();
}

void EmuConnection::HandleNak(const Header& h) {
  if (h.seq == 0 || h.seq >= sq_.next_tx_seq) {
    Break("protocol error: NAK for a request not sent");
    return;
  }
  HandleAck(h.seq - 1);  // everything before it succeeded
  if (broken_ || sq_.wrs.empty() || sq_.wrs.front().seq != h.seq) {
    Break("protocol error: unexpected NAK");
    return;
  }
  CompletionStatus st = h.key <= static_cast<uint32_t>(CompletionStatus::kGeneralError)
                            ? static_cast<CompletionStatus>(h.key)
                            : CompletionStatus::kGeneralError;
  SendWr w = sq_.wrs.front();
  sq_.wrs.pop_front();
  gathers_.Release(w.msg.gather);  // its frame goes with the connection (Break)
  CompleteSend(w, st, h.imm);
  Break("peer reported " + std::string(CompletionStatusName(st)) + " for " +
        (w.duplicate ? "a duplicate injected by fault injection of " : "") + "wr_id " +
        std::to_string(w.wr_id));
}

void EmuConnection::HandleRnrNak(const Header& h) {
  if (h.seq == 0 || h.seq >= sq_.next_tx_seq) {
    Break("protocol error: RNR NAK for a request not sent");
    return;
  }
  HandleAck(h.seq - 1);
  if (broken_ || sq_.wrs.empty() || sq_.wrs.front().seq != h.seq) {
    Break("protocol error: unexpected RNR NAK");
    return;
  }
  SendWr& w = sq_.wrs.front();
  if (opts_.rnr_retry_count >= 0 && w.rnr_retries >= opts_.rnr_retry_count) {
    SendWr failed = w;
    sq_.wrs.pop_front();
    gathers_.Release(failed.msg.gather);  // its frame goes with the connection (Break)
    CompleteSend(failed, CompletionStatus::kRnrRetryExceeded, kEmuErrNoReceive);
    Break(std::string("RNR retry exceeded on ") +
          (failed.duplicate ? "a duplicate injected by fault injection of " : "") + "wr_id " +
          std::to_string(failed.wr_id) + " (no receive posted at the peer)");
    return;
  }
  ++w.rnr_retries;
  // Go back: drop request frames not started yet, resend from h.seq later.
  for (size_t i = 0; i < out_.frames.size();) {
    if (out_.frames[i].seq != 0 && out_.frames[i].sent == 0) {
      out_.frames.erase(out_.frames.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  sq_.next_tx_seq = h.seq;
  out_.sent_seq = std::min(out_.sent_seq, h.seq - 1);
  sq_.rnr_pause_until = Clock::now() + opts_.rnr_delay;
}

}  // namespace emulated
}  // namespace naarpc
