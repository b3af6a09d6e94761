// CallEngine::Op: one call from Submit to its `done` (internal to the host
// room). The engine's parts: call_engine.cc (the loop, submissions,
// sessions, completion, cancellation) and call_engine_deadlines.cc (the
// deadline heap).
#ifndef NAARPC_RUNTIME_HOST_CALL_ENGINE_OP_H_
#define NAARPC_RUNTIME_HOST_CALL_ENGINE_OP_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>

#include "naarpc/impl/call_engine.h"

namespace naarpc::codegen {

inline constexpr size_t kNotInHeap = std::numeric_limits<size_t>::max();

// One call from Submit to its `done`. Lives in a slot of slots_, reused by
// later calls once freed.
struct CallEngine::Op {
  enum class State : uint8_t { kFree, kWaiting, kConnecting, kRunning, kBlocking };
  // Slot index (low 32 bits) and the slot's generation (high 32 bits, never
  // 0): stale ids (an epoll event or a connect result of an earlier call in
  // the slot) find nothing.
  uint64_t id = 0;
  uint32_t generation = 0;
  State state = State::kFree;
  uint32_t pool_index = 0;  // into pools_
  std::shared_ptr<SessionPool> pool;
  Deadline deadline = Deadline::Infinite();
  int64_t admitted_ns = 0;  // internal::CycleClock, when Admit took it
  std::unique_ptr<AsyncCall> call;
  std::function<void(Status)> done;
  // The session's notification descriptor while running. It stays
  // registered with the engine's epoll set between calls (EPOLLONESHOT,
  // re-armed with EPOLL_CTL_MOD carrying the id of the call it wakes).
  int fd = -1;
  size_t heap_index = kNotInHeap;
  bool queued = false;  // in its pool's queue (waiting for a session)
  Op* prev = nullptr;
  Op* next = nullptr;
};

}  // namespace naarpc::codegen

#endif  // NAARPC_RUNTIME_HOST_CALL_ENGINE_OP_H_
