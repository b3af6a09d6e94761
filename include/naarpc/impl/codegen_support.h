// Support code shared by every file the naarpc code generator emits
// (codegen/naarpc_gen.py). Users normally only touch StubOptions,
// VarSpan (kernels with variable-length outputs) and CompositeHandler.
#ifndef NAARPC_IMPL_CODEGEN_SUPPORT_H_
#define NAARPC_IMPL_CODEGEN_SUPPORT_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <future>
#include <thread>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "naarpc/client_session.h"
#include "naarpc/impl/codegen_stream.h"
#include "naarpc/call_stats.h"
#include "naarpc/deadline.h"
#include "naarpc/interceptor.h"
#include "naarpc/naa_server.h"
#include "naarpc/protocol.h"
#include "naarpc/region_layout.h"
#include "naarpc/stats_registry.h"
#include "naarpc/status.h"
#include "naarpc/strided_view.h"
#include "naarpc/transport.h"

namespace naarpc::codegen {

// Typed view of `count` elements of T at `offset` bytes into a region.
// Empty if the region is too small or misaligned for T.
template <typename T>
std::span<T> TypedView(std::span<std::byte> region, size_t offset, size_t count) {
  if (offset + count * sizeof(T) > region.size()) return {};
  std::byte* p = region.data() + offset;
  if (reinterpret_cast<uintptr_t>(p) % alignof(T) != 0) return {};
  return std::span<T>(reinterpret_cast<T*>(p), count);
}

// Kernel-side view of a variable-length output (or inout) parameter: the
// whole capacity plus the number of valid elements the kernel reports.
// Indexing and iteration cover the valid elements (data()), like a span:
//   for (size_t i = 0; i < y.size(); ++i) y[i] = alpha * x[i] + y[i];
//   for (float& v : y) v *= 2;
// For an `out` parameter size() starts at 0: resize() before writing.
template <typename T>
class VarSpan {
 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;
  using size_type = size_t;
  using reference = T&;
  using iterator = typename std::span<T>::iterator;

  VarSpan(std::span<T> capacity, size_t size) : capacity_(capacity), size_(size) {}
  std::span<T> capacity() const { return capacity_; }
  size_t max_size() const { return capacity_.size(); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // The valid elements.
  std::span<T> data() const { return capacity_.first(size_); }
  // REQUIRES: i < size(). The view is shallow, as std::span: a const VarSpan
  // still gives mutable elements (unless T is const).
  T& operator[](size_t i) const { return data()[i]; }
  iterator begin() const { return data().begin(); }
  iterator end() const { return data().end(); }
  // Sets the number of valid elements; false (unchanged) if n > max_size().
  // Such a request fails the call (status 0x05, the request named in the
  // NAA's log), whatever the kernel returns: output is never truncated
  // silently.
  bool resize(size_t n) {
    if (n > capacity_.size()) {
      if (n > overflow_request_) overflow_request_ = n;
      return false;
    }
    size_ = n;
    return true;
  }
  // The largest size asked for beyond max_size(); 0 if none.
  size_t overflow_request() const { return overflow_request_; }

 private:
  std::span<T> capacity_;
  size_t size_;
  size_t overflow_request_ = 0;
};

template <typename CallT>
class CallOp;  // naarpc/impl/call_engine.h

// A generated stub's copy-in of an input with a layout (docs/protocol.md
// 16.2): staged to be sent zero-copy from the caller's memory, by gather
// lists, if the session can (ClientSession::StageGatherInput: the memory is
// registered in ClientOptions::user_memory and the runs are long enough);
// else packed into the parameter's registered region `packed`.
// REQUIRES: view.Check() was OK.
template <typename CallT, typename T>
void GatherInput(const CallT& call, size_t index, const StridedView<T>& view,
                 std::span<std::remove_const_t<T>> packed) {
  ClientSession* session = CallOp<CallT>::SessionOf(call);
  if (session != nullptr) {
    std::array<const std::byte*, kMaxLayoutArrays> bases{};
    const size_t n = std::min(view.arrays(), kMaxLayoutArrays);
    for (size_t i = 0; i < n; ++i) bases[i] = reinterpret_cast<const std::byte*>(view.array(i).data());
    if (session->StageGatherInput(index, view.layout(), sizeof(T),
                                  std::span<const std::byte* const>(bases.data(), n))) {
      return;
    }
  }
  view.GatherTo(packed);
}

// Options of a generated client (XxxClient).
struct StubOptions {
  ClientOptions session;  // dialect, connect/MRSP timeouts
  // Sessions (connections) per routine: the number of calls of one routine
  // that can be in flight at once; more callers wait for a free session.
  size_t max_sessions_per_routine = 4;
  // Per-routine statistics (naarpc/call_stats.h), side "host", peer the
  // NAA's host:port; nullptr: none kept.
  std::shared_ptr<StatsRegistry> stats = StatsRegistry::Default();
  // Interceptors of every call (naarpc/interceptor.h); nullptr or empty:
  // none, and no cost.
  std::shared_ptr<InterceptorChain> interceptors;
};

// The options of a routine declared `memory_windows: required` (docs/idl.md):
// its sessions use per-call memory windows unless the user set
// ClientOptions::memory_windows (true or false), which wins.
inline StubOptions WithMemoryWindows(StubOptions options) {
  if (!options.session.memory_windows.has_value()) options.session.memory_windows = true;
  return options;
}

// The sessions of one routine: opened lazily, reused, a failed (ERROR)
// session is dropped and a new one opened on the next call. Thread-safe.
// Owned by shared_ptr: a Lease keeps its pool alive, so a zero-copy call
// object may outlive the client that made it.
class SessionPool : public std::enable_shared_from_this<SessionPool> {
 public:
  SessionPool(Transport& transport, std::string host, uint16_t port,
              std::string routine, uint8_t function_code, std::vector<RegionSpec> regions,
              const StubOptions& options);
  ~SessionPool();
  SessionPool(const SessionPool&) = delete;
  SessionPool& operator=(const SessionPool&) = delete;

  // Exclusive use of one session until destroyed (then returned to the pool,
  // or closed if it failed).
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    ~Lease();
    ClientSession* session() const { return session_.get(); }
    explicit operator bool() const { return session_ != nullptr; }
    // Runs a call; a session left in ERROR is not returned to the pool.
    Status Call(uint8_t function_code, Deadline deadline, const CallOptions& options);
    // Call() in steps, for the CallEngine: ClientSession::StartCall, then
    // EndCall with the call's status (drops a failed session, as Call does).
    Status StartCall(uint8_t function_code, Deadline deadline, const CallOptions& options);
    Status EndCall(Status status);

   private:
    friend class SessionPool;
    Lease(std::shared_ptr<SessionPool> pool, std::unique_ptr<ClientSession> s)
        : pool_(std::move(pool)), session_(std::move(s)) {}
    void Release();
    // Statistics and interceptors of the call in progress (Call, or
    // StartCall .. EndCall): a rejection by an interceptor is returned.
    Status BeginObserved(uint8_t function_code, Deadline deadline, const CallOptions& options);
    void EndObserved(const Status& status);
    std::shared_ptr<SessionPool> pool_;
    std::unique_ptr<ClientSession> session_;
    // The call in progress, if it is observed (stats or interceptors).
    bool observed_ = false;
    bool rejected_ = false;  // by an interceptor: the session stays good
    uint8_t function_code_ = 0;
    size_t accepted_ = 0;  // interceptors that accepted the call
    const InterceptorChain::List* interceptors_ = nullptr;
    Deadline deadline_ = Deadline::Infinite();
    uint64_t bytes_sent_ = 0;
    int64_t started_ns_ = 0;  // internal::CycleClock
  };

  // An idle session, a new one (up to the limit), or waits until `deadline`.
  // REQUIRES: the pool is owned by a shared_ptr.
  Result<Lease> Acquire(Deadline deadline);

  // Acquire in two steps, for event loops (CallEngine). TryAcquire never
  // waits: an idle session; or an empty lease and *may_open = true, which
  // reserves a slot: then OpenReserved (blocking: connect + MRSP) fills it;
  // or an empty lease and *may_open = false: all sessions are in use.
  Lease TryAcquire(bool* may_open);
  Result<Lease> OpenReserved(Deadline deadline);
  // A call that ended before it had a session (connecting or the MRSP
  // failed, or no session was free by its deadline), begun at `started_ns`
  // (internal::CycleClock): counted, and seen by the interceptors, as any
  // call that failed. Acquire and OpenReserved do it themselves.
  void ObserveUnstarted(const Status& status, int64_t started_ns, Deadline deadline);
  // Called, under the pool's lock, whenever a session or slot is freed; it
  // must not block or call into the pool. nullptr to stop.
  void SetFreedListener(std::function<void()> listener);

  // Whether a caller is blocked in Acquire, waiting for a session.
  bool has_waiters() const { return waiters_.load(std::memory_order_relaxed) > 0; }

  size_t open_sessions() const;
  const std::string& routine() const { return routine_; }
  // The NAA's "host:port" (the statistics' peer).
  const std::string& peer() const { return peer_; }
  size_t max_sessions() const { return std::max<size_t>(1, options_.max_sessions_per_routine); }

 private:
  void Return(std::unique_ptr<ClientSession> s);
  // An idle session; or reserves a slot to open one (*may_open); or none.
  Lease TakeLocked(bool* may_open);
  // A session or slot was freed: wakes a waiter and the listener.
  void FreedLocked();

  Transport& transport_;
  const std::string host_;
  const uint16_t port_;
  const std::string routine_;
  const uint8_t function_code_;
  const std::vector<RegionSpec> regions_;
  const StubOptions options_;
  const std::string peer_;
  RoutineStats* const stats_;  // nullptr: none kept
  // Parameter bytes of a call: inputs (unless CallOptions::send_lengths
  // says less) and outputs.
  uint64_t input_bytes_ = 0;
  uint64_t output_bytes_ = 0;
  bool has_streams_ = false;  // their chunks are added at the call's end
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<ClientSession>> idle_;
  size_t in_use_ = 0;  // leased or being opened
  std::atomic<size_t> waiters_{0};  // in Acquire's wait
  std::function<void()> freed_listener_;
};

// Runs blocking work on a few threads, started on demand (at most
// `max_threads`): the CallEngine's helpers (connect + MRSP, streaming
// calls). A thread idle for `idle_timeout` exits; the next Run starts one
// again. Destroying the runner waits for the work queued or running.
// Thread-safe.
class AsyncRunner {
 public:
  static constexpr std::chrono::milliseconds kDefaultIdleTimeout{5000};

  explicit AsyncRunner(size_t max_threads,
                       std::chrono::milliseconds idle_timeout = kDefaultIdleTimeout);
  ~AsyncRunner();
  AsyncRunner(const AsyncRunner&) = delete;
  AsyncRunner& operator=(const AsyncRunner&) = delete;

  // Runs `call`, then `done` with its status, on a runner thread.
  // REQUIRES: `done` does not destroy the runner (or its client).
  void Run(std::function<Status()> call, std::function<void(Status)> done);
  // Runs `call`; the future gets its status.
  std::future<Status> Run(std::function<Status()> call);

  // Threads started and not yet exited (busy or idle).
  size_t threads() const;
  // Of those, the ones waiting for work.
  size_t idle_threads() const;

 private:
  void Loop();

  const size_t max_threads_;
  const std::chrono::milliseconds idle_timeout_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  size_t idle_ = 0;                          // guarded by mu_
  bool stop_ = false;                        // guarded by mu_
  std::vector<std::thread> threads_;         // guarded by mu_
  // Threads that exited idle, joined by the next Run or the destructor.
  std::vector<std::thread> exited_;          // guarded by mu_
};

// A call's deadline passed while it waited for a free session of its
// client (all `sessions` in use): kDeadlineExceeded, and no NAA was asked,
// so a channel does not count it against the NAA (IsNoFreeSession).
Status NoFreeSessionError(std::string_view routine, size_t sessions);
bool IsNoFreeSession(const Status& status);

// Rewrites a failed call's status for the user: NAA statuses get their IDL
// name (`error_name`, "" if unknown), everything else the routine as context.
Status AnnotateCallStatus(const Status& status, std::string_view routine,
                          std::string_view error_name);

// Name of a standard NAA status (0x01..0x0f), or "" (then ask the IDL).
std::string_view StandardStatusName(uint8_t status);

// Implemented by every generated XxxService (software-NAA skeleton).
class ServiceHandler : public NaaHandler {
 public:
  virtual std::string_view service_name() const = 0;
  virtual std::span<const uint8_t> function_codes() const = 0;
};

// Serves several services from one NaaServer (one port): dispatches by
// function code, which must be distinct across the services.
class CompositeHandler final : public NaaHandler {
 public:
  // Fails with kInvalidArgument naming both services if a function code is
  // served twice. REQUIRES: the handlers outlive the composite.
  static Result<std::unique_ptr<CompositeHandler>> Create(
      std::vector<ServiceHandler*> services);

  uint8_t Handle(NaaCall& call) override;
  std::chrono::milliseconds KernelTimeout(uint8_t function_code) const override;
  std::string_view RoutineName(uint8_t function_code) const override;

 private:
  CompositeHandler() = default;
  ServiceHandler* by_code_[128] = {};
};

}  // namespace naarpc::codegen

#endif  // NAARPC_IMPL_CODEGEN_SUPPORT_H_
