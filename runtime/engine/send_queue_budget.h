// SendQueueBudget: selective signaling of write sequences.
//
// On an RC queue pair a send-queue slot is freed only when the completion of
// its work request, or of a later signaled one, is polled; unsignaled
// requests alone never free slots. Errors complete every request, signaled or
// not, so leaving a request unsignaled hides no failure; it only saves its
// completion (an ACK-driven CQE the poster must otherwise wait for and poll).
//
// A side that posts one write sequence per call signals its final request
// only when the budget asks for it: when the requests not yet known to be
// freed, plus this sequence, plus room for one more full sequence would pass
// half the queue's depth. At most one signaled request is pending at a time;
// seeing its completion frees everything posted before it.
//
//   SendQueueBudget budget(conn.send_queue_depth(), max_requests_per_sequence);
//   if (budget.NeedsReclaim(n)) { /* poll until !budget.signal_pending() */ }
//   const bool signaled = budget.ShouldSignal(n);
//   ... post n requests, the last one signaled or not ...
//   budget.OnPosted(n, signaled, final_wr_id);
//   ... for each successful completion of our own send: OnSendCompleted(wr_id)
#ifndef NAARPC_RUNTIME_ENGINE_SEND_QUEUE_BUDGET_H_
#define NAARPC_RUNTIME_ENGINE_SEND_QUEUE_BUDGET_H_

#include <cstdint>

namespace naarpc {

class SendQueueBudget {
 public:
  // depth: the connection's send-queue depth; 0 (unknown) signals every
  // sequence. max_sequence: the most requests one sequence posts.
  SendQueueBudget(uint32_t depth = 0, uint32_t max_sequence = 1)
      : depth_(depth), max_sequence_(max_sequence) {}

  // Whether the final request of a sequence of n must be signaled.
  bool ShouldSignal(uint32_t n) const {
    if (depth_ == 0) return true;
    if (pending_) return false;  // its completion will free these too
    return uint64_t{unfreed_} + n + max_sequence_ > depth_ / 2;
  }

  // Whether n more requests fit only once the pending signaled completion
  // has been seen: the caller polls for it (OnSendCompleted) first.
  bool NeedsReclaim(uint32_t n) const {
    return depth_ != 0 && pending_ && uint64_t{unfreed_} + n > depth_;
  }

  void OnPosted(uint32_t n, bool signaled, uint64_t final_wr_id) {
    unfreed_ += n;
    if (pending_) {
      unfreed_after_pending_ += n;
    } else if (signaled) {
      pending_ = true;
      pending_wr_id_ = final_wr_id;
      unfreed_after_pending_ = 0;
    }
  }

  // A successful completion of one of our own sends was polled.
  void OnSendCompleted(uint64_t wr_id) {
    if (pending_ && wr_id == pending_wr_id_) {
      pending_ = false;
      unfreed_ = unfreed_after_pending_;
      unfreed_after_pending_ = 0;
    }
  }

  bool signal_pending() const { return pending_; }
  // Requests posted whose slots are not known to be free.
  uint32_t unfreed() const { return unfreed_; }

 private:
  uint32_t depth_;
  uint32_t max_sequence_;
  uint32_t unfreed_ = 0;
  uint32_t unfreed_after_pending_ = 0;
  uint64_t pending_wr_id_ = 0;
  bool pending_ = false;
};

}  // namespace naarpc

#endif  // NAARPC_RUNTIME_ENGINE_SEND_QUEUE_BUDGET_H_
