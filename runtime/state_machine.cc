#include "runtime/state_machine.h"

#include <string>

namespace naarpc {

std::string_view CommStateName(CommState s) {
  switch (s) {
    case CommState::kInit: return "INIT";
    case CommState::kReady: return "READY";
    case CommState::kConnected: return "CONNECTED";
    case CommState::kDisconnected: return "DISCONNECTED";
    case CommState::kMrspSending: return "MRSP_SENDING";
    case CommState::kMrspReceiving: return "MRSP_RECEIVING";
    case CommState::kMrspDone: return "MRSP_DONE";
    case CommState::kDataSending: return "DATA_SENDING";
    case CommState::kCalculating: return "CALCULATING";
    case CommState::kDataReceiving: return "DATA_RECEIVING";
    case CommState::kFinished: return "FINISHED";
    case CommState::kError: return "ERROR";
  }
  return "UNKNOWN";
}

bool StateMachine::IsLegal(Role role, CommState from, CommState to) {
  using S = CommState;
  if (from == S::kError) return false;             // terminal
  if (to == S::kError) return true;                // any state may fail
  if (to == S::kDisconnected) return from != S::kDisconnected;
  if (from == S::kDisconnected) return false;
  auto is = [&](S a, S b) { return from == a && to == b; };
  if (is(S::kInit, S::kReady) || is(S::kReady, S::kConnected)) return true;
  if (role == Role::kHost) {
    return is(S::kConnected, S::kMrspSending) ||
           is(S::kMrspSending, S::kMrspReceiving) ||
           is(S::kMrspReceiving, S::kMrspDone) ||
           is(S::kMrspDone, S::kDataSending) ||
           is(S::kDataSending, S::kDataReceiving) ||
           is(S::kDataReceiving, S::kFinished) ||
           is(S::kFinished, S::kDataSending);
  }
  return is(S::kConnected, S::kMrspReceiving) ||
         is(S::kMrspReceiving, S::kMrspSending) ||
         is(S::kMrspSending, S::kMrspDone) ||
         is(S::kMrspDone, S::kDataReceiving) ||
         is(S::kDataReceiving, S::kCalculating) ||
         is(S::kCalculating, S::kDataSending) ||
         is(S::kDataSending, S::kFinished) ||
         is(S::kFinished, S::kDataReceiving);
}

Status StateMachine::Transition(CommState next) {
  if (!IsLegal(role_, state_, next)) {
    return FailedPreconditionError(
        std::string("illegal state transition ") +
        std::string(CommStateName(state_)) + " -> " +
        std::string(CommStateName(next)) +
        (role_ == Role::kHost ? " (host)" : " (NAA)"));
  }
  state_ = next;
  return Status::Ok();
}

}  // namespace naarpc
