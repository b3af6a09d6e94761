// The emulated transport's wire: the hello each side sends first and the
// frame header every frame starts with. Byte layout (TCP, TCP_NODELAY):
//
//   hello (16 bytes): 0 magic u32 "NAEE" | 4 version u16 | 6 zero
//   header (32 bytes, little-endian except imm):
//     0 type u8 | 1 flags u8 | 2 reserved u16 | 4 length u32 |
//     (flags: bit 0 = solicited event, SEND and WRITE_IMM only; other bits 0)
//     8 seq u64 | 16 addr u64 | 24 key u32 | 28 imm u32 (big-endian)
//   SEND      seq, length, payload
//   WRITE     seq, length, addr = remote address, key = rkey, payload
//   WRITE_IMM as WRITE plus imm
//   CTRL      seq = requests processed so far (cumulative ack)
//   NAK       seq = failed request, key = CompletionStatus, imm = vendor_err
//   RNR_NAK   seq = request that found no posted receive (all before it
//             were processed). The target drops every later request until
//             the sender retransmits from seq (go-back-N, as on RC).
//
// Request sequence numbers start at 1 and increase by one per request frame
// (one per work request, plus one per copy that fault injection duplicates).
// Internal to the package.
#ifndef NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_FRAME_H_
#define NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_FRAME_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "naarpc/status.h"

namespace naarpc {
namespace emulated {

constexpr uint32_t kHelloMagic = 0x4e414545;  // "NAEE"
constexpr uint16_t kWireVersion = 1;
constexpr size_t kHelloSize = 16;
constexpr size_t kHdrSize = 32;

enum FrameType : uint8_t {
  kFrameSend = 1,
  kFrameWrite = 2,
  kFrameWriteImm = 3,
  kFrameCtrl = 4,
  kFrameNak = 5,
  kFrameRnrNak = 6,
};

// Header flags of request frames.
constexpr uint8_t kFrameFlagSolicited = 0x01;

// Little-endian fields, stored and loaded whole (one move each on x86).
template <typename T>
T ToLe(T v) {
  if constexpr (std::endian::native == std::endian::big) {
    if constexpr (sizeof(T) == 8) return __builtin_bswap64(v);
    if constexpr (sizeof(T) == 4) return __builtin_bswap32(v);
    if constexpr (sizeof(T) == 2) return __builtin_bswap16(v);
  }
  return v;
}
template <typename T>
void PutLe(uint8_t* p, T v) {
  v = ToLe(v);
  std::memcpy(p, &v, sizeof(v));
}
template <typename T>
T GetLe(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  return ToLe(v);
}

struct Header {
  uint8_t type = 0;
  uint8_t flags = 0;
  uint32_t length = 0;
  uint64_t seq = 0;
  uint64_t addr = 0;
  uint32_t key = 0;
  uint32_t imm = 0;
};

void EncodeHeader(const Header& h, uint8_t* p);
Header DecodeHeader(const uint8_t* p);

// Our hello, kHelloSize bytes at `out`.
void EncodeHello(uint8_t* out);
// Validates a peer's hello (kHelloSize bytes); errors name `peer`.
Status CheckHello(const uint8_t* in, const std::string& peer);

// strerror(err), and v as "0x..." (error messages).
std::string Errno(int err);
std::string Hex(uint64_t v);

}  // namespace emulated
}  // namespace naarpc

#endif  // NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_FRAME_H_
