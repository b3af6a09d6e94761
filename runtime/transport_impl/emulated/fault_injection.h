// Fault injection for the emulated transport (tests): drop the connection
// at a given step, delay, corrupt, lose, duplicate or reorder a message.
#ifndef NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_FAULT_INJECTION_H_
#define NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_FAULT_INJECTION_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <vector>

#include "naarpc/transport.h"

namespace naarpc {

// Describes one outgoing work request about to be put on the wire.
struct FaultPoint {
  bool is_listener_side = false;  // connection was accepted (NAA side)
  uint64_t sequence = 0;          // 0-based index of outgoing WRs on this connection
  WorkOpcode opcode = WorkOpcode::kSend;
  uint32_t length = 0;
  bool has_imm = false;           // kRdmaWriteWithImm
  uint32_t imm_data = 0;          // host byte order, as posted
};

struct FaultAction {
  enum class Kind : uint8_t {
    kNone,
    kDropConnection,
    kDelay,
    kCorruptPayload,
    kLoseMessage,
    kDuplicate,
    kSwapWithNext,
    kStallMidMessage,
  };
  Kind kind = Kind::kNone;
  std::chrono::microseconds delay{0};  // kDelay
  uint32_t corrupt_offset = 0;         // kCorruptPayload: byte to flip (xor 0xff);
                                       // kStallMidMessage: payload bytes sent

  // kDropConnection: the socket is shut down before this WR goes out; both
  // sides see a disconnect (this WR and all outstanding work are flushed).
  static FaultAction Drop() { return {Kind::kDropConnection, {}, 0}; }
  // kDelay: this WR (and, to keep order, every later one) leaves the sender
  // `d` after it was posted. PostSend does not block.
  static FaultAction Delay(std::chrono::microseconds d) { return {Kind::kDelay, d, 0}; }
  // kCorruptPayload: the byte at `offset` is flipped on the wire only (the
  // sender's memory is untouched). Ignored if offset >= the WR's length.
  static FaultAction Corrupt(uint32_t offset) {
    return {Kind::kCorruptPayload, {}, offset};
  }
  // The next three model a misbehaving layer above the transport's
  // reliability; the wire framing between the two ends stays consistent.
  //
  // kLoseMessage: an RDMA_WRITE_WITH_IMM reaches the target as a plain RDMA
  // WRITE: its data lands, but no receive is consumed and no completion is
  // made there (the immediate is lost). The sender's completion is the
  // normal success one. No effect on other opcodes.
  static FaultAction LoseMessage() { return {Kind::kLoseMessage, {}, 0}; }
  // kDuplicate: the target gets this message twice in a row (a SEND /
  // WRITE_WITH_IMM copy consumes a second receive and makes a second
  // completion there; writes land twice). The sender sees only the
  // completions of what it posted; the copy takes no send-queue slot. If the
  // copy fails at the target (e.g. no receive left), the connection breaks
  // with no completion for it at the sender.
  static FaultAction Duplicate() { return {Kind::kDuplicate, {}, 0}; }
  // kSwapWithNext: this message is held back until the next WR on this
  // connection is posted and goes on the wire right after that one's
  // message, so the target sees the two swapped. The sender's completions
  // stay in post order with their own wr_ids; a held WR is flushed like any
  // outstanding one if the connection breaks. Ignored if either WR failed
  // locally (bad lkey).
  static FaultAction SwapWithNext() { return {Kind::kSwapWithNext, {}, 0}; }
  // kStallMidMessage: the sender puts this message's header and its first
  // `bytes` payload bytes on the wire, then nothing more at all, as a
  // process stopped mid-send (the connection stays open). Clamped to the
  // payload's length.
  static FaultAction StallMidMessage(uint32_t bytes) {
    return {Kind::kStallMidMessage, {}, bytes};
  }
};

class FaultInjector {
 public:
  virtual ~FaultInjector() = default;
  // Called on the posting thread for every outgoing work request. Must be
  // thread-safe: one injector is shared by all connections of a transport.
  virtual FaultAction OnPost(const FaultPoint& point) = 0;
};

// One rule of a ScriptedFaultInjector; unset fields match anything.
struct FaultRule {
  std::optional<bool> listener_side;
  std::optional<WorkOpcode> opcode;
  std::optional<uint64_t> sequence;
  // When set, the rule matches only points for which it returns true. Runs
  // under the injector's lock: it must not call back into the injector.
  std::function<bool(const FaultPoint&)> match;
  int times = 1;  // how many matches fire; < 0 = every match
  FaultAction action;
};

// Fires the first rule that matches and has firings left. Thread-safe.
class ScriptedFaultInjector : public FaultInjector {
 public:
  ScriptedFaultInjector() = default;
  explicit ScriptedFaultInjector(std::vector<FaultRule> rules);

  void AddRule(FaultRule rule);
  FaultAction OnPost(const FaultPoint& point) override;

  // Faults injected so far (all rules).
  uint64_t injected() const;
  // Every point seen so far, in call order.
  std::vector<FaultPoint> seen() const;

 private:
  mutable std::mutex mu_;
  std::vector<FaultRule> rules_;
  std::vector<FaultPoint> seen_;
  uint64_t injected_ = 0;
};

}  // namespace naarpc

#endif  // NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_FAULT_INJECTION_H_
