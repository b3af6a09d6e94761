// Memory Region Setup Protocol (MRSP) messages: typed form and a byte-exact
// codec. Encoding writes explicit big-endian bytes; decoding validates
// everything (type, length vs. count, limits, sizes, flags) and never reads
// past the end of its input. Layouts: docs/protocol.md.
#ifndef NAARPC_RUNTIME_WIRE_MRSP_H_
#define NAARPC_RUNTIME_WIRE_MRSP_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <variant>
#include <vector>

#include "naarpc/protocol.h"
#include "naarpc/status.h"

namespace naarpc {

// One entry of an Advertisement+Request (0x01): the host advertises its
// region (addr, rkey, size) and requests a region of `size` bytes on the NAA,
// at `requested_naa_address` (0 = NAA's choice) with `flags`.
struct RegionRequest {
  uint8_t flags = 0;
  uint64_t requested_naa_address = 0;  // 56 bits
  uint64_t addr = 0;
  uint32_t rkey = 0;
  uint32_t size = 0;
  friend bool operator==(const RegionRequest&, const RegionRequest&) = default;
};

// One entry of an Advertisement (0x02).
struct RegionAdvertisement {
  uint64_t addr = 0;
  uint32_t rkey = 0;
  uint32_t size = 0;
  friend bool operator==(const RegionAdvertisement&, const RegionAdvertisement&) = default;
};

struct AdvertisementRequestMessage {
  std::vector<RegionRequest> regions;  // 1..255
  uint8_t capabilities = 0;            // kMrspCap* asked for (header byte 2)
  friend bool operator==(const AdvertisementRequestMessage&, const AdvertisementRequestMessage&) = default;
};
struct AdvertisementMessage {
  std::vector<RegionAdvertisement> regions;  // 0..255
  uint8_t capabilities = 0;                  // kMrspCap* accepted (header byte 2)
  friend bool operator==(const AdvertisementMessage&, const AdvertisementMessage&) = default;
};
struct ErrorMessage {
  uint8_t code = 0;  // MrspErrorCode
  friend bool operator==(const ErrorMessage&, const ErrorMessage&) = default;
};

using MrspMessage =
    std::variant<AdvertisementRequestMessage, AdvertisementMessage, ErrorMessage>;

// Encoded size of a message.
size_t EncodedSize(const MrspMessage& msg);

// Encodes into `out`. Fails (InvalidArgument/OutOfRange, naming the entry and
// field) if the message breaks a wire limit: count 0 or > 255 for requests,
// > 255 for advertisements, size 0 or > 1 GiB, NAA address > 56 bits,
// unknown flag bits, error code 0; or if `out` is too small.
Result<size_t> EncodeMrsp(const MrspMessage& msg, std::span<uint8_t> out);
Result<std::vector<uint8_t>> EncodeMrsp(const MrspMessage& msg);

// Decodes exactly `bytes` (the byte_len of the received SEND). Rejects with
// ProtocolError naming the problem: empty/short input, unknown type, length
// not equal to header + count * entry size (trailing bytes are an error),
// count 0 in a request, region size 0 or > 1 GiB, unknown flag bits, non-zero
// padding is accepted (ignored, per spec "padding"), error code 0. Header
// byte 2 of types 0x01/0x02 is read as capabilities (known bits kept,
// others ignored); byte 3, and byte 2 of an Error, are padding.
Result<MrspMessage> DecodeMrsp(std::span<const uint8_t> bytes);

}  // namespace naarpc

#endif  // NAARPC_RUNTIME_WIRE_MRSP_H_
