// RegionSpec: how one RPC parameter or internal region maps to memory
// regions on the wire.
#ifndef NAARPC_REGION_LAYOUT_H_
#define NAARPC_REGION_LAYOUT_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace naarpc {

enum class Direction : uint8_t {
  kIn,        // host -> NAA
  kOut,       // NAA -> host (a return region)
  kInOut,     // both ways (a return region)
  kInternal,  // NAA-only, never transferred
};

// A stream parameter (docs/protocol.md 15): its data flows in chunks during
// the call, through a ring of `window` slots of `chunk_size` bytes on the
// reading side, so it may be far larger than either side's memory.
struct StreamSpec {
  uint32_t chunk_size = 0;  // 0: not a stream; else 1..2^23
  uint32_t window = 0;      // 1..64; a routine's windows add up to <= 62
  bool enabled() const { return chunk_size != 0; }
};

struct RegionSpec {
  std::string name;               // for error messages
  Direction direction = Direction::kIn;
  uint64_t size = 0;              // bytes; > max region size: split on the wire
  uint64_t naa_address = 0;       // requested NAA address, 0 = NAA chooses
  bool single_send = false;       // reference dialect: written on the first call only
  // Optional user memory (zero-copy). If null, the session allocates the
  // buffer. REQUIRES: if set, at least `size` bytes that outlive the session.
  void* external_buffer = nullptr;
  // Streams: direction kIn or kOut; `size` is 0 or chunk_size * window (the
  // ring); no external buffer. Their data goes through a StreamHandler
  // (include/naarpc/stream.h), not buffer().
  StreamSpec stream{};
};

}  // namespace naarpc

#endif  // NAARPC_REGION_LAYOUT_H_
