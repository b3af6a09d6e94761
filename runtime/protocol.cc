#include "runtime/protocol.h"

namespace naarpc {

std::string_view DialectName(Dialect d) {
  switch (d) {
    case Dialect::kSpec: return "spec";
    case Dialect::kReference: return "reference";
  }
  return "unknown";
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
