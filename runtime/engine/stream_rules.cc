#include "runtime/engine/stream_rules.h"
#include "runtime/wire/stream_frame.h"

#include <string>

namespace naarpc::internal {
namespace {

// `received` compared with `expected`, both modulo 2^24: how the peer's
// count went wrong.
std::string Mismatch(const char* what, uint32_t received, uint64_t expected) {
  const uint32_t want = static_cast<uint32_t>(expected & kStreamValueMask);
  const uint32_t ahead = (received - want) & kStreamValueMask;
  const char* why =
      ahead < (kStreamValueMask >> 1) ? "lost or reordered" : "duplicated or reordered";
  return std::string(what) + " " + std::to_string(received) + " arrived where " +
         std::to_string(want) + " was expected (" + what + "s " + why + ")";
}

}  // namespace

Result<uint32_t> StreamInbound::OnChunk(const StreamFrame& f, uint32_t byte_len) {
  if (ended_) {
    return ProtocolError(shape_.name + ": chunk " + std::to_string(f.value) +
                         " after the end of the stream (" + Totals() + ")");
  }
  if (f.value != (received_ & kStreamValueMask)) {
    return ProtocolError(shape_.name + ": " + Mismatch("chunk", f.value, received_) + "; " +
                         Totals());
  }
  if (byte_len > shape_.chunk_size) {
    return ProtocolError(shape_.name + ": chunk " + std::to_string(received_) + " of " +
                         std::to_string(byte_len) + " bytes, larger than the chunk size " +
                         std::to_string(shape_.chunk_size));
  }
  if (!f.end && byte_len != shape_.chunk_size) {
    return ProtocolError(shape_.name + ": chunk " + std::to_string(received_) + " of " +
                         std::to_string(byte_len) + " bytes without the end bit (every chunk "
                         "but the last carries the chunk size " +
                         std::to_string(shape_.chunk_size) + ")");
  }
  if (received_ - credited_ >= shape_.window) {
    return ProtocolError(shape_.name + ": chunk " + std::to_string(received_) +
                         " overwrote an unconsumed slot (window " + std::to_string(shape_.window) +
                         ", " + std::to_string(credited_) + " credited)");
  }
  ++received_;
  bytes_ += byte_len;
  ended_ = f.end;
  return byte_len;
}

std::string StreamInbound::Totals() const {
  return std::to_string(received_) + " chunk(s), " + std::to_string(bytes_) + " bytes received" +
         (ended_ ? ", ended" : "");
}

uint32_t StreamOutbound::TakeChunk(uint8_t stream, uint32_t length) {
  const bool end = length < shape_.chunk_size;
  const uint32_t imm = EncodeStreamChunk(stream, sent_, end);
  ++sent_;
  bytes_ += length;
  ended_ = end;
  return imm;
}

Status StreamOutbound::OnCredit(const StreamFrame& f, uint32_t byte_len) {
  if (byte_len != 0) {
    return ProtocolError(shape_.name + ": a credit carrying " + std::to_string(byte_len) +
                         " bytes (credits are zero-length writes)");
  }
  const uint64_t next = consumed_ + 1;
  if (f.value != (next & kStreamValueMask)) {
    return ProtocolError(shape_.name + ": " + Mismatch("credit", f.value, next) + "; " + Totals());
  }
  if (next > sent_) {
    return ProtocolError(shape_.name + ": credit for " + std::to_string(next) + " chunk(s), only " +
                         std::to_string(sent_) + " were written");
  }
  consumed_ = next;
  stop_ = stop_ || f.stop;
  return Status::Ok();
}

std::string StreamOutbound::Totals() const {
  return std::to_string(sent_) + " chunk(s) written, " + std::to_string(consumed_) + " credited" +
         (ended_ ? ", ended" : "");
}

}  // namespace naarpc::internal
