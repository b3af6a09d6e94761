// The NAA's kernel workers: threads that run kernels with a time limit
// (NaaHandler::KernelTimeout), long-lived and reused across calls and
// connections, and the count of kernels running on them. Internal to the
// NAA room.
#ifndef NAARPC_RUNTIME_NAA_KERNEL_WORKERS_H_
#define NAARPC_RUNTIME_NAA_KERNEL_WORKERS_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace naarpc::internal {

// Runs a kernel that has a time limit on a thread of its own, long-lived
// and reused across calls and connections (KernelWorkers): a thread per
// call would cost a thread start on every call. A kernel that overruns its
// limit is abandoned: the thread finishes it on its own and then exits;
// whatever the job holds (the connection's memory) lives until then.
class KernelWorker {
 public:
  KernelWorker();
  ~KernelWorker();

  // Runs `job` on the worker; nullopt if it is still running after
  // `timeout` (the caller then abandons the worker).
  // REQUIRES: not abandoned; no job running.
  std::optional<uint8_t> Run(std::function<uint8_t()> job, std::chrono::milliseconds timeout);

  // Leaves a running kernel to finish by itself; the thread exits after it.
  void Abandon();

 private:
  // Shared with the thread, which may outlive the worker once abandoned.
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::function<uint8_t()> job;  // guarded by mu
    bool busy = false;             // guarded by mu
    bool stop = false;             // guarded by mu
    uint8_t result = 0;            // guarded by mu
    std::atomic<bool> finished{false};
  };

  static void Loop(State& st);

  static constexpr auto kResultSpin = std::chrono::microseconds(50);
  std::shared_ptr<State> state_;
  std::thread thread_;  // last: starts after state_
};

// Idle kernel workers, shared by a server's connections: there are as many
// as kernels with a time limit run at once (plus abandoned ones finishing),
// not one per connection.
class KernelWorkers {
 public:
  std::unique_ptr<KernelWorker> Take();
  void Give(std::unique_ptr<KernelWorker> worker);

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<KernelWorker>> idle_;  // guarded by mu_
};

// Kernels running on kernel workers, abandoned ones included. Shared: an
// abandoned kernel may outlive the server.
struct RunningKernels {
  std::mutex mu;
  std::condition_variable cv;
  size_t count = 0;  // guarded by mu
  void Add();
  void Done();
  // Waits until none runs or `grace` passes; returns how many still run.
  size_t WaitNone(std::chrono::milliseconds grace);
};

}  // namespace naarpc::internal

#endif  // NAARPC_RUNTIME_NAA_KERNEL_WORKERS_H_
