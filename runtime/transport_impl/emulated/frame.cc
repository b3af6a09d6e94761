#include "runtime/transport_impl/emulated/frame.h"

#include <arpa/inet.h>

#include <cstdio>

namespace naarpc {
namespace emulated {

void EncodeHeader(const Header& h, uint8_t* p) {
  p[0] = h.type;
  p[1] = h.flags;
  p[2] = p[3] = 0;
  PutLe<uint32_t>(p + 4, h.length);
  PutLe<uint64_t>(p + 8, h.seq);
  PutLe<uint64_t>(p + 16, h.addr);
  PutLe<uint32_t>(p + 24, h.key);
  uint32_t be = htonl(h.imm);
  std::memcpy(p + 28, &be, 4);
}

Header DecodeHeader(const uint8_t* p) {
  Header h;
  h.type = p[0];
  h.flags = p[1];
  h.length = GetLe<uint32_t>(p + 4);
  h.seq = GetLe<uint64_t>(p + 8);
  h.addr = GetLe<uint64_t>(p + 16);
  h.key = GetLe<uint32_t>(p + 24);
  uint32_t be;
  std::memcpy(&be, p + 28, 4);
  h.imm = ntohl(be);
  return h;
}

void EncodeHello(uint8_t* out) {
  std::memset(out, 0, kHelloSize);
  PutLe<uint32_t>(out, kHelloMagic);
  PutLe<uint16_t>(out + 4, kWireVersion);
}

Status CheckHello(const uint8_t* in, const std::string& peer) {
  uint32_t magic = GetLe<uint32_t>(in);
  uint16_t version = GetLe<uint16_t>(in + 4);
  if (magic != kHelloMagic) {
    return ProtocolError("emulated transport: " + peer +
                         " is not an emulated-transport peer (hello magic " +
                         Hex(magic) + ", expected " + Hex(kHelloMagic) + ")");
  }
  if (version != kWireVersion) {
    return ProtocolError("emulated transport: protocol version mismatch with " + peer +
                         ": peer speaks version " + std::to_string(version) +
                         ", we speak version " + std::to_string(kWireVersion));
  }
  return Status::Ok();
}

std::string Errno(int err) { return std::strerror(err); }

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace emulated
}  // namespace naarpc
