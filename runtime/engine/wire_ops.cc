#include "runtime/engine/wire_ops.h"

#include <cstring>

namespace naarpc::internal {

void BuildWriteSequence(std::span<const WriteSlice> slices, std::vector<SendRequest>& out) {
  out.resize(slices.size());
  for (size_t i = 0; i < slices.size(); ++i) {
    const bool last = i + 1 == slices.size();
    SendRequest& wr = out[i];
    wr = SendRequest();
    wr.opcode = last ? WorkOpcode::kRdmaWriteWithImm : WorkOpcode::kRdmaWrite;
    wr.local = slices[i].local;
    wr.sg_list = slices[i].sg_list;
    wr.remote_addr = slices[i].remote_addr;
    wr.rkey = slices[i].rkey;
    wr.signaled = false;  // the final one: SetSequenceEnd
    // NAAICE peers arm their CQ solicited-only: without the bit the final
    // write of a call or reply wakes nobody (docs/protocol.md 7.3).
    wr.solicited = last;
  }
}

Status PostMessage(Connection& conn, uint64_t wr_id, const LocalBuffer& message) {
  SendRequest send;
  send.wr_id = wr_id;
  send.opcode = WorkOpcode::kSend;
  send.local = message;
  send.solicited = true;  // every MRSP SEND (docs/protocol.md 7.3)
  return conn.PostSend(std::span<const SendRequest>(&send, 1));
}

Status CompletionFailure(const Completion& c, std::string_view what, const Connection& conn) {
  std::string msg(what);
  msg += ": work completion failed: ";
  msg += CompletionStatusName(c.status);
  if (c.status == CompletionStatus::kFlushed) {
    std::string reason = conn.down_reason();
    return DisconnectedError(msg + " (" + (reason.empty() ? "peer disconnected" : reason) + ")");
  }
  return TransportError(std::move(msg));
}

Result<Buffer> Buffer::Allocate(size_t size) {
  Buffer b;
  if (size == 0) return b;
  void* p = std::calloc(1, size);
  if (p == nullptr) {
    return ResourceExhaustedError("cannot allocate " + std::to_string(size) + " bytes");
  }
  b.data_.reset(static_cast<std::byte*>(p));
  b.size_ = size;
  return b;
}

}  // namespace naarpc::internal
