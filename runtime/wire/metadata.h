// The spec dialect's metadata region, as the NAA reads it: one 8-byte
// big-endian host address per return region (docs/protocol.md 4.4), in
// write-back order, zero padding ending the list. Peer-supplied bytes: the
// decoder is total over its input (fuzzed: //tests/fuzz).
#ifndef NAARPC_RUNTIME_WIRE_METADATA_H_
#define NAARPC_RUNTIME_WIRE_METADATA_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "naarpc/protocol.h"
#include "runtime/wire/byte_order.h"

namespace naarpc {

// Resolves `metadata` into the parameters to write back, in order, without
// duplicates. `param_of_address(addr)` names the parameter one of whose wire
// regions starts at host address `addr`, or returns SIZE_MAX. An address
// that matches nothing is retried byte-swapped (older hosts wrote a raw
// little-endian uintptr_t). False, with `returns` unspecified, if the size
// is not a multiple of 8, an address names no parameter, or none is named.
template <typename ParamOfAddress>
bool ResolveMetadataReturns(std::span<const uint8_t> metadata, ParamOfAddress&& param_of_address,
                            std::vector<size_t>& returns) {
  returns.clear();
  if (metadata.size() % kMetadataEntrySize != 0) return false;
  for (size_t off = 0; off < metadata.size(); off += kMetadataEntrySize) {
    const uint64_t be = GetBe64(metadata.data() + off);
    if (be == 0) break;  // zero padding ends the list
    size_t p = param_of_address(be);
    if (p == SIZE_MAX) {
      uint64_t swapped = 0;
      for (int i = 0; i < 8; ++i) swapped = swapped << 8 | ((be >> (8 * i)) & 0xff);
      p = param_of_address(swapped);
    }
    if (p == SIZE_MAX) return false;
    if (std::find(returns.begin(), returns.end(), p) == returns.end()) returns.push_back(p);
  }
  return !returns.empty();
}

}  // namespace naarpc

#endif  // NAARPC_RUNTIME_WIRE_METADATA_H_
