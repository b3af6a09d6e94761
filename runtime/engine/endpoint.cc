#include "runtime/engine/endpoint.h"

#include <algorithm>

namespace naarpc::internal {

Status Endpoint::SetUp(Connection& conn) {
  conn_ = &conn;
  // One buffer and one registration for both messages: a registration is a
  // system call (and a pinning) per side and session, and an MR a NIC
  // resource counted per device (ibv_device_attr::max_mr).
  NAARPC_ASSIGN_OR_RETURN(mrsp_buf_, Buffer::Allocate(2 * kMrspHalf));
  NAARPC_ASSIGN_OR_RETURN(mrsp_mr_, conn.RegisterMemory(mrsp_buf_.data(), mrsp_buf_.size(),
                                                        kAccessLocalWrite));
  data_recv_buffer_ = RecvHalf();
  return Status::Ok();
}

Status Endpoint::PostMrspReceive() {
  return conn_->PostRecv(MrspRecvId(), RecvHalf());
}

Status Endpoint::SendMrsp(const MrspMessage& msg, uint64_t n) {
  auto encoded = EncodeMrsp(msg, Half(kSendHalfOffset));
  if (!encoded.ok()) return encoded.status().WithContext("encoding an MRSP message");
  return PostMessage(*conn_, MrspSendId(n), SendHalf(*encoded));
}

Result<MrspMessage> Endpoint::ReceivedMrsp(uint32_t byte_len) const {
  return DecodeMrsp(Half(kRecvHalfOffset).first(std::min<size_t>(byte_len, kMaxMrspMessageSize)));
}

Status Endpoint::PostDataRecv() {
  NAARPC_RETURN_IF_ERROR(
      conn_->PostRecv(MakeWrId(WrKind::kDataRecv, ++recv_seq_), data_recv_buffer_));
  ++posted_data_recvs_;
  return Status::Ok();
}

void Endpoint::StartSendBudget(uint32_t max_sequence) {
  send_budget_ = SendQueueBudget(conn_->send_queue_depth(), std::max<uint32_t>(max_sequence, 1));
}

Result<Endpoint::Posted> Endpoint::PostWrites(std::span<const WriteSlice> slices, uint32_t imm,
                                              bool signal) {
  BuildWriteSequence(slices, scratch_);
  return PostSequence(scratch_, imm, signal);
}

Result<Endpoint::Posted> Endpoint::PostSequence(std::span<SendRequest> requests, uint32_t imm,
                                                bool signal) {
  const uint32_t n = static_cast<uint32_t>(requests.size());
  Posted posted{MakeWrId(WrKind::kDataWrite, ++write_seq_),
                signal || send_budget_.ShouldSignal(n)};
  SetSequenceEnd(requests, imm, posted.wr_id, posted.signaled);
  NAARPC_RETURN_IF_ERROR(conn_->PostSend(requests));
  send_budget_.OnPosted(n, posted.signaled, posted.wr_id);
  return posted;
}

std::span<uint8_t> Endpoint::Half(size_t offset) const {
  return {reinterpret_cast<uint8_t*>(mrsp_mr_->addr()) + offset, kMaxMrspMessageSize};
}

LocalBuffer Endpoint::SendHalf(size_t length) const {
  return {mrsp_mr_->remote_addr() + kSendHalfOffset, static_cast<uint32_t>(length),
          mrsp_mr_->lkey()};
}

LocalBuffer Endpoint::RecvHalf() const {
  return {mrsp_mr_->remote_addr() + kRecvHalfOffset, static_cast<uint32_t>(kMaxMrspMessageSize),
          mrsp_mr_->lkey()};
}

void Endpoint::ReleaseRegistrations() { mrsp_mr_.reset(); }

}  // namespace naarpc::internal
