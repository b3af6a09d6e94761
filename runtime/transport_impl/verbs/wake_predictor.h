// WakePredictor: hybrid polling for waits too long to spin through.
//
// A completion that finds its waiter asleep pays a wake-up (an interrupt and
// a context switch): microseconds on a bare-metal host, far more where the
// CPUs are virtualised or emulated (bench/guest/README.md). A stream of same-sized
// calls makes a connection's waits repeat, so the predictor learns how long a
// wait lasts once the short spin gave up and the waiter went to sleep, and
// plans the next such wait: sleep until a margin before the shortest recent
// wait, then spin until a margin after the longest (bounded), so the
// completion normally finds the waiter awake. As in the Linux block layer's
// hybrid polling, a bounded spin (about one margin per wait, never more than
// kMaxSpinMargins margins) buys back the wake-up; waits shorter than
// kMinPlannedWait are left to the ordinary spin and sleep.
//
// Times are relative to the moment the wait started sleeping; the caller
// reads the clock (this class never does), so it is deterministic to test.
//
//   if (auto plan = predictor.PlanWait()) { sleep plan->wake_after; spin to plan->spin_until; }
//   ... completion seen `waited` after the sleep began (planned or not, hit
//   or missed): predictor.OnCompleted(waited);
//
// A miss (the planned spin ends first) costs that spin and the ordinary
// wake-up; the late wait joins the window, so a lasting change of pattern is
// learnt within kWindow waits. The caller plans only the first sleep after it
// posted work, so a peer that goes quiet costs one planned spin, not one per
// wait.
#ifndef NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_WAKE_PREDICTOR_H_
#define NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_WAKE_PREDICTOR_H_

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <optional>

namespace naarpc {

class WakePredictor {
 public:
  using Duration = std::chrono::nanoseconds;

  // Recent waits remembered; a plan needs at least kMinSamples of them.
  static constexpr size_t kWindow = 4;
  static constexpr size_t kMinSamples = 2;
  // margin = shortest recent wait / kMarginDivisor, clamped to
  // [kMinMargin, kMaxMargin]: it must cover the wake-up from the planned
  // sleep (a timer wake-up is as slow as an event's).
  static constexpr int kMarginDivisor = 8;
  static constexpr Duration kMinMargin = std::chrono::microseconds(100);
  static constexpr Duration kMaxMargin = std::chrono::milliseconds(1);
  // The planned spin never lasts longer than this many margins.
  static constexpr int kMaxSpinMargins = 4;
  // Waits shorter than this are not planned (too short to sleep through).
  static constexpr Duration kMinPlannedWait = 3 * kMinMargin;

  struct Plan {
    Duration wake_after;  // sleep (waking early on a completion) until then
    Duration spin_until;  // then busy-poll until then, then sleep again
  };

  // The plan for a wait that starts sleeping now; nullopt if too few waits
  // were seen or they are too short to sleep through.
  std::optional<Plan> PlanWait() const {
    if (count_ < kMinSamples) return std::nullopt;
    Duration shortest = Duration::max();
    Duration longest = Duration::zero();
    for (size_t i = 0; i < count_; ++i) {
      shortest = std::min(shortest, samples_[i]);
      longest = std::max(longest, samples_[i]);
    }
    if (shortest < kMinPlannedWait) return std::nullopt;
    const Duration margin = std::clamp(shortest / kMarginDivisor, kMinMargin, kMaxMargin);
    Plan plan;
    plan.wake_after = shortest - margin;
    plan.spin_until = std::min(longest + margin, plan.wake_after + kMaxSpinMargins * margin);
    return plan;
  }

  // A wait that slept ended with a completion `waited` after it began sleeping.
  void OnCompleted(Duration waited) {
    samples_[next_] = waited < Duration::zero() ? Duration::zero() : waited;
    next_ = (next_ + 1) % kWindow;
    count_ = std::min(count_ + 1, kWindow);
  }

  size_t samples() const { return count_; }

 private:
  std::array<Duration, kWindow> samples_{};
  size_t next_ = 0;
  size_t count_ = 0;
};

}  // namespace naarpc

#endif  // NAARPC_RUNTIME_TRANSPORT_IMPL_VERBS_WAKE_PREDICTOR_H_
