// clock_check: runs in the rxe guest (guest_suite.sh). The guest boots with
// tsc=reliable (rxe-vm), which tells the kernel to skip its own check that
// the vCPUs' time-stamp counters agree. This checks it instead: two threads
// on two CPUs hand a token back and forth, each reading CLOCK_MONOTONIC
// after receiving it and before passing it on, so every read must be at
// least the one before it. Exit status 1 if the clock ever went back.
// --hand-offs N (default 200,000) sets how often the token passes;
// --skew-ns N makes CPU 1's readings N ns late, for the check's own test.
#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

namespace {

int64_t MonotonicNanos() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

bool PinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

struct Shared {
  std::atomic<int> turn{0};         // the thread (0 or 1) that holds the token
  std::atomic<int64_t> last_ns{0};  // the previous holder's reading
  std::atomic<int64_t> backwards{0};
  std::atomic<int64_t> worst_ns{0};
};

// The holder of the token waits on it asleep (futex), not spinning, so the
// check also finishes on a machine busy with other work.
void Play(Shared& shared, int me, int64_t hand_offs, int64_t skew_ns, bool& pinned) {
  pinned = PinTo(me);
  for (int64_t i = 0; i < hand_offs; ++i) {
    for (int turn = shared.turn.load(std::memory_order_acquire); turn != me;
         turn = shared.turn.load(std::memory_order_acquire)) {
      shared.turn.wait(turn, std::memory_order_acquire);
    }
    const int64_t now = MonotonicNanos() - skew_ns;
    const int64_t before = shared.last_ns.load(std::memory_order_relaxed);
    if (now < before) {
      shared.backwards.fetch_add(1, std::memory_order_relaxed);
      if (before - now > shared.worst_ns.load(std::memory_order_relaxed)) {
        shared.worst_ns.store(before - now, std::memory_order_relaxed);
      }
    }
    shared.last_ns.store(now, std::memory_order_relaxed);
    shared.turn.store(1 - me, std::memory_order_release);
    shared.turn.notify_one();
  }
}

std::optional<int64_t> ParseCount(const char* text) {
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < 0) return std::nullopt;
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t hand_offs = 200'000;
  int64_t skew_ns = 0;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    const std::optional<int64_t> value = i + 1 < argc ? ParseCount(argv[i + 1]) : std::nullopt;
    if ((flag != "--hand-offs" && flag != "--skew-ns") || !value) {
      std::fprintf(stderr, "usage: clock_check [--hand-offs N] [--skew-ns N] (N >= 0)\n");
      return 2;
    }
    (flag == "--hand-offs" ? hand_offs : skew_ns) = *value;
  }
  std::string source = "(unknown)";
  std::ifstream("/sys/devices/system/clocksource/clocksource0/current_clocksource") >> source;
  Shared shared;
  bool pinned[2] = {false, false};
  std::thread other([&] { Play(shared, 1, hand_offs, skew_ns, pinned[1]); });
  Play(shared, 0, hand_offs, 0, pinned[0]);
  other.join();
  if (!pinned[0] || !pinned[1]) {
    std::fprintf(stderr, "clock_check: cannot pin a thread to CPU 0 and CPU 1 (needs 2 CPUs)\n");
    return 1;
  }
  const int64_t backwards = shared.backwards.load();
  std::printf("clocksource %s: CLOCK_MONOTONIC read %lld times, handed between CPU 0 and 1: %lld went back",
              source.c_str(), static_cast<long long>(2 * hand_offs), static_cast<long long>(backwards));
  if (backwards > 0) std::printf(" (by up to %lld ns)", static_cast<long long>(shared.worst_ns.load()));
  std::printf("\n");
  return backwards == 0 ? 0 : 1;
}
