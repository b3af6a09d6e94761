// CallEngine's deadlines: a binary min-heap of the calls by deadline
// (Op::heap_index), and the expiry of the calls past theirs.
#include <optional>
#include <utility>

#include "naarpc/impl/call_engine.h"
#include "runtime/host/call_engine_op.h"

namespace naarpc::codegen {

void CallEngine::ExpireDue(Deadline::Clock::time_point now) {
  while (!heap_.empty() && heap_.front()->deadline.when() <= now) {
    Op& op = *heap_.front();
    HeapRemove(op);
    if (op.state == Op::State::kRunning) {
      // Past its deadline, ContinueCall ends the call (naming what it
      // waited for).
      std::optional<Status> result = op.call->session()->ContinueCall();
      if (!result) {
        op.call->session()->AbandonCall();
        result = DeadlineExceededError(op.pool->routine() +
                                       ": the call did not end by its deadline");
      }
      Complete(op, std::move(*result));
    } else {  // still waiting for a session
      Status none = NoFreeSessionError(op.pool->routine(), op.pool->max_sessions());
      op.pool->ObserveUnstarted(none, op.admitted_ns, op.deadline);
      Complete(op, std::move(none));
    }
  }
}

void CallEngine::HeapPush(Op& op) {
  op.heap_index = heap_.size();
  heap_.push_back(&op);
  HeapSiftUp(op.heap_index);
}

void CallEngine::HeapRemove(Op& op) {
  const size_t i = op.heap_index;
  if (i == kNotInHeap) return;
  op.heap_index = kNotInHeap;
  Op* last = heap_.back();
  heap_.pop_back();
  if (last == &op) return;
  heap_[i] = last;
  last->heap_index = i;
  HeapSiftUp(i);
  HeapSiftDown(last->heap_index);
}

void CallEngine::HeapSiftUp(size_t i) {
  Op* op = heap_[i];
  while (i > 0) {
    const size_t parent = (i - 1) / 2;
    if (heap_[parent]->deadline.when() <= op->deadline.when()) break;
    heap_[i] = heap_[parent];
    heap_[i]->heap_index = i;
    i = parent;
  }
  heap_[i] = op;
  op->heap_index = i;
}

void CallEngine::HeapSiftDown(size_t i) {
  Op* op = heap_[i];
  const size_t n = heap_.size();
  for (;;) {
    size_t child = 2 * i + 1;
    if (child >= n) break;
    if (child + 1 < n && heap_[child + 1]->deadline.when() < heap_[child]->deadline.when()) ++child;
    if (op->deadline.when() <= heap_[child]->deadline.when()) break;
    heap_[i] = heap_[child];
    heap_[i]->heap_index = i;
    i = child;
  }
  heap_[i] = op;
  op->heap_index = i;
}

}  // namespace naarpc::codegen
