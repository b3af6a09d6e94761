#include "runtime/naa/kernel_workers.h"

#include <system_error>

namespace naarpc::internal {

std::optional<KernelWatchdog::Id> KernelWatchdog::Arm(Deadline::Clock::time_point at,
                                                      std::function<void()> on_expiry) {
  std::lock_guard<std::mutex> lock(mu_);
  const Id id = next_id_++;
  if (stopped_) return id;
  if (!thread_.joinable()) {
    try {
      thread_ = std::thread([this] { Loop(); });
    } catch (const std::system_error&) {
      return std::nullopt;  // tried again by the next Arm
    }
  }
  by_id_.emplace(id, timers_.emplace(at, std::make_pair(id, std::move(on_expiry))));
  if (at < wake_at_) cv_.notify_one();
  return id;
}

void KernelWatchdog::Disarm(Id id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return;  // fired (or stopped)
  timers_.erase(it->second);
  by_id_.erase(it);
}

void KernelWatchdog::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopped_) {
    const auto now = Deadline::Clock::now();
    while (!timers_.empty() && timers_.begin()->first <= now) {
      auto node = timers_.extract(timers_.begin());
      by_id_.erase(node.mapped().first);
      StartExpiryLocked(lock, std::move(node.mapped().second));
      if (stopped_) return;
    }
    // A limit disarmed since stays the wake-up time: one spurious wake-up
    // rather than a notification per call.
    wake_at_ = timers_.empty() ? Deadline::Clock::time_point::max() : timers_.begin()->first;
    if (wake_at_ == Deadline::Clock::time_point::max()) {
      cv_.wait(lock);
    } else {
      cv_.wait_until(lock, wake_at_);
    }
  }
}

void KernelWatchdog::StartExpiryLocked(std::unique_lock<std::mutex>& lock,
                                       std::function<void()> fn) {
  // Finished callbacks' threads are joined as new ones start.
  for (auto it = expiries_.begin(); it != expiries_.end();) {
    if (!it->done->load(std::memory_order_acquire)) {
      ++it;
      continue;
    }
    it->thread.join();
    it = expiries_.erase(it);
  }
  auto done = std::make_shared<std::atomic<bool>>(false);
  try {
    std::thread t([fn = std::move(fn), done]() mutable {
      fn();
      fn = nullptr;  // what it holds goes before the thread counts as done
      done->store(true, std::memory_order_release);
    });
    expiries_.push_back({std::move(t), std::move(done)});
  } catch (const std::system_error&) {
    lock.unlock();
    fn();
    lock.lock();
  }
}

void KernelWatchdog::Stop() {
  std::thread timer;
  std::list<Expiry> expiries;
  Timers never;  // what the callbacks hold goes outside the lock
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    never.swap(timers_);
    by_id_.clear();
    timer.swap(thread_);
  }
  cv_.notify_all();
  if (timer.joinable()) timer.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    expiries.swap(expiries_);
  }
  for (Expiry& e : expiries) e.thread.join();
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
