#include "runtime/engine/endpoint.h"

#include <algorithm>

namespace naarpc::internal {

Status Endpoint::SetUp(Connection& conn) {
  conn_ = &conn;
  NAARPC_ASSIGN_OR_RETURN(send_buf_, Buffer::Allocate(kMaxMrspMessageSize));
  NAARPC_ASSIGN_OR_RETURN(recv_buf_, Buffer::Allocate(kMaxMrspMessageSize));
  NAARPC_ASSIGN_OR_RETURN(send_mr_, conn.RegisterMemory(send_buf_.data(), send_buf_.size(), 0));
  NAARPC_ASSIGN_OR_RETURN(recv_mr_, conn.RegisterMemory(recv_buf_.data(), recv_buf_.size(),
                                                        kAccessLocalWrite));
  data_recv_buffer_ = WholeRegion(*recv_mr_);
  return Status::Ok();
}

Status Endpoint::PostMrspReceive() { return PostReceive(*conn_, MrspRecvId(), *recv_mr_); }

Status Endpoint::SendMrsp(const MrspMessage& msg, uint64_t n) {
  auto encoded = EncodeMrsp(
      msg, std::span<uint8_t>(reinterpret_cast<uint8_t*>(send_buf_.data()), send_buf_.size()));
  if (!encoded.ok()) return encoded.status().WithContext("encoding an MRSP message");
  return PostMessage(*conn_, MrspSendId(n), *send_mr_, *encoded);
}

Result<MrspMessage> Endpoint::ReceivedMrsp(uint32_t byte_len) const {
  const size_t len = std::min<size_t>(byte_len, recv_buf_.size());
  return DecodeMrsp(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(recv_buf_.data()), len));
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

void Endpoint::ReleaseRegistrations() {
  send_mr_.reset();
  recv_mr_.reset();
}

}  // namespace naarpc::internal
