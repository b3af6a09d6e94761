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

// Per-call memory windows (docs/protocol.md 4.5): entry i is 16 bytes, the
// host address and the window rkey of this call, big-endian, then 4 reserved
// zero bytes. The host writes it (PutMetadataWindowEntry), the NAA reads it
// (ResolveMetadataWindowReturns): one rule, both sides.
inline void PutMetadataWindowEntry(uint8_t* entry, uint64_t addr, uint32_t rkey) {
  PutBe64(entry, addr);
  PutBe32(entry + 8, rkey);
  PutBe32(entry + 12, 0);
}

// As ResolveMetadataReturns for 16-byte window entries (no byte-swapped
// retry: no older peer writes this format). rkeys[i] is the key the NAA
// writes returns[i] with (a parameter named twice keeps its first key).
// False if the size is not a multiple of 16, an address names no
// parameter, or none is named.
template <typename ParamOfAddress>
bool ResolveMetadataWindowReturns(std::span<const uint8_t> metadata,
                                  ParamOfAddress&& param_of_address,
                                  std::vector<size_t>& returns, std::vector<uint32_t>& rkeys) {
  returns.clear();
  rkeys.clear();
  if (metadata.size() % kMetadataWindowEntrySize != 0) return false;
  for (size_t off = 0; off < metadata.size(); off += kMetadataWindowEntrySize) {
    const uint64_t addr = GetBe64(metadata.data() + off);
    if (addr == 0) break;  // zero padding ends the list
    const size_t p = param_of_address(addr);
    if (p == SIZE_MAX) return false;
    if (std::find(returns.begin(), returns.end(), p) == returns.end()) {
      returns.push_back(p);
      rkeys.push_back(GetBe32(metadata.data() + off + 8));
    }
  }
  return !returns.empty();
}

}  // namespace naarpc

#endif  // NAARPC_RUNTIME_WIRE_METADATA_H_
