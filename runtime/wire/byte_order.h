// Big-endian values on the wire (MRSP, the metadata region), explicit and
// independent of the host's byte order. Internal to the runtime.
#ifndef NAARPC_RUNTIME_WIRE_BYTE_ORDER_H_
#define NAARPC_RUNTIME_WIRE_BYTE_ORDER_H_

#include <cstdint>

namespace naarpc {

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

#endif  // NAARPC_RUNTIME_WIRE_BYTE_ORDER_H_
