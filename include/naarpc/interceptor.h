// Interceptors (after gRPC's): an ordered chain of hooks that see every call
// of a generated client (StubOptions::interceptors) or of a NaaServer
// (ServerOptions::interceptors) — its routine, peer, sizes and deadline
// before it runs, its status and duration after — and may reject it with a
// status before anything is sent (host) or before the kernel runs (NAA).
// With no chain, or an empty one, the call path does nothing but load one
// pointer. Two are shipped: naarpc/logging_interceptor.h and
// StatsInterceptor (below).
#ifndef NAARPC_INTERCEPTOR_H_
#define NAARPC_INTERCEPTOR_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "naarpc/call_stats.h"
#include "naarpc/deadline.h"
#include "naarpc/status.h"

namespace naarpc {

class StatsRegistry;

// What an interceptor sees of a call. The views are valid during the hook
// only.
struct CallInfo {
  CallSide side = CallSide::kHost;
  // Host: "Service.Routine"; NAA: the handler's name for the function code
  // (NaaHandler::RoutineName), or "function_<code>".
  std::string_view routine;
  // Host: the NAA's "host:port"; NAA: the host's address.
  std::string_view peer;
  uint8_t function_code = 0;
  // Parameter bytes going out / coming in (see naarpc_call_bytes_* in
  // docs/operating.md); bytes_received is known at the end only.
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  // Host: the call's deadline; NAA: Infinite, or now + the kernel's limit.
  Deadline deadline = Deadline::Infinite();
  // OnCallEnd only.
  std::chrono::nanoseconds duration{0};
};

class Interceptor {
 public:
  virtual ~Interceptor() = default;
  // Before the call. A non-OK status rejects it: later interceptors and the
  // call do not run, the caller gets this status (the NAA answers the
  // status' wire_code if it is an NAA status 0x01..0xff, else 0x05
  // KERNEL_FAILED), and OnCallEnd runs for the interceptors that had
  // accepted it (this one excluded), in reverse order.
  // Runs on the calling thread (host) or an engine thread (NAA): keep it
  // short and non-blocking.
  virtual Status OnCallStart(const CallInfo& call) {
    (void)call;
    return Status::Ok();
  }
  // After the call (or its rejection by a later interceptor), in reverse
  // order of OnCallStart.
  virtual void OnCallEnd(const CallInfo& call, const Status& status) {
    (void)call;
    (void)status;
  }
};

// An ordered list of interceptors; Add and Remove may run while calls do
// (a call keeps the list it started with). Thread-safe.
class InterceptorChain {
 public:
  using Id = uint64_t;
  InterceptorChain() = default;
  ~InterceptorChain();
  InterceptorChain(const InterceptorChain&) = delete;
  InterceptorChain& operator=(const InterceptorChain&) = delete;

  // Appends `interceptor` (it runs after those added before); the id
  // removes it.
  Id Add(std::shared_ptr<Interceptor> interceptor);
  // false if no such interceptor.
  bool Remove(Id id);
  size_t size() const;

  // The interceptors as a call sees them: an immutable list, kept until the
  // chain is destroyed. nullptr when empty.
  struct List {
    std::vector<std::pair<Id, std::shared_ptr<Interceptor>>> entries;
  };
  const List* current() const { return current_.load(std::memory_order_acquire); }

  // The call path: OnCallStart of each in order; returns how many accepted
  // (*accepted) and the first rejection (then OnCallEnd has run for those).
  static Status RunStart(const List* list, const CallInfo& call, size_t* accepted);
  // OnCallEnd of the first `accepted`, in reverse order.
  static void RunEnd(const List* list, size_t accepted, const CallInfo& call,
                     const Status& status);

 private:
  void PublishLocked(std::unique_ptr<List> next);
  mutable std::mutex mu_;
  std::vector<std::pair<Id, std::shared_ptr<Interceptor>>> entries_;  // guarded by mu_
  Id next_id_ = 1;                                                     // guarded by mu_
  std::vector<std::unique_ptr<List>> lists_;  // every list published; guarded by mu_
  std::atomic<const List*> current_{nullptr};
};

// Records every call it sees into a StatsRegistry (the per-routine
// statistics, naarpc/call_stats.h): for a registry other than the one the
// client or server records into by itself, or behind other interceptors.
class StatsInterceptor final : public Interceptor {
 public:
  explicit StatsInterceptor(std::shared_ptr<StatsRegistry> registry);
  Status OnCallStart(const CallInfo& call) override;
  void OnCallEnd(const CallInfo& call, const Status& status) override;

 private:
  std::shared_ptr<StatsRegistry> registry_;
};

}  // namespace naarpc

#endif  // NAARPC_INTERCEPTOR_H_
