// SessionPool (a client's sessions to one NAA, leased per call) and
// AsyncRunner, with the status helpers generated clients use
// (naarpc/impl/codegen_support.h). The host room's client channel.
#include "naarpc/impl/codegen_support.h"

#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <utility>

#include "runtime/cycle_clock.h"

namespace naarpc::codegen {

SessionPool::SessionPool(Transport& transport, std::string host, uint16_t port,
                         std::string routine, uint8_t function_code,
                         std::vector<RegionSpec> regions, const StubOptions& options)
    : transport_(transport),
      host_(std::move(host)),
      port_(port),
      routine_(std::move(routine)),
      function_code_(function_code),
      regions_(std::move(regions)),
      options_(options),
      peer_(HostPort(host_, port_)),
      stats_(options.stats != nullptr ? &options.stats->Get(CallSide::kHost, routine_, peer_)
                                      : nullptr) {
  for (const RegionSpec& r : regions_) {
    if (r.stream.chunk_size != 0) {  // a stream's ring: its chunks count (EndObserved)
      has_streams_ = true;
      continue;
    }
    if (r.direction == Direction::kIn || r.direction == Direction::kInOut) input_bytes_ += r.size;
    if (r.direction == Direction::kOut || r.direction == Direction::kInOut) output_bytes_ += r.size;
  }
}

SessionPool::~SessionPool() {
  for (auto& s : idle_) s->Close().IgnoreError();
}

size_t SessionPool::open_sessions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return idle_.size() + in_use_;
}

Result<SessionPool::Lease> SessionPool::Acquire(Deadline deadline) {
  bool may_open = false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto ready = [&] { return !idle_.empty() || in_use_ < max_sessions(); };
    // Counted while waiting: an event loop holding sessions between its
    // calls gives them back at once then (CallEngine).
    struct Waiting {
      std::atomic<size_t>& n;
      explicit Waiting(std::atomic<size_t>& n) : n(n) { n.fetch_add(1, std::memory_order_relaxed); }
      ~Waiting() { n.fetch_sub(1, std::memory_order_relaxed); }
    };
    std::optional<Waiting> waiting;
    int64_t started_ns = 0;  // of the wait (the call failed if it times out)
    if (!ready()) {
      waiting.emplace(waiters_);
      started_ns = internal::CycleClock::NowNanos();
    }
    if (deadline.infinite()) {
      cv_.wait(lock, ready);
    } else if (!cv_.wait_until(lock, deadline.when(), ready)) {
      Status none = NoFreeSessionError(routine_, max_sessions());
      lock.unlock();
      ObserveUnstarted(none, started_ns, deadline);
      return none;
    }
    if (Lease idle = TakeLocked(&may_open)) return idle;
  }
  return OpenReserved(deadline);  // may_open: ready() held
}

SessionPool::Lease SessionPool::TryAcquire(bool* may_open) {
  std::lock_guard<std::mutex> lock(mu_);
  return TakeLocked(may_open);
}

SessionPool::Lease SessionPool::TakeLocked(bool* may_open) {
  *may_open = false;
  while (!idle_.empty()) {
    auto s = std::move(idle_.back());
    idle_.pop_back();
    // A session the NAA closed while it was idle (e.g. reclaimed for
    // another peer) is dropped here, so the call opens a fresh one.
    if (s->PeerGone()) {
      s->Close().IgnoreError();
      continue;
    }
    ++in_use_;
    return Lease(shared_from_this(), std::move(s));
  }
  if (in_use_ < max_sessions()) {
    ++in_use_;
    *may_open = true;
  }
  return Lease();
}

Result<SessionPool::Lease> SessionPool::OpenReserved(Deadline deadline) {
  const int64_t started_ns = internal::CycleClock::NowNanos();
  // The call's deadline covers (re)connecting and the MRSP too.
  auto opened = ClientSession::Open(transport_, host_, port_, regions_, options_.session, deadline);
  if (!opened.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      --in_use_;
      FreedLocked();
    }
    Status failed =
        opened.status().WithContext(routine_ + ": connecting to " + HostPort(host_, port_));
    ObserveUnstarted(failed, started_ns, deadline);
    return failed;
  }
  return Lease(shared_from_this(), std::move(opened).value());
}

void SessionPool::ObserveUnstarted(const Status& status, int64_t started_ns, Deadline deadline) {
  const InterceptorChain::List* list =
      options_.interceptors != nullptr ? options_.interceptors->current() : nullptr;
  if (stats_ == nullptr && list == nullptr) return;
  const std::chrono::nanoseconds duration(internal::CycleClock::NowNanos() - started_ns);
  if (stats_ != nullptr) stats_->RecordUnstarted(status, static_cast<uint64_t>(duration.count()));
  if (list == nullptr) return;
  CallInfo info{.side = CallSide::kHost,
                .routine = routine_,
                .peer = peer_,
                .function_code = function_code_,
                .bytes_sent = 0,
                .bytes_received = 0,
                .deadline = deadline};
  size_t accepted = 0;
  // A rejection changes nothing: the call has failed already (and RunStart
  // ended the interceptors that had accepted it).
  if (!InterceptorChain::RunStart(list, info, &accepted).ok()) return;
  info.duration = duration;
  InterceptorChain::RunEnd(list, accepted, info, status);
}

void SessionPool::SetFreedListener(std::function<void()> listener) {
  std::lock_guard<std::mutex> lock(mu_);
  freed_listener_ = std::move(listener);
}

void SessionPool::FreedLocked() {
  cv_.notify_one();
  if (freed_listener_) freed_listener_();
}

void SessionPool::Return(std::unique_ptr<ClientSession> s) {
  std::lock_guard<std::mutex> lock(mu_);
  --in_use_;
  if (s != nullptr) idle_.push_back(std::move(s));
  FreedLocked();
}

SessionPool::Lease::Lease(Lease&& other) noexcept
    : pool_(std::move(other.pool_)), session_(std::move(other.session_)) {
  // (Moved between calls only: a call in progress stays with its lease.)
}

SessionPool::Lease& SessionPool::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    Release();
    pool_ = std::move(other.pool_);
    session_ = std::move(other.session_);
  }
  return *this;
}

SessionPool::Lease::~Lease() { Release(); }

void SessionPool::Lease::Release() {
  if (pool_ == nullptr) return;
  // A call begun and never ended (its owner went away mid-call).
  if (observed_) EndObserved(Status(StatusCode::kCancelled, "call abandoned"));
  if (session_ != nullptr && session_->state() == CommState::kError) {
    session_->Close().IgnoreError();
    session_.reset();
  }
  if (session_ != nullptr) session_->DropStagedInputs();  // staged, never started
  std::shared_ptr<SessionPool> pool = std::move(pool_);
  pool->Return(std::move(session_));
}

Status SessionPool::Lease::BeginObserved(uint8_t function_code, Deadline deadline,
                                         const CallOptions& options) {
  SessionPool& pool = *pool_;
  const InterceptorChain::List* list =
      pool.options_.interceptors != nullptr ? pool.options_.interceptors->current() : nullptr;
  rejected_ = false;
  if (pool.stats_ == nullptr && list == nullptr) return Status::Ok();  // nothing to observe
  observed_ = true;
  rejected_ = false;
  function_code_ = function_code;
  interceptors_ = list;
  deadline_ = deadline;
  accepted_ = 0;
  bytes_sent_ = pool.input_bytes_;
  if (!options.send_lengths.empty()) {
    bytes_sent_ = 0;
    for (size_t i = 0; i < pool.regions_.size() && i < options.send_lengths.size(); ++i) {
      const RegionSpec& r = pool.regions_[i];
      if (r.stream.chunk_size != 0) continue;
      if (r.direction != Direction::kIn && r.direction != Direction::kInOut) continue;
      bytes_sent_ += options.send_lengths[i] == 0 ? r.size : std::min(options.send_lengths[i], r.size);
    }
  }
  if (pool.stats_ != nullptr) pool.stats_->RecordStart();
  started_ns_ = internal::CycleClock::NowNanos();
  if (list == nullptr) return Status::Ok();
  CallInfo info{.side = CallSide::kHost,
                .routine = pool.routine_,
                .peer = pool.peer_,
                .function_code = function_code,
                .bytes_sent = bytes_sent_,
                .bytes_received = 0,
                .deadline = deadline};
  Status s = InterceptorChain::RunStart(list, info, &accepted_);
  if (!s.ok()) {
    interceptors_ = nullptr;  // RunStart has ended the accepted ones
    EndObserved(s);
    rejected_ = true;
  }
  return s;
}

void SessionPool::Lease::EndObserved(const Status& status) {
  if (!observed_) return;
  observed_ = false;
  SessionPool& pool = *pool_;
  const std::chrono::nanoseconds duration(internal::CycleClock::NowNanos() - started_ns_);
  uint64_t received = status.ok() ? pool.output_bytes_ : 0;
  if (pool.has_streams_ && session_ != nullptr) {  // what its streams moved, however far
    const ClientSession::StreamBytes streamed = session_->last_stream_bytes();
    bytes_sent_ += streamed.sent;
    received += streamed.received;
  }
  if (pool.stats_ != nullptr) {
    pool.stats_->RecordEnd(
        status, bytes_sent_, received,
        static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(duration).count()));
  }
  if (interceptors_ != nullptr) {
    CallInfo info{.side = CallSide::kHost,
                  .routine = pool.routine_,
                  .peer = pool.peer_,
                  .function_code = function_code_,
                  .bytes_sent = bytes_sent_,
                  .bytes_received = received,
                  .deadline = deadline_,
                  .duration = std::chrono::duration_cast<std::chrono::nanoseconds>(duration)};
    InterceptorChain::RunEnd(interceptors_, accepted_, info, status);
    interceptors_ = nullptr;
  }
}

Status SessionPool::Lease::Call(uint8_t function_code, Deadline deadline,
                                const CallOptions& options) {
  Status begun = BeginObserved(function_code, deadline, options);
  if (!begun.ok()) return begun;
  return EndCall(session_->Call(function_code, deadline, options));
}

Status SessionPool::Lease::StartCall(uint8_t function_code, Deadline deadline,
                                     const CallOptions& options) {
  Status begun = BeginObserved(function_code, deadline, options);
  if (!begun.ok()) return begun;
  Status s = session_->StartCall(function_code, deadline, options);
  return s.ok() ? s : EndCall(std::move(s));
}

Status SessionPool::Lease::EndCall(Status s) {
  if (rejected_) {
    // Rejected by an interceptor before anything was sent: the session is
    // as good as before (and the rejection already recorded), less the
    // inputs staged for the call.
    rejected_ = false;
    if (session_ != nullptr) session_->DropStagedInputs();
    return s;
  }
  EndObserved(s);
  if (session_ != nullptr && !s.ok() && s.code() != StatusCode::kNaaError &&
      s.code() != StatusCode::kInvalidArgument) {
    // The session is unusable (ERROR); drop it now.
    session_->Close().IgnoreError();
    session_.reset();
  }
  return s;
}

AsyncRunner::AsyncRunner(size_t max_threads, std::chrono::milliseconds idle_timeout)
    : max_threads_(std::max<size_t>(1, max_threads)), idle_timeout_(idle_timeout) {}

AsyncRunner::~AsyncRunner() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    threads.swap(threads_);
    for (auto& t : exited_) threads.push_back(std::move(t));
    exited_.clear();
  }
  cv_.notify_all();
  for (auto& t : threads) t.join();  // they drain the queue first
}

void AsyncRunner::Run(std::function<Status()> call, std::function<void(Status)> done) {
  std::vector<std::thread> exited;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back([call = std::move(call), done = std::move(done)] { done(call()); });
    // A thread per queued call (calls block while in flight), up to the limit.
    if (queue_.size() > idle_ && threads_.size() < max_threads_) {
      threads_.emplace_back([this] { Loop(); });
      // Named here, not by the thread itself: until it first runs it would
      // carry its creator's name (often "naarpc-engine").
      pthread_setname_np(threads_.back().native_handle(), "naarpc-helper");
    }
    exited.swap(exited_);
  }
  cv_.notify_one();
  for (auto& t : exited) t.join();  // already past their last use of *this
}

std::future<Status> AsyncRunner::Run(std::function<Status()> call) {
  auto promise = std::make_shared<std::promise<Status>>();
  std::future<Status> future = promise->get_future();
  Run(std::move(call), [promise](Status s) { promise->set_value(std::move(s)); });
  return future;
}

size_t AsyncRunner::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return threads_.size();
}

size_t AsyncRunner::idle_threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return idle_;
}

void AsyncRunner::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (queue_.empty()) {
      if (stop_) return;
      ++idle_;
      const bool woken =
          cv_.wait_for(lock, idle_timeout_, [this] { return stop_ || !queue_.empty(); });
      --idle_;
      if (!woken) {
        // Idle too long: exit, leaving this thread's handle to be joined, and
        // join those left earlier (so at most one waits). Never reached once
        // stop_ is set: the destructor owns every handle then.
        std::vector<std::thread> earlier;
        earlier.swap(exited_);
        auto self = std::find_if(threads_.begin(), threads_.end(), [](const std::thread& t) {
          return t.get_id() == std::this_thread::get_id();
        });
        exited_.push_back(std::move(*self));
        threads_.erase(self);
        lock.unlock();
        for (auto& t : earlier) t.join();
        return;
      }
      continue;
    }
    std::function<void()> job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    job();
    job = nullptr;
    lock.lock();
  }
}

std::string_view StandardStatusName(uint8_t status) {
  switch (status) {
    case kNaaStatusSocketUnavailable: return "SOCKET_UNAVAILABLE";
    case kNaaStatusKernelTimeout: return "KERNEL_TIMEOUT";
    case kNaaStatusUnknownFunction: return "UNKNOWN_FUNCTION";
    case kNaaStatusBadRegionLayout: return "BAD_REGION_LAYOUT";
    case kNaaStatusKernelFailed: return "KERNEL_FAILED";
    default: return "";
  }
}

namespace {
constexpr std::string_view kNoFreeSession = ": no free session before the deadline (all ";
}  // namespace

Status NoFreeSessionError(std::string_view routine, size_t sessions) {
  return DeadlineExceededError(std::string(routine) + std::string(kNoFreeSession) +
                               std::to_string(sessions) + " in use)");
}

bool IsNoFreeSession(const Status& status) {
  return status.code() == StatusCode::kDeadlineExceeded &&
         status.message().find(kNoFreeSession) != std::string::npos;
}

Status AnnotateCallStatus(const Status& status, std::string_view routine,
                          std::string_view error_name) {
  if (status.ok()) return status;
  if (status.code() == StatusCode::kNaaError && status.wire_code().has_value()) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02x", unsigned{*status.wire_code()});
    std::string msg = std::string(routine) + ": NAA status " + hex;
    if (!error_name.empty()) msg += " " + std::string(error_name);
    return Status(StatusCode::kNaaError, msg).set_wire_code(*status.wire_code());
  }
  return status.WithContext(routine);
}

}  // namespace naarpc::codegen
