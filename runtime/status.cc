#include "naarpc/status.h"

#include <cstdio>

namespace naarpc {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case StatusCode::kOutOfRange: return "OUT_OF_RANGE";
    case StatusCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case StatusCode::kNotFound: return "NOT_FOUND";
    case StatusCode::kUnavailable: return "UNAVAILABLE";
    case StatusCode::kDeadlineExceeded: return "DEADLINE_EXCEEDED";
    case StatusCode::kDisconnected: return "DISCONNECTED";
    case StatusCode::kTransportError: return "TRANSPORT_ERROR";
    case StatusCode::kProtocolError: return "PROTOCOL_ERROR";
    case StatusCode::kMrspError: return "MRSP_ERROR";
    case StatusCode::kNaaError: return "NAA_ERROR";
    case StatusCode::kInternal: return "INTERNAL";
    case StatusCode::kCancelled: return "CANCELLED";
  }
  return "UNKNOWN";
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  Status s(code_, std::string(context) + ": " + message_);
  s.wire_code_ = wire_code_;
  return s;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(StatusCodeName(code_));
  if (wire_code_) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), " [0x%02x]", *wire_code_);
    s += buf;
  }
  s += ": ";
  s += message_;
  return s;
}

Status InvalidArgumentError(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
Status FailedPreconditionError(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
Status OutOfRangeError(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
Status ResourceExhaustedError(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
Status NotFoundError(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
Status UnavailableError(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
Status DeadlineExceededError(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
Status DisconnectedError(std::string m) { return {StatusCode::kDisconnected, std::move(m)}; }
Status TransportError(std::string m) { return {StatusCode::kTransportError, std::move(m)}; }
Status ProtocolError(std::string m) { return {StatusCode::kProtocolError, std::move(m)}; }
Status InternalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
Status CancelledError(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }

}  // namespace naarpc
