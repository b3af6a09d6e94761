// The completion queue of an emulated connection, with notification as on
// an HCA (ibv_req_notify_cq: armed for one event, for any completion or for
// solicited ones; error completions count as solicited). Internal to the
// package; one thread at a time (the connection's op_mu_).
#ifndef NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_COMPLETION_QUEUE_H_
#define NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_COMPLETION_QUEUE_H_

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>

#include "naarpc/transport.h"
#include "runtime/transport_impl/emulated/ring_queue.h"

namespace naarpc {
namespace emulated {

class CompletionQueue {
 public:
  // Queues a completion and raises the notification event if the CQ is
  // armed for it. post_index: the completed send WR's position among the
  // posted ones (0 for receives); polling it frees that WR and every
  // earlier one (send_queue_depth).
  void Add(const Completion& c, uint64_t post_index, bool solicited) {
    entries_.push_back({c, post_index});
    const bool raise = armed_ == Armed::kAny ||
                       (armed_ == Armed::kSolicited &&
                        (solicited || c.status != CompletionStatus::kSuccess));
    if (raise) {
      armed_ = Armed::kNone;
      event_pending_ = true;
    }
  }
  // Takes up to out.size() queued completions.
  size_t Drain(std::span<Completion> out) {
    const size_t n = std::min(out.size(), entries_.size());
    for (size_t i = 0; i < n; ++i) {
      out[i] = entries_.front().completion;
      freed_post_index_ = std::max(freed_post_index_, entries_.front().post_index);
      entries_.pop_front();
    }
    return n;
  }
  bool empty() const { return entries_.empty(); }

  // Arming again before the event keeps the wider mode.
  void Arm(NotifyMode mode) {
    const Armed want = mode == NotifyMode::kNextCompletion ? Armed::kAny : Armed::kSolicited;
    armed_ = std::max(armed_, want);
  }
  bool event_pending() const { return event_pending_; }
  // Consumes a raised event: true if there was one.
  bool TakeEvent() { return std::exchange(event_pending_, false); }

  // Send WRs up to this post_index are freed (their completion, or a later
  // one, has been polled).
  uint64_t freed_post_index() const { return freed_post_index_; }

 private:
  struct Entry {
    Completion completion;
    uint64_t post_index;  // 0 for receives
  };
  enum class Armed : uint8_t { kNone, kSolicited, kAny };

  internal::RingQueue<Entry> entries_;
  Armed armed_ = Armed::kNone;
  bool event_pending_ = false;
  uint64_t freed_post_index_ = 0;
};

}  // namespace emulated
}  // namespace naarpc

#endif  // NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_COMPLETION_QUEUE_H_
