// Wire constants of the NAAICE host–NAA protocol and the encoding of the
// 32-bit immediates. Layouts and every decision the spec leaves open are
// documented in docs/protocol.md; tests pin them byte for byte.
#ifndef NAARPC_PROTOCOL_H_
#define NAARPC_PROTOCOL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace naarpc {

// Two dialects of the same engine (docs/protocol.md, "Dialects").
enum class Dialect : uint8_t {
  // The NAAICE API document (spec 000): region 0 is the metadata region that
  // names the return region(s) by address; request immediate = fncode.
  kSpec = 0,
  // The current NAAICE reference library: regions flagged INPUT/OUTPUT, no
  // metadata region; request immediate = fncode | 0x80 | user bits << 8.
  kReference = 1,
};
std::string_view DialectName(Dialect d);

// MRSP message types.
enum class MrspType : uint8_t {
  kError = 0x00,
  kAdvertisementRequest = 0x01,
  kAdvertisement = 0x02,
};

// MRSP error codes (payload of an Error message).
enum class MrspErrorCode : uint8_t {
  kNotEnoughMemory = 0x01,
  kInvalidAddress = 0x02,
  kTooManyRegions = 0x03,
};
std::string_view MrspErrorName(uint8_t code);

// Region flags (first byte of an Advertisement+Request entry).
inline constexpr uint8_t kRegionFlagInternal = 0x01;
inline constexpr uint8_t kRegionFlagSingleSend = 0x02;
inline constexpr uint8_t kRegionFlagInput = 0x04;
inline constexpr uint8_t kRegionFlagOutput = 0x08;
// naarpc extension (docs/protocol.md 15): a stream's ring, and the version
// bit of its frames (chunks carry sequence numbers); only in the
// combinations kStreamFlagsIn / kStreamFlagsOut.
inline constexpr uint8_t kRegionFlagStream = 0x10;
inline constexpr uint8_t kRegionFlagStreamSequenced = 0x20;
inline constexpr uint8_t kRegionFlagsKnown = 0x3f;

// Wire sizes.
inline constexpr size_t kMrspHeaderSize = 4;
inline constexpr size_t kAdvertisementRequestEntrySize = 24;
inline constexpr size_t kAdvertisementEntrySize = 16;
inline constexpr size_t kErrorMessageSize = 4;
inline constexpr size_t kMaxRegionsPerMessage = 255;  // 8-bit count
inline constexpr size_t kMaxMrspMessageSize =
    kMrspHeaderSize + kMaxRegionsPerMessage * kAdvertisementRequestEntrySize;
// The spec caps one region (and one RDMA message) at 1 GiB.
inline constexpr uint64_t kMaxRegionSize = uint64_t{1} << 30;
// Requested NAA addresses are 7 bytes (56 bits).
inline constexpr uint64_t kMaxNaaAddress = (uint64_t{1} << 56) - 1;
// Default region limit of the NAA (the FPGA handles 32).
inline constexpr size_t kDefaultNaaMaxRegions = 32;
// Metadata region (spec dialect): one 8-byte big-endian return address per
// return region.
inline constexpr size_t kMetadataEntrySize = 8;
// MRSP capabilities (naarpc extension, docs/protocol.md 3.6): byte 2 of the
// header of an Advertisement+Request (what the host asks for) and of an
// Advertisement (what the NAA accepts; a subset of the request's). Peers
// that do not know them send 0 there and ignore the byte (it was padding).
// Bits not listed here are ignored on receipt and encoded as 0.
inline constexpr uint8_t kMrspCapMemoryWindows = 0x01;  // per-call windows (4.5)
inline constexpr uint8_t kMrspCapsKnown = 0x01;
// Metadata region with per-call memory windows: 16 bytes per return region,
// the host address (8, big-endian), the window's rkey for this call (4,
// big-endian), 4 reserved bytes sent as 0.
inline constexpr size_t kMetadataWindowEntrySize = 16;

// NAA status codes (immediate of the final write NAA -> host).
inline constexpr uint8_t kNaaStatusSuccess = 0x00;
inline constexpr uint8_t kNaaStatusSocketUnavailable = 0x01;
inline constexpr uint8_t kNaaStatusKernelTimeout = 0x02;
// naarpc's assignments inside the spec's reserved range 0x03..0x0f:
inline constexpr uint8_t kNaaStatusUnknownFunction = 0x03;
inline constexpr uint8_t kNaaStatusBadRegionLayout = 0x04;
inline constexpr uint8_t kNaaStatusKernelFailed = 0x05;
inline constexpr uint8_t kNaaStatusFirstApplication = 0x10;
inline constexpr uint8_t kNaaStatusLastApplication = 0x7f;
std::string_view NaaStatusName(uint8_t status);

// Function codes are 1..127; 0 is invalid.
inline constexpr uint8_t kMinFunctionCode = 1;
inline constexpr uint8_t kMaxFunctionCode = 127;
inline constexpr uint32_t kImmHostToNaaBit = 0x80;

// A decoded request immediate (host -> NAA).
struct RequestImmediate {
  uint8_t function_code = 0;
  bool host_to_naa_bit = false;  // set by the reference dialect
  uint32_t user_bits = 0;        // bits 8..31 (reference dialect), 24 bits
};

// The immediate value (host byte order; the transport puts it on the wire
// big-endian, as ibverbs' imm_data does) for a call in `dialect`.
// REQUIRES: 1 <= function_code <= 127, user_bits < 2^24 (reference only).
// (The immediate codecs are inline: each runs once per call on the latency
// path.)
inline uint32_t EncodeRequestImmediate(Dialect dialect, uint8_t function_code,
                                       uint32_t user_bits = 0) {
  const uint32_t code = function_code & 0x7fu;
  if (dialect == Dialect::kSpec) return code;
  return code | kImmHostToNaaBit | ((user_bits & 0xffffffu) << 8);
}
// Returns nullopt if the function code is 0 or bits are set that the
// dialect detected from bit 7 does not allow.
inline std::optional<RequestImmediate> DecodeRequestImmediate(uint32_t imm) {
  RequestImmediate r;
  r.function_code = static_cast<uint8_t>(imm & 0x7fu);
  r.host_to_naa_bit = (imm & kImmHostToNaaBit) != 0;
  r.user_bits = imm >> 8;
  if (r.function_code < kMinFunctionCode) return std::nullopt;
  // The spec dialect carries only the function code.
  if (!r.host_to_naa_bit && r.user_bits != 0) return std::nullopt;
  return r;
}

// Status immediate (NAA -> host). The NAAICE reference library reads it two
// ways: its software NAA writes the status as the immediate's value (bits
// 0..7), its host reads bits 8..15. naarpc therefore sends, in the reference
// dialect, the status in both bytes (0x0101 * status), which every reader
// decodes alike; in the spec dialect the value itself. On receipt both
// conventions are accepted: the low byte if it is non-zero, else bits 8..15
// (docs/protocol.md 5.2).
inline uint32_t EncodeStatusImmediate(Dialect dialect, uint8_t status) {
  if (dialect == Dialect::kReference) return uint32_t{status} << 8 | status;
  return status;
}
inline uint8_t DecodeStatusImmediate(uint32_t imm) {
  const uint8_t low = static_cast<uint8_t>(imm & 0xffu);
  if (low != 0) return low;
  return static_cast<uint8_t>((imm >> 8) & 0xffu);
}

// ---- Streams (naarpc extension, docs/protocol.md 15) -------------------------

inline constexpr uint8_t kStreamFlagsIn = kRegionFlagStream | kRegionFlagStreamSequenced |
                                         kRegionFlagInternal | kRegionFlagInput;
inline constexpr uint8_t kStreamFlagsOut = kRegionFlagStream | kRegionFlagStreamSequenced |
                                          kRegionFlagInternal | kRegionFlagOutput;
inline constexpr uint64_t kMaxStreamChunkSize = uint64_t{1} << 23;
inline constexpr uint32_t kMaxStreamWindow = 64;
inline constexpr size_t kMaxStreams = 32;
// The windows of one routine's streams together (receives: 15.3).
inline constexpr uint32_t kMaxStreamWindowTotal = 62;

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

// Big-endian helpers (explicit, independent of host byte order).
inline void PutBe16(uint8_t* p, uint16_t v) { p[0] = uint8_t(v >> 8); p[1] = uint8_t(v); }
inline void PutBe32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (24 - 8 * i));
}
inline void PutBe64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (56 - 8 * i));
}
inline void PutBe56(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 7; ++i) p[i] = uint8_t(v >> (48 - 8 * i));
}
inline uint16_t GetBe16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }
inline uint32_t GetBe32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = v << 8 | p[i];
  return v;
}
inline uint64_t GetBe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | p[i];
  return v;
}
inline uint64_t GetBe56(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 7; ++i) v = v << 8 | p[i];
  return v;
}

}  // namespace naarpc

#endif  // NAARPC_PROTOCOL_H_
