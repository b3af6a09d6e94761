#include "naarpc/transport.h"

namespace naarpc {

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

}  // namespace naarpc
