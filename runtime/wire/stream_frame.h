// Stream frames on the wire (naarpc extension, docs/protocol.md 15): the
// immediates of chunks and credits, and the check of a stream's MRSP entry.
// Internal to the runtime; the stream constants users see are in
// naarpc/protocol.h.
#ifndef NAARPC_RUNTIME_WIRE_STREAM_FRAME_H_
#define NAARPC_RUNTIME_WIRE_STREAM_FRAME_H_

#include <cstdint>
#include <optional>
#include <string>

#include "naarpc/protocol.h"

namespace naarpc {

// Why a stream entry of an Advertisement+Request is invalid (flags, chunk
// size in the requested-address field, size = window * chunk), or empty.
std::string CheckStreamEntry(uint8_t flags, uint64_t chunk_size, uint32_t size);

// A stream frame's immediate: bit 31 set, bit 30 credit (else chunk), bit 29
// end (chunks: the stream's last chunk) or stop (credits: the reader wants no
// more data), bits 24..28 the stream, bits 0..23 the value, modulo 2^24
// (chunk: its sequence number within the call, from 0; credit: chunks
// consumed so far). A chunk's length is the byte count of its write.
inline constexpr uint32_t kStreamFrameBit = 0x80000000u;
inline constexpr uint32_t kStreamCreditBit = 0x40000000u;
inline constexpr uint32_t kStreamEndOrStopBit = 0x20000000u;
inline constexpr uint32_t kStreamValueMask = 0x00ffffffu;

struct StreamFrame {
  bool credit = false;  // else a chunk
  bool end = false;     // chunk: the last one of the stream
  bool stop = false;    // credit: the reader wants no more data
  uint8_t stream = 0;   // 0..31
  uint32_t value = 0;   // chunk: sequence number; credit: chunks consumed (mod 2^24)
};

inline bool IsStreamFrame(uint32_t imm) { return (imm & kStreamFrameBit) != 0; }
// Chunk `sequence` (counted from 0 within the call) of `stream`.
// REQUIRES: stream < kMaxStreams.
inline uint32_t EncodeStreamChunk(uint8_t stream, uint64_t sequence, bool end) {
  return kStreamFrameBit | (end ? kStreamEndOrStopBit : 0) | uint32_t{stream} << 24 |
         static_cast<uint32_t>(sequence & kStreamValueMask);
}
// REQUIRES: stream < kMaxStreams.
inline uint32_t EncodeStreamCredit(uint8_t stream, uint64_t consumed, bool stop) {
  return kStreamFrameBit | kStreamCreditBit | (stop ? kStreamEndOrStopBit : 0) |
         uint32_t{stream} << 24 | static_cast<uint32_t>(consumed & kStreamValueMask);
}
// nullopt if bit 31 is clear.
inline std::optional<StreamFrame> DecodeStreamFrame(uint32_t imm) {
  if (!IsStreamFrame(imm)) return std::nullopt;
  StreamFrame f;
  f.credit = (imm & kStreamCreditBit) != 0;
  const bool bit29 = (imm & kStreamEndOrStopBit) != 0;
  (f.credit ? f.stop : f.end) = bit29;
  f.stream = static_cast<uint8_t>((imm >> 24) & 0x1f);
  f.value = imm & kStreamValueMask;
  return f;
}

}  // namespace naarpc

#endif  // NAARPC_RUNTIME_WIRE_STREAM_FRAME_H_
