// Histograms, counters and the registry (exact under concurrency), the
// Prometheus rendering, interceptor chains and the log level filter.
#include <algorithm>
#include <map>
#include <atomic>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "naarpc/call_stats.h"
#include "naarpc/histogram.h"
#include "naarpc/interceptor.h"
#include "naarpc/log.h"
#include "naarpc/logging_interceptor.h"
#include "naarpc/stats_registry.h"

namespace naarpc {
namespace {

TEST(HistogramTest, BucketsCoverEveryValueOnce) {
  // Consecutive buckets tile the range: upper(i) + 1 == lower(i + 1).
  for (size_t i = 0; i + 1 < LatencyHistogram::kBuckets; ++i) {
    ASSERT_EQ(LatencyHistogram::BucketUpper(i) + 1, LatencyHistogram::BucketLower(i + 1)) << i;
  }
  EXPECT_EQ(LatencyHistogram::BucketUpper(LatencyHistogram::kBuckets - 1), UINT64_MAX);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 100000; ++i) {
    const uint64_t v = rng() >> (rng() % 64);
    const size_t b = LatencyHistogram::BucketOf(v);
    ASSERT_LE(LatencyHistogram::BucketLower(b), v);
    ASSERT_GE(LatencyHistogram::BucketUpper(b), v);
    // Width at most 1/16 of the lower bound (above the exact range).
    if (v >= 16) {
      ASSERT_LE(LatencyHistogram::BucketUpper(b) - LatencyHistogram::BucketLower(b) + 1,
                LatencyHistogram::BucketLower(b) / 16 + 1);
    }
  }
  EXPECT_EQ(LatencyHistogram::BucketOf(0), 0u);
  EXPECT_EQ(LatencyHistogram::BucketOf(15), 15u);
  EXPECT_EQ(LatencyHistogram::BucketOf(UINT64_MAX), LatencyHistogram::kBuckets - 1);
}

TEST(HistogramTest, PercentilesOfKnownValues) {
  LatencyHistogram h;
  for (uint64_t v = 1; v <= 100; ++v) h.Record(v * 1000);  // 1..100 us
  const auto s = h.Take();
  EXPECT_EQ(s.count, 100u);
  EXPECT_EQ(s.sum, 5050u * 1000);
  EXPECT_EQ(s.max, 100'000u);
  for (auto [q, exact] : {std::pair{0.5, 50'000.0}, std::pair{0.9, 90'000.0},
                          std::pair{0.99, 99'000.0}}) {
    const double got = static_cast<double>(s.Percentile(q));
    EXPECT_GE(got, exact) << q;
    EXPECT_LE(got, exact * 1.0625) << q;
  }
  EXPECT_EQ(s.Percentile(1.0), 100'000u);  // the max, exactly
  EXPECT_EQ(s.CountAtMost(UINT64_MAX), 100u);
  EXPECT_EQ(LatencyHistogram().Take().Percentile(0.5), 0u);
}

TEST(HistogramTest, ExactUnderConcurrency) {
  LatencyHistogram h;
  constexpr int kThreads = 8;
  constexpr uint64_t kPerThread = 50000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&h, t] {
      for (uint64_t i = 0; i < kPerThread; ++i) h.Record(i % 1000 + static_cast<uint64_t>(t));
    });
  }
  for (auto& t : threads) t.join();
  const auto s = h.Take();
  EXPECT_EQ(s.count, kThreads * kPerThread);
  uint64_t sum = 0, in_buckets = 0;
  for (int t = 0; t < kThreads; ++t) {
    for (uint64_t i = 0; i < kPerThread; ++i) sum += i % 1000 + static_cast<uint64_t>(t);
  }
  for (const auto& b : s.buckets) in_buckets += b.second;
  EXPECT_EQ(s.sum, sum);
  EXPECT_EQ(in_buckets, kThreads * kPerThread);
  EXPECT_EQ(s.max, 999u + kThreads - 1);
}

TEST(RoutineStatsTest, CountersExactUnderConcurrency) {
  StatsRegistry registry;
  constexpr int kThreads = 8;
  constexpr int kCalls = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&registry] {
      // Each thread looks the stats up itself: the same object for all.
      RoutineStats& s = registry.Get(CallSide::kHost, "Svc.Routine", "10.0.0.1:1234");
      for (int i = 0; i < kCalls; ++i) {
        s.RecordStart();
        Status st;
        if (i % 10 == 1) st = DeadlineExceededError("late");
        if (i % 10 == 2) st = Status(StatusCode::kNaaError, "x").set_wire_code(0x05);
        if (i % 10 == 3) st = Status(StatusCode::kNaaError, "x").set_wire_code(0x42);
        s.RecordEnd(st, 3, st.ok() ? 5 : 0, 1000 + static_cast<uint64_t>(i));
      }
    });
  }
  for (auto& t : threads) t.join();
  const auto all = registry.Take();
  ASSERT_EQ(all.size(), 1u);
  const auto& s = all[0];
  const uint64_t total = uint64_t{kThreads} * kCalls;
  EXPECT_EQ(s.started, total);
  EXPECT_EQ(s.completed, total);
  EXPECT_EQ(s.in_flight, 0u);
  EXPECT_EQ(s.bytes_sent, 3 * total);
  EXPECT_EQ(s.bytes_received, 5 * (total - 3 * total / 10));
  EXPECT_EQ(s.latency_ns.count, total);
  std::map<std::string, uint64_t> errors(s.errors.begin(), s.errors.end());
  EXPECT_EQ(errors, (std::map<std::string, uint64_t>{{"DEADLINE_EXCEEDED", total / 10},
                                                     {"NAA_KERNEL_FAILED", total / 10},
                                                     {"NAA_0x42", total / 10}}));
  EXPECT_EQ(s.error_count(), 3 * total / 10);
}

TEST(RoutineStatsTest, InFlightCountsCallsBegunNotEnded) {
  StatsRegistry registry;
  RoutineStats& s = registry.Get(CallSide::kNaa, "f", "h");
  s.RecordStart();
  s.RecordStart();
  s.RecordNaaEnd(0, 1, 2, 10);
  auto snap = registry.Take().at(0);
  EXPECT_EQ(snap.in_flight, 1u);
  EXPECT_EQ(snap.started, 2u);
  EXPECT_EQ(snap.completed, 1u);
  EXPECT_EQ(snap.side, CallSide::kNaa);
}

TEST(PrometheusTest, RendersEveryFamilyWithLabels) {
  StatsRegistry registry;
  RoutineStats& s = registry.Get(CallSide::kHost, "V.Add", "127.0.0.1:5\"x");
  s.RecordStart();
  s.RecordEnd(Status::Ok(), 8192, 4096, 1500);  // 1.5 us
  s.RecordStart();
  s.RecordEnd(DeadlineExceededError("x"), 8192, 0, 2'000'000);  // 2 ms
  const std::string text = RenderPrometheusText(registry);
  const std::string l = "side=\"host\",routine=\"V.Add\",peer=\"127.0.0.1:5\\\"x\"";
  for (const std::string& line : std::vector<std::string>{
           "naarpc_calls_started_total{" + l + "} 2",
           "naarpc_calls_total{" + l + "} 2",
           "naarpc_calls_in_flight{" + l + "} 0",
           "naarpc_call_bytes_sent_total{" + l + "} 16384",
           "naarpc_call_bytes_received_total{" + l + "} 4096",
           "naarpc_call_errors_total{" + l + ",status=\"DEADLINE_EXCEEDED\"} 1",
           "naarpc_call_duration_seconds_bucket{" + l + ",le=\"1e-06\"} 0",
           "naarpc_call_duration_seconds_bucket{" + l + ",le=\"2.5e-06\"} 1",
           "naarpc_call_duration_seconds_bucket{" + l + ",le=\"0.001\"} 1",
           "naarpc_call_duration_seconds_bucket{" + l + ",le=\"0.0025\"} 2",
           "naarpc_call_duration_seconds_bucket{" + l + ",le=\"+Inf\"} 2",
           "naarpc_call_duration_seconds_count{" + l + "} 2",
           "naarpc_call_duration_seconds_sum{" + l + "} 0.0020015",
           "naarpc_call_latency_seconds{" + l + ",quantile=\"1\"} 0.002",
           "# TYPE naarpc_call_duration_seconds histogram",
       }) {
    EXPECT_NE(text.find(line + "\n"), std::string::npos) << line << "\n" << text;
  }
}

// Records what it sees in a shared journal; rejects if told to.
class Recorder : public Interceptor {
 public:
  Recorder(std::string name, std::vector<std::string>* journal, Status reject = Status::Ok())
      : name_(std::move(name)), journal_(journal), reject_(std::move(reject)) {}
  Status OnCallStart(const CallInfo& call) override {
    journal_->push_back(name_ + ".start " + std::string(call.routine));
    return reject_;
  }
  void OnCallEnd(const CallInfo&, const Status& status) override {
    journal_->push_back(name_ + ".end " + std::string(StatusCodeName(status.code())));
  }

 private:
  std::string name_;
  std::vector<std::string>* journal_;
  Status reject_;
};

TEST(InterceptorChainTest, OrderRejectionAndRemoval) {
  std::vector<std::string> journal;
  InterceptorChain chain;
  EXPECT_EQ(chain.current(), nullptr);
  const auto a = chain.Add(std::make_shared<Recorder>("a", &journal));
  const auto b = chain.Add(std::make_shared<Recorder>("b", &journal));
  CallInfo info;
  info.routine = "R";
  size_t accepted = 0;
  ASSERT_TRUE(InterceptorChain::RunStart(chain.current(), info, &accepted).ok());
  EXPECT_EQ(accepted, 2u);
  InterceptorChain::RunEnd(chain.current(), accepted, info, Status::Ok());
  EXPECT_EQ(journal, (std::vector<std::string>{"a.start R", "b.start R", "b.end OK", "a.end OK"}));

  // c rejects: d never runs, a and b see the rejection end, in reverse.
  journal.clear();
  const auto c = chain.Add(std::make_shared<Recorder>("c", &journal,
                                                      Status(StatusCode::kUnavailable, "no")));
  chain.Add(std::make_shared<Recorder>("d", &journal));
  Status s = InterceptorChain::RunStart(chain.current(), info, &accepted);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(accepted, 0u);
  EXPECT_EQ(journal, (std::vector<std::string>{"a.start R", "b.start R", "c.start R",
                                               "b.end UNAVAILABLE", "a.end UNAVAILABLE"}));

  // Removal: a list taken before stays whole for its call.
  const InterceptorChain::List* before = chain.current();
  EXPECT_TRUE(chain.Remove(c));
  EXPECT_FALSE(chain.Remove(c));
  EXPECT_EQ(before->entries.size(), 4u);
  EXPECT_EQ(chain.size(), 3u);
  journal.clear();
  ASSERT_TRUE(InterceptorChain::RunStart(chain.current(), info, &accepted).ok());
  EXPECT_EQ(journal, (std::vector<std::string>{"a.start R", "b.start R", "d.start R"}));
  chain.Remove(a);
  chain.Remove(b);
  EXPECT_EQ(chain.size(), 1u);
  EXPECT_NE(chain.current(), nullptr);
  chain.Remove(chain.current()->entries[0].first);
  EXPECT_EQ(chain.current(), nullptr);  // empty: nothing for a call to do
}

TEST(InterceptorChainTest, StatsInterceptorRecords) {
  auto registry = std::make_shared<StatsRegistry>();
  InterceptorChain chain;
  chain.Add(std::make_shared<StatsInterceptor>(registry));
  CallInfo info;
  info.routine = "R";
  info.peer = "p";
  info.bytes_sent = 7;
  size_t accepted = 0;
  ASSERT_TRUE(InterceptorChain::RunStart(chain.current(), info, &accepted).ok());
  info.duration = std::chrono::nanoseconds(100);
  InterceptorChain::RunEnd(chain.current(), accepted, info, CancelledError("x"));
  const auto s = registry->Take().at(0);
  EXPECT_EQ(s.completed, 1u);
  EXPECT_EQ(s.bytes_sent, 7u);
  EXPECT_EQ(s.errors.at(0).first, "CANCELLED");
}

TEST(LogTest, LevelsPerComponent) {
  ASSERT_TRUE(SetLogLevels("warn,verbs=trace").ok());
  EXPECT_EQ(GetLogLevel(LogComponent::kVerbs), LogLevel::kTrace);
  EXPECT_EQ(GetLogLevel(LogComponent::kServer), LogLevel::kWarn);
  EXPECT_TRUE(LogEnabled(LogComponent::kVerbs, LogLevel::kDebug));
  EXPECT_FALSE(LogEnabled(LogComponent::kServer, LogLevel::kInfo));
  // Named components win whatever the order.
  ASSERT_TRUE(SetLogLevels("server=debug, error").ok());
  EXPECT_EQ(GetLogLevel(LogComponent::kServer), LogLevel::kDebug);
  EXPECT_EQ(GetLogLevel(LogComponent::kVerbs), LogLevel::kError);
  // A bad spec changes nothing.
  EXPECT_EQ(SetLogLevels("debug,nosuch=info").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SetLogLevels("loud").code(), StatusCode::kInvalidArgument);
  for (const char* empty : {"", ",,,", " ", " , "}) {
    EXPECT_EQ(SetLogLevels(empty).code(), StatusCode::kInvalidArgument) << "'" << empty << "'";
  }
  // A long bad part is quoted in part.
  const Status long_bad = SetLogLevels(std::string(100'000, 'x'));
  EXPECT_EQ(long_bad.code(), StatusCode::kInvalidArgument);
  EXPECT_LT(long_bad.message().size(), 200u) << long_bad.message().size();
  EXPECT_EQ(GetLogLevel(LogComponent::kVerbs), LogLevel::kError);
  ASSERT_TRUE(SetLogLevels("info").ok());
}

TEST(LogTest, SinkAndLoggingInterceptor) {
  std::vector<std::string> lines;
  SetLogSink([&lines](LogLevel level, LogComponent component, std::string_view line) {
    lines.push_back(std::string(LogLevelName(level)) + " " +
                    std::string(LogComponentName(component)) + " " + std::string(line));
  });
  ASSERT_TRUE(SetLogLevels("info,calls=debug").ok());
  LoggingInterceptor logging(/*max_failure_lines_per_second=*/2, [] {
    return LogRateLimiter::Clock::time_point() + std::chrono::hours(1);  // one window
  });
  CallInfo info;
  info.routine = "V.Add";
  info.peer = "h:1";
  logging.OnCallEnd(info, Status::Ok());
  for (int i = 0; i < 5; ++i) logging.OnCallEnd(info, UnavailableError("down"));
  ASSERT_TRUE(SetLogLevels("calls=info").ok());
  logging.OnCallEnd(info, Status::Ok());  // filtered out: debug
  SetLogSink(nullptr);
  ASSERT_TRUE(SetLogLevels("info").ok());
  // One success, then two failures (the rate limit) of five.
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].rfind("debug calls host V.Add peer=h:1", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind("warn calls host V.Add", 0), 0u) << lines[1];
}

TEST(LogTest, RateLimiterCountsWhatItDrops) {
  auto now = LogRateLimiter::Clock::time_point() + std::chrono::hours(1);
  LogRateLimiter limiter(3, [&now] { return now; });
  uint64_t suppressed = 0;
  int passed = 0;
  for (int i = 0; i < 10; ++i) passed += limiter.Allow(&suppressed);
  EXPECT_EQ(passed, 3);
  now += std::chrono::milliseconds(999);
  EXPECT_FALSE(limiter.Allow(&suppressed));
  now += std::chrono::milliseconds(1);  // the next window
  EXPECT_TRUE(limiter.Allow(&suppressed));
  EXPECT_EQ(suppressed, 8u);  // reported with the first line that passes
  EXPECT_TRUE(LogRateLimiter(0).Allow(&suppressed));
}

}  // namespace
}  // namespace naarpc
