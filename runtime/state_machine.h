// The communication state machine of the NAAICE API (spec 000, "State
// Machine"), with the spec's numeric values. Each role has its own table of
// legal transitions; ERROR is terminal and never counts as finished.
#ifndef NAARPC_RUNTIME_STATE_MACHINE_H_
#define NAARPC_RUNTIME_STATE_MACHINE_H_

#include <cstdint>
#include <string_view>

#include "runtime/status.h"

namespace naarpc {

enum class CommState : uint8_t {
  kInit = 0,
  kReady = 1,
  kConnected = 2,
  kDisconnected = 3,
  kMrspSending = 10,
  kMrspReceiving = 11,
  kMrspDone = 12,
  kDataSending = 20,
  kCalculating = 21,
  kDataReceiving = 22,
  kFinished = 30,
  kError = 40,
};
std::string_view CommStateName(CommState s);

enum class Role : uint8_t { kHost, kNaa };

class StateMachine {
 public:
  explicit StateMachine(Role role) : role_(role) {}

  CommState state() const { return state_; }
  Role role() const { return role_; }
  bool failed() const { return state_ == CommState::kError; }
  // A call has completed successfully (FINISHED, never ERROR).
  bool finished() const { return state_ == CommState::kFinished; }

  // Moves to `next` if the role's table allows it; otherwise returns
  // FailedPrecondition naming both states and leaves the state unchanged.
  // Inline: a call makes several transitions on its latency path.
  Status Transition(CommState next) {
    if (IsLegal(role_, state_, next)) [[likely]] {
      state_ = next;
      return Status::Ok();
    }
    return IllegalTransition(next);
  }
  // Any state may fail; ERROR is terminal.
  void Fail() { state_ = CommState::kError; }

  static bool IsLegal(Role role, CommState from, CommState to);

 private:
  Status IllegalTransition(CommState next) const;

  Role role_;
  CommState state_ = CommState::kInit;
};

}  // namespace naarpc

#endif  // NAARPC_RUNTIME_STATE_MACHINE_H_
