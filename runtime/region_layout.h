// RegionSpec: how one RPC parameter or internal region maps to memory
// regions on the wire.
#ifndef NAARPC_RUNTIME_REGION_LAYOUT_H_
#define NAARPC_RUNTIME_REGION_LAYOUT_H_

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

struct RegionSpec {
  std::string name;               // for error messages
  Direction direction = Direction::kIn;
  uint64_t size = 0;              // bytes; > max region size: split on the wire
  uint64_t naa_address = 0;       // requested NAA address, 0 = NAA chooses
  bool single_send = false;       // reference dialect: written on the first call only
  // Optional user memory (zero-copy). If null, the session allocates the
  // buffer. REQUIRES: if set, at least `size` bytes that outlive the session.
  void* external_buffer = nullptr;
};

}  // namespace naarpc

#endif  // NAARPC_RUNTIME_REGION_LAYOUT_H_
