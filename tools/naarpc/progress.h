// A progress bar on stderr for work that takes longer than about a second,
// only when stderr is a terminal (nothing otherwise: logs and pipes stay
// clean). Redrawn at most 10 times a second by the caller's Update().
#ifndef NAARPC_TOOLS_NAARPC_PROGRESS_H_
#define NAARPC_TOOLS_NAARPC_PROGRESS_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace naarpc::cli {

class Progress {
 public:
  // `total` units of work (0: unknown, a counter is shown instead of a bar).
  // `enabled` false: never draws (e.g. --no-progress).
  Progress(std::string label, uint64_t total, bool enabled = true);
  ~Progress();  // Finish()
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // `done` units so far; `detail` is shown after the bar ("3.2 GiB/s").
  void Update(uint64_t done, const std::string& detail = {});
  // Clears the bar (if one was drawn).
  void Finish();

  // Whether stderr is a terminal (and NAARPC_NO_PROGRESS is unset).
  static bool StderrIsTerminal();
  bool enabled() const { return enabled_; }

 private:
  using Clock = std::chrono::steady_clock;
  const std::string label_;
  const uint64_t total_;
  const bool enabled_;
  const Clock::time_point start_ = Clock::now();
  Clock::time_point last_draw_{};
  bool drawn_ = false;
};

// Draws a Progress from its own thread every 100 ms while work runs that
// cannot report by itself (one long call): `done` is read on each tick. No
// thread when the bar is disabled. Stopped (and the bar cleared) on
// destruction.
class ProgressTicker {
 public:
  ProgressTicker(std::string label, uint64_t total, std::function<uint64_t()> done,
                 std::function<std::string()> detail = {});
  ~ProgressTicker();
  ProgressTicker(const ProgressTicker&) = delete;
  ProgressTicker& operator=(const ProgressTicker&) = delete;

 private:
  Progress progress_;
  std::function<uint64_t()> done_;
  std::function<std::string()> detail_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace naarpc::cli

#endif  // NAARPC_TOOLS_NAARPC_PROGRESS_H_
