#include "runtime/naa/kernel_workers.h"

#include <utility>

#include "naarpc/deadline.h"
#include "runtime/spin_budget.h"

namespace naarpc::internal {

KernelWorker::KernelWorker()
    : state_(std::make_shared<State>()), thread_([s = state_] { Loop(*s); }) {}

KernelWorker::~KernelWorker() {
  if (!thread_.joinable()) return;  // abandoned
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
  }
  state_->cv.notify_all();
  thread_.join();
}

std::optional<uint8_t> KernelWorker::Run(std::function<uint8_t()> job,
                                         std::chrono::milliseconds timeout) {
  State& st = *state_;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    st.job = std::move(job);
    st.busy = true;
    st.finished.store(false, std::memory_order_relaxed);
  }
  st.cv.notify_all();
  // Short kernels: a bounded spin saves this thread a sleep and wake-up.
  SpinBudget spin(kResultSpin, Deadline::Infinite(), /*yield_cpu=*/true);
  while (!st.finished.load(std::memory_order_acquire) && spin.Continue()) {
  }
  std::unique_lock<std::mutex> lock(st.mu);
  if (!st.cv.wait_for(lock, timeout, [&st] { return !st.busy; })) return std::nullopt;
  return st.result;
}

void KernelWorker::Abandon() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stop = true;
  }
  state_->cv.notify_all();
  thread_.detach();
}

void KernelWorker::Loop(State& st) {
  std::unique_lock<std::mutex> lock(st.mu);
  for (;;) {
    st.cv.wait(lock, [&st] { return st.stop || (st.busy && st.job); });
    if (!st.busy || !st.job) return;  // stopped while idle
    auto job = std::move(st.job);
    st.job = nullptr;
    lock.unlock();
    const uint8_t r = job();
    job = nullptr;  // releases what the job held, outside the lock
    lock.lock();
    st.result = r;
    st.busy = false;
    st.finished.store(true, std::memory_order_release);
    st.cv.notify_all();
    if (st.stop) return;
  }
}

std::unique_ptr<KernelWorker> KernelWorkers::Take() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      auto w = std::move(idle_.back());
      idle_.pop_back();
      return w;
    }
  }
  return std::make_unique<KernelWorker>();
}

void KernelWorkers::Give(std::unique_ptr<KernelWorker> worker) {
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(std::move(worker));
}

void RunningKernels::Add() {
  std::lock_guard<std::mutex> lock(mu);
  ++count;
}

void RunningKernels::Done() {
  std::lock_guard<std::mutex> lock(mu);
  --count;
  cv.notify_all();
}

size_t RunningKernels::WaitNone(std::chrono::milliseconds grace) {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait_for(lock, grace, [this] { return count == 0; });
  return count;
}

}  // namespace naarpc::internal
