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

uint32_t EncodeRequestImmediate(Dialect dialect, uint8_t function_code,
                                uint32_t user_bits) {
  const uint32_t code = function_code & 0x7fu;
  if (dialect == Dialect::kSpec) return code;
  return code | kImmHostToNaaBit | ((user_bits & 0xffffffu) << 8);
}

std::optional<RequestImmediate> DecodeRequestImmediate(uint32_t imm) {
  RequestImmediate r;
  r.function_code = static_cast<uint8_t>(imm & 0x7fu);
  r.host_to_naa_bit = (imm & kImmHostToNaaBit) != 0;
  r.user_bits = imm >> 8;
  if (r.function_code < kMinFunctionCode) return std::nullopt;
  // The spec dialect carries only the function code.
  if (!r.host_to_naa_bit && r.user_bits != 0) return std::nullopt;
  return r;
}

uint32_t EncodeStatusImmediate(uint8_t status) { return status; }

uint8_t DecodeStatusImmediate(uint32_t imm) {
  const uint8_t low = static_cast<uint8_t>(imm & 0xffu);
  if (low != 0) return low;
  return static_cast<uint8_t>((imm >> 8) & 0xffu);
}

}  // namespace naarpc
