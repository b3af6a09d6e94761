#include "runtime/host/client_session_impl.h"

namespace naarpc {

using internal::WrIdKind;
using internal::WrKind;
using internal::WriteSlice;

Result<bool> ClientSession::Impl::PostFrame(LocalBuffer local, uint64_t remote_addr,
                                            uint32_t rkey, uint32_t imm) {
  if (ep.send_budget().NeedsReclaim(1)) return false;
  const WriteSlice slice{local, remote_addr, rkey};
  NAARPC_RETURN_IF_ERROR(ep.PostWrites(std::span<const WriteSlice>(&slice, 1), imm).status());
  return true;
}

// docs/protocol.md 15: writes input chunks as the windows allow, takes output
// chunks and credits them, until the NAA's status (which comes only once every
// stream has ended) and our last signaled write are in.
Status ClientSession::Impl::RunStreams(StreamHandler& handler, uint64_t write_id,
                                       Deadline deadline, uint32_t& status_imm) {
  for (Stream& st : streams) {
    st.outbound.Reset();
    st.inbound.Reset();
  }
  bool answered = false;
  std::array<Completion, 8> batch;
  auto next_check = Deadline::CoarseNow() + kStreamCheckInterval;
  for (;;) {
    // Send what the windows and the send queue allow: owed credits first.
    for (size_t i = 0; i < streams.size(); ++i) {
      Stream& st = streams[i];
      const Param& p = regions.params[st.param];
      if (!st.input) {
        // One credit per chunk (the NAA posted a receive for each).
        while (st.inbound.credited() < st.inbound.received()) {
          if (ep.send_budget().NeedsReclaim(1)) break;
          NAARPC_ASSIGN_OR_RETURN(
              bool posted,
              PostFrame({p.mr->remote_addr(), 0, p.mr->lkey()}, st.wire->peer_addr,
                        st.wire->peer_rkey, st.inbound.TakeCredit(uint8_t(i), false)));
          if (!posted) return InternalError("send queue full after the budget allowed a credit");
        }
        continue;
      }
      while (st.outbound.CanSend()) {
        if (ep.send_budget().NeedsReclaim(1)) break;
        const uint64_t slot = st.outbound.NextSlotOffset();
        size_t len = 0;
        if (!st.outbound.stop()) {
          Result<size_t> n = handler.Produce(i, std::span<std::byte>(p.data + slot, st.chunk));
          if (!n.ok()) {
            return n.status().WithContext(st.name() + ": producing chunk " +
                                          std::to_string(st.outbound.sent()));
          }
          if (*n > st.chunk) {
            return InvalidArgumentError(st.name() + ": Produce returned " + std::to_string(*n) +
                                        " bytes for a chunk of " + std::to_string(st.chunk));
          }
          len = *n;
        }
        // The receive for the credit this chunk earns goes up first.
        NAARPC_RETURN_IF_ERROR(PostDataRecv());
        const uint64_t sequence = st.outbound.sent();
        const uint32_t imm = st.outbound.TakeChunk(uint8_t(i), static_cast<uint32_t>(len));
        NAARPC_ASSIGN_OR_RETURN(
            bool posted,
            PostFrame({p.mr->remote_addr() + slot, static_cast<uint32_t>(len), p.mr->lkey()},
                      st.wire->peer_addr + slot, st.wire->peer_rkey, imm));
        if (!posted) {
          return InternalError("send queue full after the budget allowed chunk " +
                               std::to_string(sequence));
        }
      }
    }
    if (answered && !ep.send_budget().signal_pending()) return Status::Ok();

    // Waits in slices, and the handler may end the call between them (Check).
    Result<size_t> n = conn->PollCompletions(
        batch, Deadline::Earlier(deadline, Deadline::At(next_check)));
    if (!n.ok()) return n.status().WithContext("streaming");
    if (const auto now = Deadline::CoarseNow(); now >= next_check) {
      next_check = now + kStreamCheckInterval;
      NAARPC_RETURN_IF_ERROR(handler.Check());
    }
    if (*n == 0 && deadline.expired()) {
      return DeadlineExceededError(
          std::string(answered ? "the NAA answered, but our last write was not acknowledged"
                               : "no status from the NAA") +
          " before the deadline, mid-stream" + StreamTotals());
    }
    bool down_after_answer = false;
    for (size_t k = 0; k < *n; ++k) {
      const Completion& c = batch[k];
      if (internal::FlushedAfterAnswer(c, answered)) {
        down_after_answer = true;  // the answer stands; nothing more will complete
        continue;
      }
      if (c.status != CompletionStatus::kSuccess) {
        return internal::CompletionFailure(
            c, WrIdKind(c.wr_id) == WrKind::kDataRecv ? "stream receive" : "stream write", *conn);
      }
      if (WrIdKind(c.wr_id) == WrKind::kDataWrite) {
        ep.OnSendCompleted(c.wr_id);
        if (c.wr_id == write_id && sm.state() == CommState::kDataSending) {
          NAARPC_RETURN_IF_ERROR(sm.Transition(CommState::kDataReceiving));
        }
        continue;
      }
      if (WrIdKind(c.wr_id) != WrKind::kDataRecv) {
        return ProtocolError("unexpected completion wr_id " + std::to_string(c.wr_id));
      }
      ep.DataRecvConsumed();
      if (c.opcode != WorkOpcode::kRecvRdmaWithImm || !c.has_imm) {
        return ProtocolError("expected the NAA's WRITE_WITH_IMM, got a SEND");
      }
      if (answered) return ProtocolError("the NAA wrote again after its status");
      if (!IsStreamFrame(c.imm_data)) {
        // The status: every stream must have ended and every input chunk
        // been credited (docs/protocol.md 15.4), unless the kernel overran
        // its time limit (the NAA then closes the connection at once, 7.4).
        const bool timeout = DecodeStatusImmediate(c.imm_data) == kNaaStatusKernelTimeout;
        for (const Stream& st : streams) {
          if (!timeout && (!st.ended() || (st.input && !st.outbound.all_consumed()))) {
            return ProtocolError("the NAA sent its status before " + st.name() + " ended (" +
                                 st.Totals() + ")");
          }
        }
        answered = true;
        status_imm = c.imm_data;
        continue;
      }
      const std::optional<StreamFrame> f = DecodeStreamFrame(c.imm_data);
      if (!f || f->stream >= streams.size()) {
        char imm[16];
        std::snprintf(imm, sizeof imm, "0x%08x", c.imm_data);
        return ProtocolError(std::string("stream frame ") + imm + " is not valid for the " +
                             std::to_string(streams.size()) + " stream(s) of this routine");
      }
      Stream& st = streams[f->stream];
      if (f->credit) {
        if (!st.input) return ProtocolError("the NAA credited output " + st.name());
        NAARPC_RETURN_IF_ERROR(st.outbound.OnCredit(*f, c.byte_len));
        continue;
      }
      if (st.input) return ProtocolError("the NAA wrote a chunk into input " + st.name());
      const uint64_t sequence = st.inbound.received();
      NAARPC_ASSIGN_OR_RETURN(const uint32_t length, st.inbound.OnChunk(*f, c.byte_len));
      const std::byte* chunk = regions.params[st.param].data + st.inbound.SlotOffset(sequence);
      if (Status s = handler.Consume(f->stream, std::span<const std::byte>(chunk, length), f->end);
          !s.ok()) {
        return s.WithContext(st.name() + ": consuming chunk " + std::to_string(sequence));
      }
      // The receive the chunk consumed is replaced for the next one.
      NAARPC_RETURN_IF_ERROR(PostDataRecv());
    }
    if (down_after_answer) return Status::Ok();
  }
}

}  // namespace naarpc
