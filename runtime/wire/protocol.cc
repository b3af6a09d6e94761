#include "naarpc/protocol.h"
#include "runtime/wire/stream_frame.h"

#include <cstdio>

namespace naarpc {

std::string_view DialectName(Dialect d) {
  switch (d) {
    case Dialect::kSpec: return "spec";
    case Dialect::kReference: return "reference";
  }
  return "unknown";
}

std::string CheckStreamEntry(uint8_t flags, uint64_t chunk_size, uint32_t size) {
  if (flags != kStreamFlagsIn && flags != kStreamFlagsOut) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02x", unsigned{flags});
    if ((flags | kRegionFlagStreamSequenced) == kStreamFlagsIn ||
        (flags | kRegionFlagStreamSequenced) == kStreamFlagsOut) {
      return std::string("stream flags ") + hex +
             ": a stream without chunk sequence numbers (naarpc streams before the 0x20 bit), "
             "which this side no longer speaks (a stream entry carries 0x35 or 0x39)";
    }
    return std::string("stream flags ") + hex + " (a stream entry carries 0x35 or 0x39)";
  }
  if (chunk_size == 0 || chunk_size > kMaxStreamChunkSize) {
    return "stream chunk size " + std::to_string(chunk_size) + " (must be 1.." +
           std::to_string(kMaxStreamChunkSize) + ")";
  }
  if (size % chunk_size != 0 || size / chunk_size > kMaxStreamWindow) {
    return "stream size " + std::to_string(size) + " is not window * chunk size " +
           std::to_string(chunk_size) + " with a window of 1.." + std::to_string(kMaxStreamWindow);
  }
  return {};
}

std::string_view MrspErrorName(uint8_t code) {
  switch (code) {
    case 0x01: return "not enough memory";
    case 0x02: return "invalid address";
    case 0x03: return "too many regions";
  }
  return "unknown MRSP error";
}

std::string_view NaaStatusName(uint8_t status) {
  switch (status) {
    case kNaaStatusSuccess: return "success";
    case kNaaStatusSocketUnavailable: return "socket not available";
    case kNaaStatusKernelTimeout: return "kernel timeout";
    case kNaaStatusUnknownFunction: return "unknown function code";
    case kNaaStatusBadRegionLayout: return "region layout does not match the routine";
    case kNaaStatusKernelFailed: return "kernel failed";
  }
  if (status >= kNaaStatusFirstApplication && status <= kNaaStatusLastApplication) {
    return "application error";
  }
  return "reserved status";
}

}  // namespace naarpc
