// Hand-written software-NAA kernels used by the end-to-end tests and the
// benchmark (the generated skeletons are tested in tests/services/).
#ifndef NAARPC_TESTS_E2E_TEST_KERNELS_H_
#define NAARPC_TESTS_E2E_TEST_KERNELS_H_

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "naarpc/naa_server.h"
#include "tests/testing/release_gate.h"

namespace naarpc::testing {

enum TestFunction : uint8_t {
  kVectorAdd = 1,      // a(in f32[n]) + b(in f32[n]) -> out(out f32[n])
  kAccumulate = 2,     // x(in f32[n]); internal acc += x; total(out) = acc
  kAppError = 3,       // returns kAppErrorStatus
  kThrows = 4,         // throws std::runtime_error
  kSleep = 5,          // ms(in u32) sleeps that long; out(out u32) = ms
  kIncrementBytes = 6, // data(inout u8[n]) += 1 (the reference library's kernel)
  kEchoUserBits = 7,   // in(in u32); out(out u32) = user_bits
  kEcho = 8,           // in(in bytes n) -> out(out bytes n), copies reply_length
  kHold = 10,          // in(in u32) waits until ReleaseHeld(); out(out u32) = in
};
inline constexpr uint8_t kAppErrorStatus = 0x42;
inline constexpr std::chrono::milliseconds kSleepKernelTimeout{150};

class TestKernels : public NaaHandler {
 public:
  // If true, kSleep has a kernel timeout of kSleepKernelTimeout.
  explicit TestKernels(bool sleep_timeout = false) : sleep_timeout_(sleep_timeout) {}

  std::atomic<uint64_t> calls{0};

  // Waits until `n` calls have reached a kernel (started, not finished);
  // false on `deadline`.
  bool WaitForCalls(uint64_t n, Deadline deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_until(lock, deadline.when(), [&] { return calls.load() >= n; });
  }
  // Lets `n` kHold kernels return (ones that run now or later).
  void ReleaseHeld(uint64_t n = 1) { held_.Release(n); }
  // Called as each kernel starts (e.g. to tell another process).
  std::function<void(uint8_t function_code)> on_call;

  uint8_t Handle(NaaCall& call) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      calls.fetch_add(1);
    }
    cv_.notify_all();
    if (on_call) on_call(call.function_code);
    auto& p = call.params;
    switch (call.function_code) {
      case kVectorAdd: {
        if (p.size() != 3 || p[0].data.size() != p[2].data.size() ||
            p[1].data.size() != p[2].data.size() || !p[2].is_output) {
          return kNaaStatusBadRegionLayout;
        }
        const size_t n = p[2].data.size() / sizeof(float);
        auto* a = reinterpret_cast<const float*>(p[0].data.data());
        auto* b = reinterpret_cast<const float*>(p[1].data.data());
        auto* out = reinterpret_cast<float*>(p[2].data.data());
        for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
        return kNaaStatusSuccess;
      }
      case kAccumulate: {
        if (p.size() != 2 || call.internal.size() != 1 ||
            call.internal[0].size() != p[0].data.size() ||
            p[1].data.size() != p[0].data.size()) {
          return kNaaStatusBadRegionLayout;
        }
        const size_t n = p[0].data.size() / sizeof(float);
        auto* x = reinterpret_cast<const float*>(p[0].data.data());
        auto* acc = reinterpret_cast<float*>(call.internal[0].data());
        auto* total = reinterpret_cast<float*>(p[1].data.data());
        for (size_t i = 0; i < n; ++i) total[i] = acc[i] += x[i];
        return kNaaStatusSuccess;
      }
      case kAppError:
        return kAppErrorStatus;
      case kThrows:
        throw std::runtime_error("kernel exploded");
      case kSleep: {
        if (p.size() != 2 || p[0].data.size() < 4 || p[1].data.size() < 4) {
          return kNaaStatusBadRegionLayout;
        }
        uint32_t ms;
        std::memcpy(&ms, p[0].data.data(), 4);
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
        std::memcpy(p[1].data.data(), &ms, 4);
        return kNaaStatusSuccess;
      }
      case kHold: {
        if (p.size() != 2 || p[0].data.size() < 4 || p[1].data.size() < 4) {
          return kNaaStatusBadRegionLayout;
        }
        held_.Wait();
        std::memcpy(p[1].data.data(), p[0].data.data(), 4);
        return kNaaStatusSuccess;
      }
      case kIncrementBytes: {
        if (p.size() != 1 || !p[0].is_output) return kNaaStatusBadRegionLayout;
        for (auto& b : p[0].data) b = std::byte(uint8_t(b) + 1);
        return kNaaStatusSuccess;
      }
      case kEchoUserBits: {
        if (p.size() != 2 || p[1].data.size() < 4) return kNaaStatusBadRegionLayout;
        const uint32_t bits = call.user_bits;
        std::memcpy(p[1].data.data(), &bits, 4);
        return kNaaStatusSuccess;
      }
      case kEcho: {
        if (p.size() != 2 || p[1].data.size() < p[0].data.size()) return kNaaStatusBadRegionLayout;
        std::memcpy(p[1].data.data(), p[0].data.data(), p[0].data.size());
        return kNaaStatusSuccess;
      }
      default:
        return kNaaStatusUnknownFunction;
    }
  }

  std::chrono::milliseconds KernelTimeout(uint8_t function_code) const override {
    if (sleep_timeout_ && function_code == kSleep) return kSleepKernelTimeout;
    return std::chrono::milliseconds::zero();
  }

 private:
  bool sleep_timeout_;
  ReleaseGate held_;
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace naarpc::testing

#endif  // NAARPC_TESTS_E2E_TEST_KERNELS_H_
