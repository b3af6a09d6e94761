// Fault injection for the emulated transport (tests): drop the connection
// at a given step, delay, or corrupt a message.
#ifndef NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_FAULT_INJECTION_H_
#define NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_FAULT_INJECTION_H_

#include <chrono>
#include <cstdint>

#include "runtime/transport.h"

namespace naarpc {

// Describes one outgoing work request about to be put on the wire.
struct FaultPoint {
  bool is_listener_side = false;  // connection was accepted (NAA side)
  uint64_t sequence = 0;          // 0-based index of outgoing WRs on this connection
  WorkOpcode opcode = WorkOpcode::kSend;
  uint32_t length = 0;
};

struct FaultAction {
  enum class Kind : uint8_t { kNone, kDropConnection, kDelay, kCorruptPayload };
  Kind kind = Kind::kNone;
  std::chrono::microseconds delay{0};  // kDelay
  uint32_t corrupt_offset = 0;         // kCorruptPayload: byte to flip (xor 0xff)
};

class FaultInjector {
 public:
  virtual ~FaultInjector() = default;
  // Called on the posting thread for every outgoing work request.
  virtual FaultAction OnPost(const FaultPoint& point) = 0;
};

}  // namespace naarpc

#endif  // NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_FAULT_INJECTION_H_
