// The communication state machine of the NAAICE API (spec 000, "State
// Machine"), with the spec's numeric values. Each role has its own table of
// legal transitions; ERROR is terminal and never counts as finished.
#ifndef NAARPC_RUNTIME_ENGINE_STATE_MACHINE_H_
#define NAARPC_RUNTIME_ENGINE_STATE_MACHINE_H_

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string_view>

#include "naarpc/comm_state.h"
#include "naarpc/status.h"

namespace naarpc {

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

  // Inline (tables built at compile time): on every call's latency path.
  static bool IsLegal(Role role, CommState from, CommState to);

 private:
  Status IllegalTransition(CommState next) const;

  Role role_;
  CommState state_ = CommState::kInit;
};

namespace state_machine_detail {

inline constexpr CommState kAllStates[] = {
    CommState::kInit,          CommState::kReady,        CommState::kConnected,
    CommState::kDisconnected,  CommState::kMrspSending,  CommState::kMrspReceiving,
    CommState::kMrspDone,      CommState::kDataSending,  CommState::kCalculating,
    CommState::kDataReceiving, CommState::kFinished,     CommState::kError,
};
inline constexpr size_t kStateCount = std::size(kAllStates);

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
inline constexpr LegalTable kLegal = BuildLegalTable();
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
inline constexpr IndexTable kIndex = BuildIndexTable();

}  // namespace state_machine_detail

inline bool StateMachine::IsLegal(Role role, CommState from, CommState to) {
  using namespace state_machine_detail;
  const size_t f = kIndex.of[static_cast<uint8_t>(from)];
  const size_t n = kIndex.of[static_cast<uint8_t>(to)];
  const size_t r = static_cast<size_t>(role);
  if (f == kStateCount || n == kStateCount || r > 1) return false;
  return (kLegal.next[r][f] >> n) & 1u;
}

}  // namespace naarpc

#endif  // NAARPC_RUNTIME_ENGINE_STATE_MACHINE_H_
