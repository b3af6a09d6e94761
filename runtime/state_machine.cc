#include "runtime/state_machine.h"

#include <iterator>
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

namespace {

constexpr CommState kAllStates[] = {
    CommState::kInit,          CommState::kReady,        CommState::kConnected,
    CommState::kDisconnected,  CommState::kMrspSending,  CommState::kMrspReceiving,
    CommState::kMrspDone,      CommState::kDataSending,  CommState::kCalculating,
    CommState::kDataReceiving, CommState::kFinished,     CommState::kError,
};
constexpr size_t kStateCount = std::size(kAllStates);

// Dense index of a state (kStateCount for a value outside the enum).
constexpr size_t Index(CommState s) {
  for (size_t i = 0; i < kStateCount; ++i) {
    if (kAllStates[i] == s) return i;
  }
  return kStateCount;
}

// The spec's transition tables, as rules.
constexpr bool LegalByRule(Role role, CommState from, CommState to) {
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

// The rules evaluated once, at compile time: a call's transitions are on the
// latency path (a table lookup instead of a chain of comparisons).
struct LegalTable {
  uint16_t next[2][kStateCount] = {};  // [role][from] -> bit set of `to`
};
constexpr LegalTable BuildLegalTable() {
  LegalTable t;
  for (int r = 0; r < 2; ++r) {
    for (size_t f = 0; f < kStateCount; ++f) {
      for (size_t n = 0; n < kStateCount; ++n) {
        if (LegalByRule(static_cast<Role>(r), kAllStates[f], kAllStates[n])) {
          t.next[r][f] = static_cast<uint16_t>(t.next[r][f] | (1u << n));
        }
      }
    }
  }
  return t;
}
constexpr LegalTable kLegal = BuildLegalTable();
static_assert(kStateCount <= 16);

// Index() of every enum value, for a lookup without a search.
struct IndexTable {
  uint8_t of[256] = {};
};
constexpr IndexTable BuildIndexTable() {
  IndexTable t;
  for (size_t v = 0; v < 256; ++v) t.of[v] = static_cast<uint8_t>(Index(static_cast<CommState>(v)));
  return t;
}
constexpr IndexTable kIndex = BuildIndexTable();

}  // namespace

bool StateMachine::IsLegal(Role role, CommState from, CommState to) {
  const size_t f = kIndex.of[static_cast<uint8_t>(from)];
  const size_t n = kIndex.of[static_cast<uint8_t>(to)];
  const size_t r = static_cast<size_t>(role);
  if (f == kStateCount || n == kStateCount || r > 1) return false;
  return (kLegal.next[r][f] >> n) & 1u;
}

Status StateMachine::IllegalTransition(CommState next) const {
  return FailedPreconditionError(std::string("illegal state transition ") +
                                 std::string(CommStateName(state_)) + " -> " +
                                 std::string(CommStateName(next)) +
                                 (role_ == Role::kHost ? " (host)" : " (NAA)"));
}

}  // namespace naarpc
