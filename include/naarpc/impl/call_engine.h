// CallEngine: the completion-driven engine behind a generated client's
// <Routine>Async methods. One thread per client (started on first use)
// drives every call in flight with epoll on the sessions' notification
// descriptors (ClientSession::StartCall / ContinueCall): no thread per
// call, and no thread blocked per call in flight. Only (re)connecting a
// session (connect + MRSP, rare) and routines with streams (their sources
// and sinks are user code that may block) run on a small AsyncRunner, as
// do calls on a transport without notification descriptors.
//
// Per call, in the common case, nothing but the transport's own system
// calls and at most one EPOLL_CTL_MOD: a session's descriptor stays in the
// engine's epoll set for the session's life (one-shot, re-armed for the call
// it wakes); a session whose call ended serves its pool's next call of the
// same round without a round trip through the pool; a call's first progress
// step waits until the round's other calls are posted (its answer may be in
// by then); callbacks submit without a lock or a wake-up. While calls are in
// flight and their answers came soon lately, the loop polls before it
// sleeps (at most 100 us, less the more calls share the wait), offering the
// CPU between polls and backing off once other threads want it.
#ifndef NAARPC_IMPL_CALL_ENGINE_H_
#define NAARPC_IMPL_CALL_ENGINE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "naarpc/client_session.h"
#include "naarpc/impl/codegen_support.h"
#include "naarpc/deadline.h"
#include "naarpc/status.h"

struct epoll_event;

namespace naarpc::codegen {

// One asynchronous call as the engine drives it. Generated code uses
// CallOp<> below; the methods run on engine threads, one at a time.
class AsyncCall {
 public:
  virtual ~AsyncCall() = default;
  // With exclusive use of a session: copies the inputs in and starts the
  // call (ClientSession::StartCall). An error ends the call with it (then
  // Finish is called with it).
  virtual Status Start(SessionPool::Lease lease) = 0;
  // The session of a started call.
  virtual ClientSession* session() = 0;
  // The call ended with `status`: copies the results out and returns the
  // status for the user.
  virtual Status Finish(Status status) = 0;
  // Gives the session back (to its pool, or closed if it failed).
  virtual void Release() = 0;
  // After Finish: hands the session over instead (the engine starts the
  // next call of the pool on it without a round trip through the pool);
  // an empty lease if the call has none. Release still follows.
  virtual SessionPool::Lease TakeLease() { return SessionPool::Lease(); }
};

// A generated zero-copy call object driven by the engine. CallT provides
// (privately, befriending CallOp): a constructor from a Lease, `lease_`,
// StartAsync(Deadline) (checks, then Lease::StartCall; its errors are
// final) and FinishAsync(Status) (Lease::EndCall, then the results).
template <typename CallT>
class CallOp final : public AsyncCall {
 public:
  using Hook = std::function<void(CallT&)>;
  CallOp(Deadline deadline, Hook copy_in, Hook copy_out)
      : deadline_(deadline), copy_in_(std::move(copy_in)), copy_out_(std::move(copy_out)) {}
  Status Start(SessionPool::Lease lease) override {
    call_.emplace(CallT(std::move(lease)));
    copy_in_(*call_);
    Status s = call_->StartAsync(deadline_);
    started_ = s.ok();
    return s;  // StartAsync reports its own errors in full
  }
  ClientSession* session() override { return call_ ? call_->lease_.session() : nullptr; }
  // The session of a generated call object (for the stubs' copy-in,
  // GatherInput).
  static ClientSession* SessionOf(const CallT& call) { return call.lease_.session(); }
  Status Finish(Status status) override {
    if (!started_) return status;
    Status s = call_->FinishAsync(std::move(status));
    if (s.ok()) copy_out_(*call_);
    return s;
  }
  void Release() override { call_.reset(); }
  SessionPool::Lease TakeLease() override {
    return call_ ? std::move(call_->lease_) : SessionPool::Lease();
  }

 private:
  const Deadline deadline_;
  Hook copy_in_, copy_out_;
  std::optional<CallT> call_;
  bool started_ = false;
};

class CallEngine {
 public:
  // `max_connecting` bounds the helper threads that (re)connect sessions
  // (and run streaming calls).
  explicit CallEngine(size_t max_connecting);
  // Calls still queued or in flight end with kCancelled (their sessions are
  // closed: the NAA's late answer can no longer land); waits for connects
  // and RunBlocking calls in progress (bounded by their deadlines and the
  // connect/MRSP timeouts).
  // REQUIRES: not called from a `done` callback.
  ~CallEngine();
  CallEngine(const CallEngine&) = delete;
  CallEngine& operator=(const CallEngine&) = delete;

  // Runs `call` on a session of `pool`: an idle one, a new one (up to the
  // pool's limit; connecting on a helper thread), or the next one returned
  // (calls queue in submission order). Then `done` gets the status, on an
  // engine thread; it must not block (it may submit more calls). The
  // deadline covers waiting for a session, connecting, and the call.
  void Submit(std::shared_ptr<SessionPool> pool, Deadline deadline,
              std::unique_ptr<AsyncCall> call, std::function<void(Status)> done);
  // Hands `status` to `done` on an engine thread (a call rejected before it
  // was submitted: `done` never runs on the caller's stack).
  void Reject(Status status, std::function<void(Status)> done);
  // Runs a blocking call on a helper thread (routines with streams).
  void RunBlocking(std::function<Status()> call, std::function<void(Status)> done);

 private:
  struct Op;
  struct Submission {
    std::shared_ptr<SessionPool> pool;
    Deadline deadline = Deadline::Infinite();
    std::unique_ptr<AsyncCall> call;
    std::function<void(Status)> done;
  };
  // A pool the engine takes sessions from, and its calls waiting for one
  // (FIFO, linked through Op).
  struct PoolQueue {
    std::shared_ptr<SessionPool> pool;
    Op* head = nullptr;
    Op* tail = nullptr;
    // Sessions of calls that just ended, kept for the pool's next calls
    // within this round of the loop (given back before it sleeps).
    std::vector<SessionPool::Lease> spare;
  };

  // Starts the engine thread on first use; false (start_error_) if the
  // descriptors it needs cannot be had.
  bool EnsureStartedLocked();
  bool OnEngineThread() const {
    return std::this_thread::get_id() == engine_thread_id_.load(std::memory_order_relaxed);
  }
  // Makes a sleeping engine thread look at what was handed to it: a system
  // call only while it sleeps (or is about to) in epoll_wait.
  void WakeRemote();
  // From a helper thread: appends to `inbox` under mu_ and wakes the engine.
  template <typename Inbox, typename... Args>
  void HandOver(Inbox& inbox, Args&&... args);
  void Loop();
  // epoll_wait, after a bounded spin while calls are in flight and their
  // events have recently come soon.
  int Wait(epoll_event* events, int max, int timeout_ms);
  std::chrono::nanoseconds SpinBudget() const;
  // Work handed over by other threads (or freed sessions for waiting calls).
  bool HandedWork() const;
  // What was handed to the engine (submissions, rejections, connects,
  // blocking calls' results, freed sessions) and deadlines passed; returns
  // the epoll_wait timeout.
  int RunQueued();
  // What other threads handed over, into the scratch lists (under mu_).
  void SwapInboxes();
  void TakeRemote();
  void Admit(Submission&& submission);
  void StartWaiting();
  // A session for the pool's next call: a spare one, or TryAcquire's.
  SessionPool::Lease TakeSession(PoolQueue& q, bool* may_open);
  void ReturnSpares();
  void StartOnSession(Op& op, SessionPool::Lease lease);
  void Connect(Op& op);
  void Progress(Op& op);
  // Progress for the calls started this round (to_arm_).
  void ArmStarted();
  void Complete(Op& op, Status status);
  void ExpireDue(Deadline::Clock::time_point now);
  void CancelAll();

  Op& NewOp();
  Op* FindOp(uint64_t id);
  void FreeOp(Op& op);
  uint32_t PoolIndex(const std::shared_ptr<SessionPool>& pool);
  void Enqueue(Op& op);
  void Unqueue(Op& op);
  void HeapPush(Op& op);
  void HeapRemove(Op& op);
  void HeapSiftUp(size_t i);
  void HeapSiftDown(size_t i);

  const size_t max_connecting_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;

  mutable std::mutex mu_;  // guards the fields up to thread_
  // Submitted from other threads (the engine thread's own go to local_).
  std::vector<Submission> incoming_;
  // From helper threads: a session for a connecting op; the status of an
  // op run blocking (no notification descriptor).
  std::vector<std::pair<uint64_t, Result<SessionPool::Lease>>> connected_;
  std::vector<std::pair<uint64_t, Status>> finished_;
  std::vector<std::pair<std::function<void(Status)>, Status>> rejected_;
  Status start_error_;
  std::thread thread_;

  std::atomic<bool> stop_{false};
  std::atomic<std::thread::id> engine_thread_id_{};
  // Something is in incoming_, connected_, finished_ or rejected_.
  std::atomic<bool> remote_pending_{false};
  // A session or slot of a pool was freed (its freed listener ran).
  std::atomic<bool> freed_{false};
  // The engine thread is in (or about to enter) epoll_wait; a wake-up is
  // written to wake_fd_ and not yet read.
  std::atomic<bool> polling_{false};
  std::atomic<bool> wake_pending_{false};

  // Engine thread only (and the destructor once it has joined it).
  std::vector<Submission> local_;  // submitted by callbacks on the engine thread
  std::vector<Submission> scratch_incoming_;
  std::vector<std::pair<uint64_t, Result<SessionPool::Lease>>> scratch_connected_;
  std::vector<std::pair<uint64_t, Status>> scratch_finished_;
  std::vector<std::pair<std::function<void(Status)>, Status>> scratch_rejected_;
  std::vector<uint64_t> to_arm_, scratch_to_arm_;  // ids of calls started, not yet progressed
  // Ops by slot (an op's id is its slot and the slot's generation); free
  // slots are reused, so a call allocates nothing here.
  std::vector<std::unique_ptr<Op>> slots_;
  std::vector<uint32_t> free_slots_;
  std::vector<PoolQueue> pools_;  // listened to (freed listener set)
  size_t waiting_ = 0;            // ops queued in pools_
  bool spares_ = false;           // some pools_ hold spare sessions
  size_t running_ = 0;            // ops running on a session (kRunning)
  // Average wait for the next event while calls were in flight.
  Deadline::Clock::duration wait_estimate_{};
  uint32_t spin_suppressed_ = 0;  // waits left that sleep without polling first
  // Deadlines of waiting and running ops (a connect is bounded by its own
  // deadline): a binary min-heap, each op knowing its place.
  std::vector<Op*> heap_;

  std::unique_ptr<AsyncRunner> helpers_;  // last: its tasks use the above
};

}  // namespace naarpc::codegen

#endif  // NAARPC_IMPL_CALL_ENGINE_H_
