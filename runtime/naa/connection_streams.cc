#include "runtime/naa/connection_server.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace naarpc::internal {

namespace {

// A streaming kernel's waits for the host wake this often to notice
// Shutdown() and a kernel timeout; no busy polling.
constexpr auto kStopCheckInterval = std::chrono::milliseconds(200);

}  // namespace

void ConnectionServer::StreamImpl::Reset() {
  inbound_.Reset();
  outbound_.Reset();
  end_read_ = ended_ = holding_ = slot_open_ = false;
  stop_ = false;
  fill_ = 0;
}

Result<std::span<const std::byte>> ConnectionServer::StreamImpl::Next() {
  std::unique_lock<std::mutex> lock(cs_.streams_.pump_mu);
  NAARPC_RETURN_IF_ERROR(Usable(/*want_input=*/true, "Next()"));
  if (holding_) NAARPC_RETURN_IF_ERROR(Release(lock));
  if (end_read_) {
    ended_ = true;
    return std::span<const std::byte>();
  }
  NAARPC_RETURN_IF_ERROR(
      cs_.PumpUntil(lock, [this] { return inbound_.received() > inbound_.credited(); },
                    "the host's next chunk"));
  const uint64_t k = inbound_.credited();  // the next chunk to consume
  const uint32_t len = lengths_[k % window_];
  holding_ = true;
  if (inbound_.ended() && k + 1 == inbound_.received()) end_read_ = true;
  if (end_read_ && len == 0) return ReleaseTheEnd(lock);
  return std::span<const std::byte>(ring_ + inbound_.SlotOffset(k), len);
}

Result<std::span<std::byte>> ConnectionServer::StreamImpl::NextSlot() {
  std::unique_lock<std::mutex> lock(cs_.streams_.pump_mu);
  return NextSlotLocked(lock);
}

Status ConnectionServer::StreamImpl::Commit(size_t bytes) {
  std::unique_lock<std::mutex> lock(cs_.streams_.pump_mu);
  return CommitLocked(lock, bytes);
}

Status ConnectionServer::StreamImpl::Write(std::span<const std::byte> data) {
  std::unique_lock<std::mutex> lock(cs_.streams_.pump_mu);
  while (!data.empty()) {
    NAARPC_ASSIGN_OR_RETURN(std::span<std::byte> slot, NextSlotLocked(lock));
    const size_t n = std::min(data.size(), chunk_ - fill_);
    std::memcpy(slot.data() + fill_, data.data(), n);
    fill_ += n;
    data = data.subspan(n);
    if (fill_ == chunk_) NAARPC_RETURN_IF_ERROR(CommitLocked(lock, chunk_));
  }
  return Status::Ok();
}

Status ConnectionServer::StreamImpl::Close() {
  std::unique_lock<std::mutex> lock(cs_.streams_.pump_mu);
  return CloseLocked(lock);
}

Status ConnectionServer::StreamImpl::Usable(bool want_input, const char* op) const {
  if (cs_.streams_.abandoned) {
    return DeadlineExceededError("the call was abandoned (kernel timeout)");
  }
  NAARPC_RETURN_IF_ERROR(cs_.streams_.error);
  if (input_ != want_input) {
    return FailedPreconditionError(std::string(op) + " on an " +
                                   (input_ ? "input" : "output") + " stream");
  }
  return Status::Ok();
}

Result<std::span<const std::byte>> ConnectionServer::StreamImpl::ReleaseTheEnd(
    std::unique_lock<std::mutex>& lock) {
  NAARPC_RETURN_IF_ERROR(Release(lock));
  ended_ = true;
  return std::span<const std::byte>();
}

Status ConnectionServer::StreamImpl::Release(std::unique_lock<std::mutex>& lock) {
  holding_ = false;
  return cs_.PostStreamFrame(lock, {local_addr_, 0, lkey_}, host_.addr, host_.rkey,
                             inbound_.TakeCredit(index_, stop_));
}

Result<std::span<std::byte>> ConnectionServer::StreamImpl::NextSlotLocked(
    std::unique_lock<std::mutex>& lock) {
  NAARPC_RETURN_IF_ERROR(Usable(/*want_input=*/false, "NextSlot()"));
  if (ended_) return FailedPreconditionError("the output stream has ended");
  if (!slot_open_) {
    NAARPC_RETURN_IF_ERROR(cs_.PumpUntil(
        lock, [this] { return outbound_.CanSend(); }, "a credit from the host"));
    slot_open_ = true;
    fill_ = 0;
  }
  return std::span<std::byte>(ring_ + outbound_.NextSlotOffset(), chunk_);
}

Status ConnectionServer::StreamImpl::CommitLocked(std::unique_lock<std::mutex>& lock,
                                                  size_t bytes) {
  NAARPC_RETURN_IF_ERROR(Usable(/*want_input=*/false, "Commit()"));
  if (!slot_open_) return FailedPreconditionError("Commit() without NextSlot()");
  if (bytes > chunk_) {
    return InvalidArgumentError("Commit(" + std::to_string(bytes) + ") beyond the chunk size " +
                                std::to_string(chunk_));
  }
  const uint64_t slot = outbound_.NextSlotOffset();
  // The receive for this chunk's credit goes up before the chunk.
  NAARPC_RETURN_IF_ERROR(cs_.PostDataRecv());
  // Counted as sent before it is posted: PostStreamFrame may pump, and a
  // credit for it cannot come earlier than its post anyway.
  const uint32_t imm = outbound_.TakeChunk(index_, static_cast<uint32_t>(bytes));
  slot_open_ = false;
  fill_ = 0;
  if (outbound_.ended()) ended_ = true;
  return cs_.PostStreamFrame(lock, {local_addr_ + slot, static_cast<uint32_t>(bytes), lkey_},
                             host_.addr + slot, host_.rkey, imm);
}

Status ConnectionServer::StreamImpl::CloseLocked(std::unique_lock<std::mutex>& lock) {
  NAARPC_RETURN_IF_ERROR(Usable(/*want_input=*/false, "Close()"));
  if (ended_) return Status::Ok();
  const size_t rest = fill_;
  NAARPC_RETURN_IF_ERROR(NextSlotLocked(lock).status());
  return CommitLocked(lock, rest);  // < chunk: ends the stream
}

Status ConnectionServer::StreamImpl::OnFrame(const StreamFrame& f, uint32_t byte_len) {
  const std::string which = "stream " + std::to_string(index_);
  if (f.credit) {
    if (input_) return ProtocolError("the host credited input " + which);
    return outbound_.OnCredit(f, byte_len);
  }
  if (!input_) return ProtocolError("the host wrote a chunk into output " + which);
  const uint64_t sequence = inbound_.received();
  NAARPC_ASSIGN_OR_RETURN(const uint32_t length, inbound_.OnChunk(f, byte_len));
  lengths_[sequence % window_] = length;
  return Status::Ok();
}

Status ConnectionServer::PumpStreams(Deadline deadline) {
  std::array<Completion, 8> batch;
  Result<size_t> n = conn_->PollCompletions(batch, deadline);
  if (!n.ok()) return streams_.error = n.status().WithContext("streaming");
  for (size_t i = 0; i < *n; ++i) {
    const Completion& c = batch[i];
    if (c.status != CompletionStatus::kSuccess) {
      return streams_.error = CompletionFailure(
                 c, WrIdKind(c.wr_id) == WrKind::kDataRecv ? "stream receive" : "stream write",
                 *conn_);
    }
    if (WrIdKind(c.wr_id) != WrKind::kDataRecv) {
      ep_.OnSendCompleted(c.wr_id);
      continue;
    }
    ep_.DataRecvConsumed();
    if (c.opcode != WorkOpcode::kRecvRdmaWithImm || !c.has_imm) {
      return streams_.error = ProtocolError("expected a stream frame, got a SEND");
    }
    if (Status s = ApplyFrame(c.imm_data, c.byte_len); !s.ok()) return streams_.error = s;
  }
  return Status::Ok();
}

Status ConnectionServer::ApplyFrame(uint32_t imm, uint32_t byte_len) {
  const std::optional<StreamFrame> f = DecodeStreamFrame(imm);
  if (!f || f->stream >= streams_.list.size()) {
    return ProtocolError("during a streaming call, immediate " + std::to_string(imm) +
                         " is not a frame of one of its " + std::to_string(streams_.list.size()) +
                         " streams");
  }
  NAARPC_RETURN_IF_ERROR(streams_.list[f->stream]->OnFrame(*f, byte_len));
  // A chunk consumed a receive posted for chunks: replace it (a credit's
  // receive was posted for it alone, before its chunk).
  return f->credit ? Status::Ok() : PostDataRecv();
}

template <typename Ready>
Status ConnectionServer::PumpUntil(std::unique_lock<std::mutex>& lock, Ready&& ready,
                                   const char* waiting_for) {
  const auto zero = std::chrono::milliseconds::zero();
  const Deadline idle = options().idle_timeout > zero ? Deadline::After(options().idle_timeout)
                                                      : Deadline::Infinite();
  while (!ready()) {
    if (streams_.abandoned) return DeadlineExceededError("the call was abandoned (kernel timeout)");
    NAARPC_RETURN_IF_ERROR(streams_.error);
    if (server_.stopping.load(std::memory_order_relaxed)) {
      return streams_.error = UnavailableError("the NAA is shutting down");
    }
    if (idle.expired()) {
      return streams_.error = DeadlineExceededError(
                 std::string("waiting for ") + waiting_for + ": nothing from the host for " +
                 std::to_string(options().idle_timeout.count()) +
                 " ms (ServerOptions::idle_timeout)");
    }
    // Bounded waits: Shutdown and a kernel timeout get their turn.
    NAARPC_RETURN_IF_ERROR(
        PumpStreams(Deadline::Earlier(idle, Deadline::After(kStopCheckInterval))));
    lock.unlock();
    lock.lock();
  }
  return Status::Ok();
}

Status ConnectionServer::PostStreamFrame(std::unique_lock<std::mutex>& lock, LocalBuffer local,
                                         uint64_t remote_addr, uint32_t rkey, uint32_t imm) {
  NAARPC_RETURN_IF_ERROR(streams_.error);
  NAARPC_RETURN_IF_ERROR(PumpUntil(
      lock, [this] { return !ep_.send_budget().NeedsReclaim(1); }, "a send-queue slot"));
  const WriteSlice slice{local, remote_addr, rkey};
  if (auto posted = ep_.PostWrites(std::span<const WriteSlice>(&slice, 1), imm); !posted.ok()) {
    return streams_.error = posted.status();
  }
  return Status::Ok();
}

std::string ConnectionServer::StreamTotalsLocked() const {
  std::string totals;
  for (const auto& st : streams_.list) {
    totals += "; " + st->inbound_.name() + ": " +
              (st->input_ ? st->inbound_.Totals() : st->outbound_.Totals());
  }
  return totals;
}

Status ConnectionServer::FinishStreams() {
  std::unique_lock<std::mutex> lock(streams_.pump_mu);
  Status s = FinishStreamsLocked(lock);
  // Other errors end the connection and are logged by Finish; a disconnect
  // is not, but one in the middle of a stream is worth a line.
  if (s.code() == StatusCode::kDisconnected) {
    Log("the connection ended mid-stream: " + s.message() + StreamTotalsLocked());
  }
  return s;
}

Status ConnectionServer::FinishStreamsLocked(std::unique_lock<std::mutex>& lock) {
  for (auto& st : streams_.list) {
    if (st->input_) {
      // Unread input: from now on every credit says stop, and what still
      // comes is credited unread (docs/protocol.md 15.4).
      st->stop_ = !st->inbound_.ended();
      for (;;) {
        if (st->holding_) {
          NAARPC_RETURN_IF_ERROR(st->Release(lock));
          continue;
        }
        if (st->inbound_.credited() < st->inbound_.received()) {
          st->holding_ = true;
          continue;
        }
        if (st->inbound_.ended()) break;
        NAARPC_RETURN_IF_ERROR(PumpUntil(
            lock, [&] { return st->inbound_.received() > st->inbound_.credited(); },
            "the rest of an input stream"));
      }
    } else {
      if (!st->ended_) NAARPC_RETURN_IF_ERROR(st->CloseLocked(lock));
      NAARPC_RETURN_IF_ERROR(PumpUntil(
          lock, [&] { return st->outbound_.all_consumed(); }, "the host's last credits"));
    }
  }
  return streams_.error;
}

}  // namespace naarpc::internal
