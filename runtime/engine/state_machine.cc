#include "runtime/engine/state_machine.h"

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

Status StateMachine::IllegalTransition(CommState next) const {
  return FailedPreconditionError(std::string("illegal state transition ") +
                                 std::string(CommStateName(state_)) + " -> " +
                                 std::string(CommStateName(next)) +
                                 (role_ == Role::kHost ? " (host)" : " (NAA)"));
}

}  // namespace naarpc
