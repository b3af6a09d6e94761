// Pieces of the data path shared by the host (ClientSession) and the NAA
// (NaaServer): posting a write sequence, waiting for completions, buffers.
// Internal to the runtime.
#ifndef NAARPC_RUNTIME_ENGINE_WIRE_OPS_H_
#define NAARPC_RUNTIME_ENGINE_WIRE_OPS_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "naarpc/deadline.h"
#include "naarpc/status.h"
#include "naarpc/transport.h"

namespace naarpc::internal {

// wr_id = kind << 56 | sequence: completions are matched by wr_id.
enum class WrKind : uint8_t {
  kMrspSend = 1,
  kMrspRecv = 2,
  kDataWrite = 3,  // final write (WRITE_WITH_IMM) of a call / reply
  kDataRecv = 4,   // receive consumed by the peer's WRITE_WITH_IMM
  kWindow = 5,     // the last LOCAL_INV closing a call's memory windows
  kChain = 6,      // the last RDMA WRITE of a batch of a long write sequence
};
inline uint64_t MakeWrId(WrKind kind, uint64_t seq) {
  return uint64_t(kind) << 56 | (seq & ((uint64_t{1} << 56) - 1));
}
inline WrKind WrIdKind(uint64_t wr_id) { return WrKind(wr_id >> 56); }
inline uint64_t WrIdSeq(uint64_t wr_id) { return wr_id & ((uint64_t{1} << 56) - 1); }

// Receives each side keeps posted for the peer's WRITE_WITH_IMM once MRSP is
// done: one for the message in flight plus a spare, so the receive a message
// consumed is replaced after the side's own write is posted (off the latency
// path) and the peer's next message still always finds one (no RNR).
inline constexpr int kDataRecvDepth = 2;

// One RDMA write of a local slice to a remote slice.
struct WriteSlice {
  WriteSlice() = default;
  WriteSlice(LocalBuffer local, uint64_t remote_addr, uint32_t rkey)
      : local(local), remote_addr(remote_addr), rkey(rkey) {}
  LocalBuffer local;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  // If not empty, the payload instead of `local` (SendRequest::sg_list).
  std::span<const LocalBuffer> sg_list;
};

// A write sequence: n-1 unsignaled RDMA WRITEs and one WRITE_WITH_IMM (the
// last slice) carrying the immediate and the solicited-event bit, posted in
// one PostSend (Endpoint::PostWrites). BuildWriteSequence fills `out` with
// its requests; SetSequenceEnd gives the WRITE_WITH_IMM what changes per
// post (wr_id, immediate, signaled: send_queue_budget.h decides), so a side
// posting the same slices call after call builds them once.
// REQUIRES: !slices.empty(); for SetSequenceEnd, `requests` built so.
void BuildWriteSequence(std::span<const WriteSlice> slices, std::vector<SendRequest>& out);
inline void SetSequenceEnd(std::span<SendRequest> requests, uint32_t imm, uint64_t final_wr_id,
                           bool signaled) {
  SendRequest& last = requests.back();
  last.wr_id = final_wr_id;
  last.imm_data = imm;
  last.signaled = signaled;
}

// Posts one signaled, solicited SEND of `message` (an MRSP message).
Status PostMessage(Connection& conn, uint64_t wr_id, const LocalBuffer& message);

// A failed completion as a Status naming what failed.
Status CompletionFailure(const Completion& c, std::string_view what, const Connection& conn);

// Whether `c` is a completion flushed because the connection went down after
// the NAA's status arrived (`answered`): it does not change the call's
// outcome. An NAA closes the connection right after a kernel-timeout status
// (docs/protocol.md 7.4), and the flushes of receives posted for later
// frames may come in the same batch as the status.
inline bool FlushedAfterAnswer(const Completion& c, bool answered) {
  return answered && c.status == CompletionStatus::kFlushed;
}

// Polls `conn` until `on_completion` returns done or an error, or the
// deadline passes (kDeadlineExceeded with `what`). Every completion polled
// is handed to `on_completion`, including those after the one that was done.
template <typename OnCompletion>
Status PollUntil(Connection& conn, Deadline deadline, std::string_view what,
                 OnCompletion&& on_completion) {
  std::array<Completion, 4> batch;
  for (;;) {
    Result<size_t> n = conn.PollCompletions(batch, deadline);
    if (!n.ok()) return n.status().WithContext(what);
    // The whole batch is handled even once done: no completion is dropped.
    bool finished = false;
    for (size_t i = 0; i < *n; ++i) {
      bool done = false;
      Status s = on_completion(batch[i], done);
      if (!s.ok()) return s;
      finished |= done;
    }
    if (finished) return Status::Ok();
    if (*n == 0 && deadline.expired()) {
      return DeadlineExceededError(std::string(what) + ": deadline exceeded");
    }
  }
}

// Zero-initialised heap memory, page-aligned (large allocations are lazily
// zeroed by the kernel).
class Buffer {
 public:
  Buffer() = default;
  static Result<Buffer> Allocate(size_t size);
  std::byte* data() const { return data_.get(); }
  size_t size() const { return size_; }
  std::span<std::byte> span() const { return {data_.get(), size_}; }

 private:
  struct Free { void operator()(std::byte* p) const { std::free(p); } };
  std::unique_ptr<std::byte, Free> data_;
  size_t size_ = 0;
};

}  // namespace naarpc::internal

#endif  // NAARPC_RUNTIME_ENGINE_WIRE_OPS_H_
