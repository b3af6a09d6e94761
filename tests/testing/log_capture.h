// Collects the lines a NaaServer logs (ServerOptions::log) and lets a test
// wait for one: no sleeps, the wait ends when the line arrives.
#ifndef NAARPC_TESTS_TESTING_LOG_CAPTURE_H_
#define NAARPC_TESTS_TESTING_LOG_CAPTURE_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace naarpc::testing {

class LogCapture {
 public:
  // For ServerOptions::log. REQUIRES: the capture outlives the server.
  std::function<void(std::string_view)> Sink() {
    return [this](std::string_view line) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        lines_.emplace_back(line);
      }
      cv_.notify_all();
    };
  }
  // Waits until a line containing `needle` was logged; false after `limit`.
  bool WaitFor(const std::string& needle,
               std::chrono::milliseconds limit = std::chrono::seconds(20)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return CountLocked(needle) > 0; });
  }
  size_t Count(const std::string& needle) {
    std::lock_guard<std::mutex> lock(mu_);
    return CountLocked(needle);
  }
  std::string All() {
    std::lock_guard<std::mutex> lock(mu_);
    std::string all;
    for (const auto& l : lines_) all += l + "\n";
    return all;
  }

 private:
  size_t CountLocked(const std::string& needle) const {
    size_t n = 0;
    for (const auto& l : lines_) n += l.find(needle) != std::string::npos;
    return n;
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> lines_;
};

}  // namespace naarpc::testing

#endif  // NAARPC_TESTS_TESTING_LOG_CAPTURE_H_
