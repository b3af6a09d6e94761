// CallEngine: the completion-driven engine behind a generated client's
// <Routine>Async methods. One thread per client (started on first use)
// drives every call in flight with epoll on the sessions' notification
// descriptors (ClientSession::StartCall / ContinueCall): no thread per
// call, and no thread blocked per call in flight. Only (re)connecting a
// session (connect + MRSP, rare) and routines with streams (their sources
// and sinks are user code that may block) run on a small AsyncRunner, as
// do calls on a transport without notification descriptors.
#ifndef NAARPC_CALL_ENGINE_H_
#define NAARPC_CALL_ENGINE_H_

#include <atomic>
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
#include "naarpc/codegen_support.h"
#include "naarpc/deadline.h"
#include "naarpc/status.h"

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
  Status Finish(Status status) override {
    if (!started_) return status;
    Status s = call_->FinishAsync(std::move(status));
    if (s.ok()) copy_out_(*call_);
    return s;
  }
  void Release() override { call_.reset(); }

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
  // Starts the engine thread on first use; false (start_error_) if the
  // descriptors it needs cannot be had.
  bool EnsureStartedLocked();
  void Loop();
  void Wake();
  void TakeIncoming();
  void StartWaiting();
  void StartOnSession(Op& op, SessionPool::Lease lease);
  void Connect(Op& op);
  void Progress(Op& op);
  void Complete(uint64_t id, Status status);
  void ExpireDue();
  void TakeResults();
  void CancelAll();

  const size_t max_connecting_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;

  mutable std::mutex mu_;  // guards the fields up to thread_
  bool stop_ = false;
  std::vector<std::unique_ptr<Op>> incoming_;          // submitted
  // From helper threads: a session for a connecting op; the status of an
  // op run blocking (no notification descriptor).
  std::vector<std::pair<uint64_t, Result<SessionPool::Lease>>> connected_;
  std::vector<std::pair<uint64_t, Status>> finished_;
  std::vector<std::pair<std::function<void(Status)>, Status>> rejected_;
  std::vector<std::shared_ptr<SessionPool>> pools_;  // listened to
  Status start_error_;
  std::thread thread_;
  std::atomic<std::thread::id> engine_thread_id_{};

  // Engine thread only.
  bool woken_locally_ = false;  // Wake() ran on the engine thread
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, std::unique_ptr<Op>> ops_;  // waiting or running
  std::map<SessionPool*, std::deque<uint64_t>> waiting_;    // per pool, FIFO
  // Of waiting and running ops (a connect is bounded by its own deadline).
  std::multimap<Deadline::Clock::time_point, uint64_t> deadlines_;

  std::unique_ptr<AsyncRunner> helpers_;  // last: its tasks use the above
};

}  // namespace naarpc::codegen

#endif  // NAARPC_CALL_ENGINE_H_
