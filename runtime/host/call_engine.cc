#include "naarpc/impl/call_engine.h"

#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <system_error>

#include "runtime/cycle_clock.h"
#include "runtime/host/call_engine_op.h"

namespace naarpc::codegen {

namespace {
constexpr uint64_t kWakeTag = 0;  // epoll data of the wake-up eventfd; op ids are never 0
// Rounds of callbacks submitting more calls that the loop runs before it
// looks at its descriptors again (without sleeping: epoll_wait(0)).
constexpr int kLocalRounds = 8;
// The longest the loop polls before it sleeps (Wait), and the longest wait
// it learns from.
constexpr std::chrono::nanoseconds kMaxSpin = std::chrono::microseconds(100);
constexpr Deadline::Clock::duration kMaxLearntWait = std::chrono::milliseconds(10);
// Polls between offers of the CPU (sched_yield) while polling; an offer
// taken for longer than kYieldTaken means the CPU is wanted: no polling for
// the next kWaitsWithoutSpin waits.
constexpr uint32_t kPollsPerYield = 4;
constexpr Deadline::Clock::duration kYieldTaken = std::chrono::microseconds(20);
constexpr uint32_t kWaitsWithoutSpin = 64;
}  // namespace

CallEngine::CallEngine(size_t max_connecting) : max_connecting_(std::max<size_t>(1, max_connecting)) {}

CallEngine::~CallEngine() {
  bool started;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true, std::memory_order_seq_cst);
    started = thread_.joinable();
  }
  if (started) {
    // Unconditionally: the loop sees stop_ at the top of its next round,
    // and this keeps its epoll_wait from sleeping until then.
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
    thread_.join();
  }
  // Connects and blocking calls end by their deadlines; their results are
  // then queued for the (stopped) loop and cancelled below.
  helpers_.reset();
  for (PoolQueue& q : pools_) q.pool->SetFreedListener(nullptr);
  CancelAll();
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

bool CallEngine::EnsureStartedLocked() {
  if (thread_.joinable()) return true;
  if (!helpers_) helpers_ = std::make_unique<AsyncRunner>(max_connecting_);
  if (epoll_fd_ < 0) epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (wake_fd_ < 0) wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeTag;
  if (epoll_fd_ < 0 || wake_fd_ < 0 ||
      (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev) != 0 && errno != EEXIST)) {
    start_error_ = ResourceExhaustedError(std::string("async call engine: ") + std::strerror(errno));
    return false;  // tried again with the next call
  }
  try {
    thread_ = std::thread([this] {
      engine_thread_id_.store(std::this_thread::get_id(), std::memory_order_relaxed);
      Loop();
    });
  } catch (const std::system_error& e) {  // no exception leaves the API
    start_error_ = ResourceExhaustedError(std::string("async call engine: cannot start its "
                                                      "thread: ") + e.what());
    return false;
  }
  pthread_setname_np(thread_.native_handle(), "naarpc-engine");  // before it first runs
  return true;
}

template <typename Inbox, typename... Args>
void CallEngine::HandOver(Inbox& inbox, Args&&... args) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox.emplace_back(std::forward<Args>(args)...);
    remote_pending_.store(true, std::memory_order_seq_cst);
  }
  WakeRemote();
}

void CallEngine::WakeRemote() {
  // The engine sets polling_ before its last look at remote_pending_ /
  // freed_ and sleeps only if both were clear; the caller set one of them
  // before this load (both seq_cst): either the engine sees that flag, or
  // this sees polling_ and writes.
  if (!polling_.load(std::memory_order_seq_cst)) return;
  if (wake_pending_.exchange(true, std::memory_order_acq_rel)) return;  // one is on its way
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

void CallEngine::Submit(std::shared_ptr<SessionPool> pool, Deadline deadline,
                        std::unique_ptr<AsyncCall> call, std::function<void(Status)> done) {
  if (OnEngineThread() && !stop_.load(std::memory_order_relaxed)) {
    // From a callback: the loop admits it before it next sleeps. No lock,
    // no wake-up.
    local_.push_back({std::move(pool), deadline, std::move(call), std::move(done)});
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Once stopping, the destructor cancels it (CancelAll).
    if (!stop_.load(std::memory_order_relaxed) && !EnsureStartedLocked()) {
      helpers_->Run([s = start_error_.WithContext(pool->routine())] { return s; },
                    std::move(done));
      return;
    }
    incoming_.push_back({std::move(pool), deadline, std::move(call), std::move(done)});
    remote_pending_.store(true, std::memory_order_seq_cst);
  }
  WakeRemote();
}

void CallEngine::Reject(Status status, std::function<void(Status)> done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stop_.load(std::memory_order_relaxed) && !EnsureStartedLocked()) {
      helpers_->Run([status] { return status; }, std::move(done));
      return;
    }
    rejected_.emplace_back(std::move(done), std::move(status));
    remote_pending_.store(true, std::memory_order_seq_cst);
  }
  WakeRemote();
}

void CallEngine::RunBlocking(std::function<Status()> call, std::function<void(Status)> done) {
  AsyncRunner* helpers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!helpers_) helpers_ = std::make_unique<AsyncRunner>(max_connecting_);
    helpers = helpers_.get();
  }
  helpers->Run(std::move(call), std::move(done));
}

void CallEngine::Loop() {
  std::array<epoll_event, 128> events;
  for (;;) {
    if (stop_.load(std::memory_order_acquire)) return;
    const int timeout_ms = RunQueued();
    const int n = Wait(events.data(), static_cast<int>(events.size()), timeout_ms);
    for (int i = 0; i < n; ++i) {
      const uint64_t tag = events[i].data.u64;
      if (tag == kWakeTag) {
        uint64_t count;
        (void)!::read(wake_fd_, &count, sizeof count);
        wake_pending_.store(false, std::memory_order_release);
        continue;
      }
      // The descriptor is disarmed (one-shot) until Progress re-arms it.
      Op* op = FindOp(tag);
      if (op != nullptr && op->state == Op::State::kRunning) Progress(*op);
    }
  }
}

bool CallEngine::HandedWork() const {
  return remote_pending_.load(std::memory_order_seq_cst) ||
         (waiting_ > 0 && freed_.load(std::memory_order_seq_cst));
}

int CallEngine::Wait(epoll_event* events, int max, int timeout_ms) {
  if (timeout_ms == 0) return ::epoll_wait(epoll_fd_, events, max, 0);
  // With calls in flight: how long the loop waits for its next event is
  // learnt (an average of the last waits). While that is short, the loop
  // first polls for a bounded time, offering the CPU to others between
  // polls: the answer is taken without the sleep and the wake-up (a
  // wake-up through the sessions' nested epoll descriptors lands on this
  // thread's CPU, and on an idle vCPU costs tens of microseconds, more than
  // such a round trip itself; a thread blocked in the socket is woken on
  // its peer's CPU instead).
  const bool learn = running_ > 0;
  const auto start = learn ? Deadline::Clock::now() : Deadline::Clock::time_point();
  int n = 0;
  std::chrono::nanoseconds spin = learn ? SpinBudget() : std::chrono::nanoseconds::zero();
  if (timeout_ms > 0) spin = std::min<std::chrono::nanoseconds>(spin, std::chrono::milliseconds(timeout_ms));
  if (spin_suppressed_ > 0) {
    --spin_suppressed_;
  } else if (spin > std::chrono::nanoseconds::zero()) {
    for (uint32_t i = 1;; ++i) {
      n = ::epoll_wait(epoll_fd_, events, max, 0);
      if (n != 0) break;
      if (HandedWork()) return 0;  // the loop takes it
      if (i % kPollsPerYield != 0) continue;
      const auto before = Deadline::Clock::now();
      if (before - start >= spin) break;
      sched_yield();
      if (Deadline::Clock::now() - before > kYieldTaken) {
        // Other threads wanted this CPU for a while: polling costs them (or
        // us) more than a wake-up. Sleep, and leave the next waits alone.
        spin_suppressed_ = kWaitsWithoutSpin;
        break;
      }
    }
  }
  if (n == 0) {
    polling_.store(true, std::memory_order_seq_cst);
    // The last look before sleeping (WakeRemote's other half).
    // Fails only with EINTR here (valid descriptors and buffer).
    n = ::epoll_wait(epoll_fd_, events, max, HandedWork() ? 0 : timeout_ms);
    polling_.store(false, std::memory_order_relaxed);
  }
  if (learn && n > 0) {
    const auto waited = std::min<Deadline::Clock::duration>(Deadline::Clock::now() - start,
                                                              kMaxLearntWait);
    wait_estimate_ += (waited - wait_estimate_) / 4;
  }
  return n;
}

std::chrono::nanoseconds CallEngine::SpinBudget() const {
  if (wait_estimate_ > kMaxSpin || running_ == 0) return std::chrono::nanoseconds::zero();
  // A wake-up saved is worth less the more calls share it (they end in
  // batches then, and the NAA is what they wait for).
  return std::min<std::chrono::nanoseconds>(kMaxSpin, 2 * wait_estimate_ + std::chrono::microseconds(5)) /
         static_cast<int64_t>(running_);
}

int CallEngine::RunQueued() {
  for (int round = 1;; ++round) {
    if (remote_pending_.load(std::memory_order_acquire)) TakeRemote();
    if (!local_.empty()) {  // submitted by callbacks (which may submit more)
      scratch_incoming_.swap(local_);
      for (Submission& s : scratch_incoming_) Admit(std::move(s));
      scratch_incoming_.clear();
    }
    if (waiting_ > 0 && (spares_ || freed_.exchange(false, std::memory_order_acq_rel))) {
      StartWaiting();
    }
    if (!to_arm_.empty()) ArmStarted();
    int timeout_ms = -1;
    if (!heap_.empty()) {
      const auto now = Deadline::Clock::now();
      ExpireDue(now);
      if (!heap_.empty()) {
        const auto left = heap_.front()->deadline.when() - now;
        timeout_ms = left <= Deadline::Clock::duration::zero()
                         ? 0
                         : static_cast<int>(std::min<int64_t>(
                               std::chrono::ceil<std::chrono::milliseconds>(left).count(),
                               1 << 30));
      }
    }
    // Calls that ended at once submitted more: admit them too, but look at
    // the descriptors (without sleeping) every few rounds.
    if ((local_.empty() && to_arm_.empty()) || round >= kLocalRounds) {
      if (!local_.empty() || !to_arm_.empty()) timeout_ms = 0;
      // Sessions not taken by this round's calls go back to their pools
      // (to other callers) before the loop waits.
      if (spares_) ReturnSpares();
      return timeout_ms;
    }
  }
}

void CallEngine::ReturnSpares() {
  spares_ = false;
  for (PoolQueue& q : pools_) q.spare.clear();  // each lease returns its session
}

SessionPool::Lease CallEngine::TakeSession(PoolQueue& q, bool* may_open) {
  *may_open = false;
  if (!q.spare.empty()) {
    SessionPool::Lease lease = std::move(q.spare.back());
    q.spare.pop_back();
    return lease;
  }
  return q.pool->TryAcquire(may_open);
}

void CallEngine::SwapInboxes() {
  std::lock_guard<std::mutex> lock(mu_);
  remote_pending_.store(false, std::memory_order_relaxed);
  scratch_incoming_.swap(incoming_);
  scratch_connected_.swap(connected_);
  scratch_finished_.swap(finished_);
  scratch_rejected_.swap(rejected_);
}

void CallEngine::TakeRemote() {
  SwapInboxes();
  for (auto& [done, status] : scratch_rejected_) done(std::move(status));
  scratch_rejected_.clear();
  for (Submission& s : scratch_incoming_) Admit(std::move(s));
  scratch_incoming_.clear();
  for (auto& [id, lease] : scratch_connected_) {
    Op* op = FindOp(id);
    if (op == nullptr || op->state != Op::State::kConnecting) continue;  // lease back to its pool
    if (!lease.ok()) {
      Complete(*op, lease.status());
      continue;
    }
    if (!op->deadline.infinite()) HeapPush(*op);
    StartOnSession(*op, std::move(lease).value());
  }
  scratch_connected_.clear();  // sessions of ops gone meanwhile go back here
  for (auto& [id, status] : scratch_finished_) {
    if (Op* op = FindOp(id)) Complete(*op, std::move(status));
  }
  scratch_finished_.clear();
}

CallEngine::Op& CallEngine::NewOp() {
  uint32_t index;
  if (!free_slots_.empty()) {
    index = free_slots_.back();
    free_slots_.pop_back();
  } else {
    index = static_cast<uint32_t>(slots_.size());
    slots_.push_back(std::make_unique<Op>());
  }
  Op& op = *slots_[index];
  if (++op.generation == 0) op.generation = 1;
  op.id = (uint64_t{op.generation} << 32) | index;
  return op;
}

CallEngine::Op* CallEngine::FindOp(uint64_t id) {
  const uint32_t index = static_cast<uint32_t>(id);
  if (index >= slots_.size()) return nullptr;
  Op* op = slots_[index].get();
  return op->id == id && op->state != Op::State::kFree ? op : nullptr;
}

void CallEngine::FreeOp(Op& op) {
  if (op.state == Op::State::kRunning) --running_;
  op.state = Op::State::kFree;
  op.pool.reset();
  op.call.reset();
  op.done = nullptr;
  op.fd = -1;
  free_slots_.push_back(static_cast<uint32_t>(op.id));
}

uint32_t CallEngine::PoolIndex(const std::shared_ptr<SessionPool>& pool) {
  for (size_t i = 0; i < pools_.size(); ++i) {
    if (pools_[i].pool == pool) return static_cast<uint32_t>(i);
  }
  pools_.push_back({pool, nullptr, nullptr, {}});
  pool->SetFreedListener([this] {
    freed_.store(true, std::memory_order_seq_cst);
    if (!OnEngineThread()) WakeRemote();  // the engine thread looks before it sleeps
  });
  return static_cast<uint32_t>(pools_.size() - 1);
}

void CallEngine::Admit(Submission&& s) {
  Op& op = NewOp();
  op.state = Op::State::kWaiting;
  op.pool_index = PoolIndex(s.pool);
  op.pool = std::move(s.pool);
  op.deadline = s.deadline;
  op.admitted_ns = internal::CycleClock::NowNanos();
  op.call = std::move(s.call);
  op.done = std::move(s.done);
  if (!op.deadline.infinite()) HeapPush(op);
  if (pools_[op.pool_index].head == nullptr) {
    // Nobody queued before it: a session at once if one is free.
    bool may_open = false;
    SessionPool::Lease lease = TakeSession(pools_[op.pool_index], &may_open);
    if (lease) {
      StartOnSession(op, std::move(lease));
      return;
    }
    if (may_open) {
      Connect(op);
      return;
    }
  }
  Enqueue(op);  // waits for a freed session
}

void CallEngine::Enqueue(Op& op) {
  PoolQueue& q = pools_[op.pool_index];
  op.prev = q.tail;
  op.next = nullptr;
  (q.tail != nullptr ? q.tail->next : q.head) = &op;
  q.tail = &op;
  op.queued = true;
  ++waiting_;
}

void CallEngine::Unqueue(Op& op) {
  PoolQueue& q = pools_[op.pool_index];
  (op.prev != nullptr ? op.prev->next : q.head) = op.next;
  (op.next != nullptr ? op.next->prev : q.tail) = op.prev;
  op.prev = op.next = nullptr;
  op.queued = false;
  --waiting_;
}

void CallEngine::StartWaiting() {
  for (PoolQueue& q : pools_) {
    while (q.head != nullptr) {
      Op& op = *q.head;
      bool may_open = false;
      SessionPool::Lease lease = TakeSession(q, &may_open);
      if (!lease && !may_open) break;  // all in use: waits for a freed one
      Unqueue(op);
      if (lease) {
        StartOnSession(op, std::move(lease));
      } else {
        Connect(op);
      }
    }
  }
}

void CallEngine::Connect(Op& op) {
  op.state = Op::State::kConnecting;
  HeapRemove(op);  // the connect is bounded by the deadline itself
  helpers_->Run(
      [this, id = op.id, pool = op.pool, deadline = op.deadline] {
        HandOver(connected_, id, pool->OpenReserved(deadline));
        return Status::Ok();
      },
      [](Status) {});
}

void CallEngine::StartOnSession(Op& op, SessionPool::Lease lease) {
  Status s = op.call->Start(std::move(lease));
  if (!s.ok()) {
    Complete(op, std::move(s));
    return;
  }
  ClientSession* session = op.call->session();
  const int fd = session->notify_fd();
  if (fd < 0) {
    // No descriptor to watch: the rest of the call blocks a helper thread.
    op.state = Op::State::kBlocking;
    HeapRemove(op);
    helpers_->Run(
        [this, id = op.id, session] {
          HandOver(finished_, id, session->FinishCall());
          return Status::Ok();
        },
        [](Status) {});
    return;
  }
  op.state = Op::State::kRunning;
  ++running_;
  op.fd = fd;
  // Its first progress step (what completed already; arming the
  // notification) comes once this round has started its other calls: by
  // then an answer may be in, and it is taken without arming or waiting.
  to_arm_.push_back(op.id);
}

void CallEngine::ArmStarted() {
  scratch_to_arm_.swap(to_arm_);
  for (uint64_t id : scratch_to_arm_) {
    Op* op = FindOp(id);
    if (op != nullptr && op->state == Op::State::kRunning) Progress(*op);
  }
  scratch_to_arm_.clear();
}

void CallEngine::Progress(Op& op) {
  std::optional<Status> result = op.call->session()->ContinueCall();
  if (result) {
    Complete(op, std::move(*result));
    return;
  }
  // In flight: WaitNotify(now) has just said the descriptor waits for the
  // next step. (Re)arm its one-shot registration for this call; the first
  // call on a session (or a descriptor number reused by a new session)
  // registers it.
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLONESHOT;
  ev.data.u64 = op.id;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, op.fd, &ev) == 0) return;
  int err = errno;
  if (err == ENOENT) {
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, op.fd, &ev) == 0) return;
    err = errno;
  }
  op.call->session()->AbandonCall();
  std::string what = op.pool->routine() + ": async call engine: watching the session's "
                     "notification descriptor (epoll_ctl): " + std::strerror(err);
  Complete(op, err == ENOMEM || err == ENOSPC ? ResourceExhaustedError(std::move(what))
                                              : InternalError(std::move(what)));
}

void CallEngine::Complete(Op& op, Status status) {
  HeapRemove(op);
  if (op.queued) Unqueue(op);
  Status result = op.call->Finish(std::move(status));
  if (op.state == Op::State::kRunning && !stop_.load(std::memory_order_relaxed)) {
    // A session that served its call well is kept for the pool's next call
    // of this round (callbacks usually submit one): no round trip through
    // the pool (its lock, its idle check's progress step). Not while a
    // caller waits in the pool for it.
    SessionPool::Lease lease = op.call->TakeLease();
    if (lease && lease.session()->state() != CommState::kError && !op.pool->has_waiters()) {
      pools_[op.pool_index].spare.push_back(std::move(lease));
      spares_ = true;
    }
  }
  op.call->Release();  // may free a session of the pool: handled next round
  op.call.reset();     // the arguments it captured go before `done` runs
  std::function<void(Status)> done = std::move(op.done);
  FreeOp(op);
  done(std::move(result));
}

void CallEngine::CancelAll() {
  // The loop has stopped and the helpers are joined: this thread is alone,
  // but `done` callbacks run here may still submit (they are cancelled too).
  for (;;) {
    SwapInboxes();
    for (Submission& s : local_) scratch_incoming_.push_back(std::move(s));
    local_.clear();
    scratch_connected_.clear();  // sessions back to their pools, unused
    const bool live = std::any_of(slots_.begin(), slots_.end(), [](const auto& op) {
      return op->state != Op::State::kFree;
    });
    if (!live && scratch_incoming_.empty() && scratch_finished_.empty() &&
        scratch_rejected_.empty()) {
      return;
    }
    for (auto& [done, status] : scratch_rejected_) done(std::move(status));
    scratch_rejected_.clear();
    for (auto& [id, status] : scratch_finished_) {
      if (Op* op = FindOp(id)) Complete(*op, std::move(status));
    }
    scratch_finished_.clear();
    std::vector<Submission> incoming;
    incoming.swap(scratch_incoming_);
    for (Submission& s : incoming) {
      const std::string routine = s.pool->routine();
      Status result = s.call->Finish(
          CancelledError(routine + ": the client was destroyed before the call ended"));
      s.call->Release();
      s.call.reset();
      s.done(std::move(result));
    }
    for (auto& slot : slots_) {
      Op& op = *slot;
      if (op.state == Op::State::kFree) continue;
      if (op.state == Op::State::kRunning) op.call->session()->AbandonCall();
      Complete(op, CancelledError(op.pool->routine() +
                                  ": the client was destroyed before the call ended"));
    }
  }
}

}  // namespace naarpc::codegen
