// The rules of a stream's frames that both roles apply (docs/protocol.md 15):
// the reader checks every chunk (sequence number, length, end, window), the
// writer every credit (one per chunk, in order, never beyond what it wrote).
// The host (ClientSession) and the NAA (NaaServer) each keep one of these per
// stream and direction; a broken rule is a ProtocolError naming the stream,
// the expected and the received frame, and the totals so far. Internal to
// the runtime.
#ifndef NAARPC_RUNTIME_ENGINE_STREAM_RULES_H_
#define NAARPC_RUNTIME_ENGINE_STREAM_RULES_H_

#include <cstdint>
#include <string>
#include <utility>

#include "naarpc/protocol.h"
#include "naarpc/status.h"
#include "runtime/wire/stream_frame.h"

namespace naarpc::internal {

// What both directions know of a stream: its name in errors ("stream
// 'data'" on the host, "stream 1" on the NAA), chunk size and window.
struct StreamShape {
  std::string name;
  uint32_t chunk_size = 0;
  uint32_t window = 0;
  // Offset of chunk `k`'s slot in the reader's ring (15.2).
  uint64_t SlotOffset(uint64_t k) const { return (k % window) * chunk_size; }
};

// The reading side of one stream during a call: chunks arrive, are consumed
// in order and credited one by one (a chunk is consumed when it is credited).
class StreamInbound {
 public:
  explicit StreamInbound(StreamShape shape) : shape_(std::move(shape)) {}

  void Reset() { received_ = bytes_ = credited_ = 0, ended_ = false; }

  // A chunk frame of this stream arrived; `byte_len` is its write's byte
  // count (the receive completion's). Returns the chunk's length. Errors: a chunk after the
  // end, a sequence number other than the next (a chunk lost, duplicated or
  // reordered), a chunk other than the last that is not full, a chunk larger
  // than the chunk size, a chunk beyond the window.
  Result<uint32_t> OnChunk(const StreamFrame& f, uint32_t byte_len);
  // The immediate of the credit for the next chunk (`stop`: no more data
  // wanted), and counts it. REQUIRES: credited() < received().
  uint32_t TakeCredit(uint8_t stream, bool stop) {
    return EncodeStreamCredit(stream, ++credited_, stop);
  }

  const std::string& name() const { return shape_.name; }
  uint64_t SlotOffset(uint64_t k) const { return shape_.SlotOffset(k); }
  uint64_t received() const { return received_; }  // chunks, the end included
  uint64_t credited() const { return credited_; }   // = consumed
  uint64_t bytes() const { return bytes_; }
  bool ended() const { return ended_; }
  // "stream 'x': 3 chunk(s), 196608 bytes received[, ended]".
  std::string Totals() const;

 private:
  const StreamShape shape_;
  uint64_t received_ = 0;
  uint64_t credited_ = 0;
  uint64_t bytes_ = 0;
  bool ended_ = false;
};

// The writing side of one stream during a call: chunks leave with their
// sequence numbers, credits come back one per chunk.
class StreamOutbound {
 public:
  explicit StreamOutbound(StreamShape shape) : shape_(std::move(shape)) {}

  void Reset() { sent_ = consumed_ = bytes_ = 0, ended_ = stop_ = false; }

  // The window has room for the next chunk (15.3).
  bool CanSend() const { return !ended_ && sent_ - consumed_ < shape_.window; }
  // Offset of the next chunk's slot in the reader's ring.
  uint64_t NextSlotOffset() const { return shape_.SlotOffset(sent_); }
  // The immediate of the next chunk (`length` bytes; the stream ends with
  // it if it is shorter than the chunk size) and counts it as sent.
  // REQUIRES: CanSend(), length <= chunk size.
  uint32_t TakeChunk(uint8_t stream, uint32_t length);

  // A credit frame of this stream arrived (`byte_len`: its write's length).
  // Errors: data in a credit, a count other than one more than the last (a
  // credit lost, duplicated or reordered), a count beyond the chunks sent.
  Status OnCredit(const StreamFrame& f, uint32_t byte_len);

  const std::string& name() const { return shape_.name; }
  uint64_t sent() const { return sent_; }  // chunks, the end included
  uint64_t consumed() const { return consumed_; }
  uint64_t bytes() const { return bytes_; }  // in the chunks sent
  bool ended() const { return ended_; }
  bool stop() const { return stop_; }  // the reader asked for no more data
  bool all_consumed() const { return consumed_ == sent_; }
  std::string Totals() const;

 private:
  const StreamShape shape_;
  uint64_t sent_ = 0;
  uint64_t consumed_ = 0;
  uint64_t bytes_ = 0;
  bool ended_ = false;
  bool stop_ = false;
};

}  // namespace naarpc::internal

#endif  // NAARPC_RUNTIME_ENGINE_STREAM_RULES_H_
