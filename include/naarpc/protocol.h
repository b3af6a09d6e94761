// Wire constants of the NAAICE host–NAA protocol, the encoding of the
// 32-bit immediates and the variable-length parameters' header. Layouts and every decision the spec leaves open are
// documented in docs/protocol.md; tests pin them byte for byte.
#ifndef NAARPC_PROTOCOL_H_
#define NAARPC_PROTOCOL_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
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

// Variable-length parameters start with an 8-byte big-endian element count;
// the elements follow (docs/idl.md, "Variable-length parameters"). Generated
// code and the dynamic calls of the CLI and Python read and write it here.
inline constexpr size_t kLengthHeaderSize = 8;
// The count in `region`'s header; 0 if the region is shorter than a header.
inline uint64_t ReadLengthHeader(std::span<const std::byte> region) {
  if (region.size() < kLengthHeaderSize) return 0;
  uint64_t v = 0;
  for (size_t i = 0; i < kLengthHeaderSize; ++i) v = v << 8 | uint8_t(region[i]);
  return v;
}
// Writes `count` into `region`'s header (nothing if the region is shorter).
inline void WriteLengthHeader(std::span<std::byte> region, uint64_t count) {
  if (region.size() < kLengthHeaderSize) return;
  for (size_t i = 0; i < kLengthHeaderSize; ++i) {
    region[i] = std::byte(uint8_t(count >> (56 - 8 * i)));
  }
}

}  // namespace naarpc

#endif  // NAARPC_PROTOCOL_H_
