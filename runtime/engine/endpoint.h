// Endpoint: what host and NAA do alike on a connection (docs/protocol.md 6,
// 7): the MRSP message buffer and both halves of the exchange (post the
// receive for the peer's message, send ours, decode what came), the
// receives kept up for the peer's WRITE_WITH_IMM (results, calls, stream
// frames), and the send-queue budget of write sequences. ClientSession
// (the host role) and the NAA's connection server (the NAA role) each own
// one and add only their role's logic on top, so a rule both sides apply is
// written once. Not thread-safe (one thread drives a connection). Internal
// to the runtime.
#ifndef NAARPC_RUNTIME_ENGINE_ENDPOINT_H_
#define NAARPC_RUNTIME_ENGINE_ENDPOINT_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "naarpc/status.h"
#include "naarpc/transport.h"
#include "runtime/wire/mrsp.h"
#include "runtime/engine/send_queue_budget.h"
#include "runtime/engine/wire_ops.h"

namespace naarpc::internal {

class Endpoint {
 public:
  // wr_ids of the MRSP messages (one each way; an error answer is the
  // NAA's second send).
  static uint64_t MrspRecvId() { return MakeWrId(WrKind::kMrspRecv, 0); }
  static uint64_t MrspSendId(uint64_t n = 0) { return MakeWrId(WrKind::kMrspSend, n); }

  // REQUIRES: `conn` outlives every later call but the destructor and
  // ReleaseRegistrations().
  Status SetUp(Connection& conn);

  // Posts the receive for the peer's MRSP message (before ours is sent, or
  // before the peer may send: no RNR).
  Status PostMrspReceive();
  // Encodes `msg` into the send buffer and posts it (signaled, solicited:
  // docs/protocol.md 7.3) as wr_id MrspSendId(n).
  Status SendMrsp(const MrspMessage& msg, uint64_t n = 0);
  // The peer's MRSP message, `byte_len` bytes long (its receive completion).
  Result<MrspMessage> ReceivedMrsp(uint32_t byte_len) const;

  // Receives for the peer's WRITE_WITH_IMM; they share the MRSP receive
  // half (a WRITE_WITH_IMM delivers only its immediate into a receive).
  Status PostDataRecv();
  // One such receive was consumed (its completion was polled).
  void DataRecvConsumed() { --posted_data_recvs_; }
  int posted_data_recvs() const { return posted_data_recvs_; }

  // The send queue, from the end of the MRSP: `max_sequence` is the most
  // requests one write sequence posts.
  void StartSendBudget(uint32_t max_sequence);
  SendQueueBudget& send_budget() { return send_budget_; }
  // Posts n-1 RDMA WRITEs and one WRITE_WITH_IMM (BuildWriteSequence) with a
  // fresh wr_id; signaled when the budget asks for it or `signal` is set.
  // REQUIRES: !slices.empty(); !send_budget().NeedsReclaim(slices.size()).
  struct Posted {
    uint64_t wr_id = 0;
    bool signaled = false;
  };
  Result<Posted> PostWrites(std::span<const WriteSlice> slices, uint32_t imm, bool signal = false);
  // The same for requests BuildWriteSequence built, so a side that posts
  // the same slices call after call builds them once: sets the final
  // request's wr_id, immediate and signaled flag, and posts them.
  // REQUIRES: as PostWrites, with `requests` for slices.
  Result<Posted> PostSequence(std::span<SendRequest> requests, uint32_t imm, bool signal = false);
  // A successful completion of one of our own sends.
  void OnSendCompleted(uint64_t wr_id) { send_budget_.OnSendCompleted(wr_id); }

  // Ends the peer's access to the MRSP buffer (a failed connection).
  void ReleaseRegistrations();

 private:
  // The MRSP buffer: our message in the first half, the peer's in the
  // second (its own cache lines), one registration for both.
  static constexpr size_t kMrspHalf = (kMaxMrspMessageSize + 63) / 64 * 64;
  static constexpr size_t kSendHalfOffset = 0;
  static constexpr size_t kRecvHalfOffset = kMrspHalf;
  // A half's bytes (kMaxMrspMessageSize of them) and, below, the same half
  // as a buffer to post: both from the registration, one offset each.
  std::span<uint8_t> Half(size_t offset) const;
  LocalBuffer SendHalf(size_t length) const;
  LocalBuffer RecvHalf() const;

  Connection* conn_ = nullptr;
  Buffer mrsp_buf_;
  std::unique_ptr<MemoryRegion> mrsp_mr_;
  LocalBuffer data_recv_buffer_;
  uint64_t recv_seq_ = 0;
  int posted_data_recvs_ = 0;
  uint64_t write_seq_ = 0;
  SendQueueBudget send_budget_;
  std::vector<SendRequest> scratch_;
};

}  // namespace naarpc::internal

#endif  // NAARPC_RUNTIME_ENGINE_ENDPOINT_H_
