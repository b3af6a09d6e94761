// Status and Result<T>: explicit errors with a code and a message (after
// Abseil's Status/StatusOr). No exception crosses the naarpc public API.
#ifndef NAARPC_STATUS_H_
#define NAARPC_STATUS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace naarpc {

enum class StatusCode : uint8_t {
  kOk = 0,
  kInvalidArgument,     // caller passed something wrong (size, code, layout)
  kFailedPrecondition,  // object in the wrong state for the operation
  kOutOfRange,          // address/size outside a region or a wire limit
  kResourceExhausted,   // too many regions, out of memory
  kNotFound,            // e.g. no RDMA device
  kUnavailable,         // could not connect / peer rejected / unreachable
  kDeadlineExceeded,    // a local deadline passed
  kDisconnected,        // the peer went away (mid-call or idle)
  kTransportError,      // a work completion failed (remote access, RNR, ...)
  kProtocolError,       // malformed or unexpected wire message
  kMrspError,           // the peer answered MRSP with an Error message
  kNaaError,            // the NAA finished the call with a non-zero status
  kInternal,
  kCancelled,           // abandoned by its owner (e.g. the client was destroyed)
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message)
      : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // For kNaaError: the status byte the NAA returned (0x01..0xff).
  // For kMrspError: the MRSP error code (0x01 not enough memory, ...).
  std::optional<uint8_t> wire_code() const { return wire_code_; }
  Status& set_wire_code(uint8_t c) & { wire_code_ = c; return *this; }
  Status&& set_wire_code(uint8_t c) && { wire_code_ = c; return std::move(*this); }

  // Returns a copy with `context + ": "` prepended to the message.
  Status WithContext(std::string_view context) const;

  // "DEADLINE_EXCEEDED: call 'add' timed out after 100 ms".
  std::string ToString() const;

  // Marks the status as deliberately ignored (no silent drops elsewhere).
  void IgnoreError() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_ &&
           a.wire_code_ == b.wire_code_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  std::optional<uint8_t> wire_code_;
};

// Shorthands.
Status InvalidArgumentError(std::string msg);
Status FailedPreconditionError(std::string msg);
Status OutOfRangeError(std::string msg);
Status ResourceExhaustedError(std::string msg);
Status NotFoundError(std::string msg);
Status UnavailableError(std::string msg);
Status DeadlineExceededError(std::string msg);
Status DisconnectedError(std::string msg);
Status TransportError(std::string msg);
Status ProtocolError(std::string msg);
Status InternalError(std::string msg);
Status CancelledError(std::string msg);

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}          // NOLINT: implicit
  Result(Status status) : v_(std::move(status)) {    // NOLINT: implicit
    if (std::get<Status>(v_).ok()) {
      v_ = Status(StatusCode::kInternal, "Result constructed from OK status");
    }
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  // REQUIRES: ok()
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace naarpc

#define NAARPC_CONCAT_INNER(a, b) a##b
#define NAARPC_CONCAT(a, b) NAARPC_CONCAT_INNER(a, b)

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define NAARPC_RETURN_IF_ERROR(expr)                         \
  do {                                                       \
    ::naarpc::Status naarpc_status_ = (expr);                \
    if (!naarpc_status_.ok()) return naarpc_status_;         \
  } while (0)

// `lhs = value of expr (a Result<T>)`, or return its Status.
#define NAARPC_ASSIGN_OR_RETURN(lhs, expr) \
  NAARPC_ASSIGN_OR_RETURN_IMPL(NAARPC_CONCAT(naarpc_result_, __LINE__), lhs, expr)
#define NAARPC_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()

#endif  // NAARPC_STATUS_H_
