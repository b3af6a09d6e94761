// NAARPC_LOG sets the levels when the facility is first used (naarpc/log.h);
// its own binary, so that nothing configured the levels before the test.
#include <cstdlib>
#include <future>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "naarpc/log.h"

namespace naarpc {
namespace {

TEST(LogEnvTest, NaarpcLogAppliesOnFirstUse) {
  ASSERT_EQ(::setenv("NAARPC_LOG", "warn,calls=debug", 1), 0);
  std::vector<std::string> lines;
  // The first use configures from NAARPC_LOG; on its own thread, so that a
  // configuration that never finishes fails here instead of hanging.
  auto first_use = std::async(std::launch::async, [&lines] {
    SetLogSink([&lines](LogLevel, LogComponent, std::string_view line) {
      lines.emplace_back(line);
    });
    Log(LogComponent::kServer, LogLevel::kWarn, "kept: warn");
    Log(LogComponent::kServer, LogLevel::kInfo, "dropped: info");
    Log(LogComponent::kCalls, LogLevel::kDebug, "kept: calls debug");
    SetLogSink(nullptr);
  });
  if (first_use.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    ADD_FAILURE() << "the first log call did not return: NAARPC_LOG's configuration is stuck";
    std::_Exit(1);
  }
  EXPECT_EQ(GetLogLevel(LogComponent::kServer), LogLevel::kWarn);
  EXPECT_EQ(GetLogLevel(LogComponent::kCalls), LogLevel::kDebug);
  EXPECT_EQ(lines, (std::vector<std::string>{"kept: warn", "kept: calls debug"}));
  // A later spec wins over the environment's.
  ASSERT_TRUE(SetLogLevels("error").ok());
  EXPECT_EQ(GetLogLevel(LogComponent::kCalls), LogLevel::kError);
}

}  // namespace
}  // namespace naarpc
