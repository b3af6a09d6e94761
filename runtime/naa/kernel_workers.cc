#include "runtime/naa/kernel_workers.h"

#include <string>
#include <system_error>

namespace naarpc::internal {

Status KernelWatchdog::Arm(KernelAlarm& alarm, Deadline::Clock::time_point at) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_) return Status::Ok();
  if (!thread_.joinable()) {
    try {
      thread_ = start_thread_([this] { Loop(); });
    } catch (const std::system_error& e) {
      return ResourceExhaustedError(std::string("the kernel watchdog's thread cannot start: ") +
                                    e.what());  // tried again by the next Arm
    }
  }
  alarm.at_ = at;
  alarm.armed_ = true;
  // From the back: the new limit usually is the latest.
  KernelAlarm* before = last_;
  while (before != nullptr && before->at_ > at) before = before->prev_;
  alarm.prev_ = before;
  alarm.next_ = before != nullptr ? before->next_ : first_;
  (alarm.next_ != nullptr ? alarm.next_->prev_ : last_) = &alarm;
  (before != nullptr ? before->next_ : first_) = &alarm;
  if (at < wake_at_) cv_.notify_one();
  return Status::Ok();
}

void KernelWatchdog::UnlinkLocked(KernelAlarm& alarm) {
  (alarm.prev_ != nullptr ? alarm.prev_->next_ : first_) = alarm.next_;
  (alarm.next_ != nullptr ? alarm.next_->prev_ : last_) = alarm.prev_;
  alarm.prev_ = alarm.next_ = nullptr;
  alarm.armed_ = false;
}

void KernelWatchdog::Disarm(KernelAlarm& alarm) {
  std::lock_guard<std::mutex> lock(mu_);
  if (alarm.armed_) UnlinkLocked(alarm);  // else fired (or stopped)
}

void KernelWatchdog::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopped_) {
    const auto now = Deadline::Clock::now();
    while (first_ != nullptr && first_->at_ <= now) {
      KernelAlarm& due = *first_;
      UnlinkLocked(due);
      StartExpiryLocked(lock, due.Expired());
      if (stopped_) return;
    }
    // A limit disarmed since stays the wake-up time: one spurious wake-up
    // rather than a notification per call.
    wake_at_ = first_ == nullptr ? Deadline::Clock::time_point::max() : first_->at_;
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    while (first_ != nullptr) UnlinkLocked(*first_);
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
