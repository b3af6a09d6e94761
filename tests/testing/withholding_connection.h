// WithholdingConnection: once armed, hands its user no completion until one
// has failed (or the inner connection reports it is down), then hands over
// everything it held, in order, in as few batches as the user's array
// allows. A host that polls late gets the same from real hardware: the
// NAA's answer and the flushes of a connection that closed right after it
// in one batch (tests of docs/protocol.md 7.4). Host side; one thread polls.
#ifndef NAARPC_TESTS_TESTING_WITHHOLDING_CONNECTION_H_
#define NAARPC_TESTS_TESTING_WITHHOLDING_CONNECTION_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <deque>
#include <memory>
#include <span>

#include "tests/testing/forwarding_transport.h"

namespace naarpc::testing {

class WithholdingConnection final : public ForwardingConnection {
 public:
  using ForwardingConnection::ForwardingConnection;

  // From here on, completions are withheld until one fails.
  void Arm() { armed_.store(true); }

  // True once a batch handed to the user held a successful receive with an
  // immediate (the NAA's answer) followed by a flushed completion.
  bool handed_answer_with_flush() const { return handed_answer_with_flush_.load(); }

  Result<size_t> PollCompletions(std::span<Completion> out, Deadline deadline) override {
    if (!armed_.load() || (releasing_ && held_.empty())) {
      return inner().PollCompletions(out, deadline);
    }
    for (;;) {
      if (releasing_) return Hand(out);
      std::array<Completion, 16> got;
      Result<size_t> n = inner().PollCompletions(got, deadline);
      if (!n.ok()) return Down(out, n.status());
      Hold(std::span<const Completion>(got.data(), *n));
      if (releasing_) return Hand(out);
      if (*n == 0) return size_t{0};  // the deadline passed
    }
  }

  Result<size_t> TryPollCompletions(std::span<Completion> out) override {
    if (!armed_.load() || (releasing_ && held_.empty())) return inner().TryPollCompletions(out);
    for (;;) {
      if (releasing_) return Hand(out);
      std::array<Completion, 16> got;
      Result<size_t> n = inner().TryPollCompletions(got);
      if (!n.ok()) return Down(out, n.status());
      Hold(std::span<const Completion>(got.data(), *n));
      if (releasing_) return Hand(out);
      if (*n < got.size()) return size_t{0};  // nothing more queued
    }
  }

 private:
  void Hold(std::span<const Completion> got) {
    for (const Completion& c : got) {
      held_.push_back(c);
      if (c.status != CompletionStatus::kSuccess) releasing_ = true;
    }
  }
  // The inner connection is down and empty: what was held first, then its error.
  Result<size_t> Down(std::span<Completion> out, Status down) {
    if (held_.empty()) return down;
    releasing_ = true;
    return Hand(out);
  }
  Result<size_t> Hand(std::span<Completion> out) {
    const size_t n = std::min(out.size(), held_.size());
    bool answer = false;
    for (size_t i = 0; i < n; ++i) {
      out[i] = held_.front();
      held_.pop_front();
      if (out[i].status == CompletionStatus::kSuccess && out[i].has_imm) answer = true;
      if (answer && out[i].status == CompletionStatus::kFlushed) {
        handed_answer_with_flush_.store(true);
      }
    }
    return n;
  }

  std::atomic<bool> armed_{false};
  std::atomic<bool> handed_answer_with_flush_{false};
  bool releasing_ = false;
  std::deque<Completion> held_;
};

}  // namespace naarpc::testing

#endif  // NAARPC_TESTS_TESTING_WITHHOLDING_CONNECTION_H_
