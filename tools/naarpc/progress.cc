#include "tools/naarpc/progress.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace naarpc::cli {

Progress::Progress(std::string label, uint64_t total, bool enabled)
    : label_(std::move(label)), total_(total), enabled_(enabled && StderrIsTerminal()) {}

Progress::~Progress() { Finish(); }

bool Progress::StderrIsTerminal() {
  return isatty(STDERR_FILENO) == 1 && std::getenv("NAARPC_NO_PROGRESS") == nullptr;
}

void Progress::Update(uint64_t done, const std::string& detail) {
  if (!enabled_) return;
  const Clock::time_point now = Clock::now();
  // Quick work shows nothing; then at most 10 redraws a second.
  if (now - start_ < std::chrono::seconds(1)) return;
  if (drawn_ && now - last_draw_ < std::chrono::milliseconds(100) && done != total_) return;
  last_draw_ = now;
  drawn_ = true;
  constexpr int kWidth = 30;
  std::string line = "\r" + label_ + " ";
  if (total_ != 0) {
    const int filled = static_cast<int>(kWidth * std::min<double>(1.0, double(done) / total_));
    line += "[" + std::string(filled, '#') + std::string(kWidth - filled, '.') + "] " +
            std::to_string(done) + "/" + std::to_string(total_);
  } else {
    line += std::to_string(done);
  }
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  char secs[32];
  std::snprintf(secs, sizeof secs, " %.1f s", elapsed);
  line += secs;
  if (!detail.empty()) line += "  " + detail;
  line += "\x1b[K";  // clear to the end of the line
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

void Progress::Finish() {
  if (!drawn_) return;
  std::fputs("\r\x1b[K", stderr);
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace naarpc::cli

namespace naarpc::cli {

ProgressTicker::ProgressTicker(std::string label, uint64_t total, std::function<uint64_t()> done,
                               std::function<std::string()> detail)
    : progress_(std::move(label), total), done_(std::move(done)), detail_(std::move(detail)) {
  if (!progress_.enabled()) return;
  thread_ = std::thread([this] {
    std::unique_lock lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stop_; })) {
      progress_.Update(done_(), detail_ ? detail_() : std::string());
    }
    progress_.Finish();
  });
}

ProgressTicker::~ProgressTicker() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace naarpc::cli
