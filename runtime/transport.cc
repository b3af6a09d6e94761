#include "naarpc/transport.h"

namespace naarpc {

std::string HostPort(std::string_view host, uint16_t port) {
  const bool bare_ipv6 = host.find(':') != std::string_view::npos && host.front() != '[';
  std::string out;
  if (bare_ipv6) out += '[';
  out += host;
  if (bare_ipv6) out += ']';
  return out + ":" + std::to_string(port);
}

Result<std::unique_ptr<Transport>> Transport::WithLocalAddress(
    const std::string& local_address) const {
  return FailedPreconditionError("the " + std::string(name()) +
                                 " transport cannot choose its local address (" + local_address +
                                 ")");
}

std::string_view CompletionStatusName(CompletionStatus s) {
  switch (s) {
    case CompletionStatus::kSuccess: return "success";
    case CompletionStatus::kLocalLengthError: return "local length error";
    case CompletionStatus::kLocalProtectionError: return "local protection error";
    case CompletionStatus::kRemoteAccessError: return "remote access error";
    case CompletionStatus::kRemoteInvalidRequest: return "remote invalid request";
    case CompletionStatus::kRnrRetryExceeded: return "RNR retry exceeded (no receive posted at the peer)";
    case CompletionStatus::kRetryExceeded: return "transport retry exceeded (peer unreachable)";
    case CompletionStatus::kFlushed: return "flushed (connection broken)";
    case CompletionStatus::kGeneralError: return "general error";
  }
  return "unknown completion status";
}

Result<std::unique_ptr<MemoryWindow>> Connection::AllocateWindow() {
  return FailedPreconditionError("memory windows: not supported by this transport or device");
}

}  // namespace naarpc
