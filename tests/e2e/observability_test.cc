// Observability end to end: a generated client (VectorArith) and a software
// NAA on the emulated transport, each with its own statistics registry and
// interceptor chain. Checks both sides' per-routine statistics exactly, the
// metrics endpoint (scraped with a real HTTP client during calls, the
// exposition format parsed), interceptors (order, rejection on either side,
// removal), that an empty chain costs the call path no allocation, and
// that a kernel with a time limit costs the NAA none.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <map>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "naarpc/interceptor.h"
#include "naarpc/naa_server.h"
#include "naarpc/stats_registry.h"
#include "naarpc/transport_factory.h"
#include "runtime/httplib_config.h"
#include "services/vector/vector.naa.h"
#include "services/vector/vector_service.h"
#include "tests/testing/log_capture.h"

// Allocations made by the current thread while counting is on; and those
// of the NAA's threads that ran a kernel, while naa_counting is on.
namespace {
thread_local bool counting = false;
thread_local uint64_t allocations = 0;
thread_local bool ran_a_kernel = false;
std::atomic<bool> naa_counting{false};
std::atomic<uint64_t> naa_allocations{0};
}  // namespace

void* operator new(size_t n) {
  if (counting) ++allocations;
  if (ran_a_kernel && naa_counting.load(std::memory_order_relaxed)) ++naa_allocations;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
// GCC (-O2) sees a `new` expression inlined into a free() here and calls it
// mismatched; the replaced operators are a matching pair.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace naarpc {
namespace {

namespace vec = services::vector;

constexpr size_t kN = 1024;  // Add's vector length

// Records the order of hooks in a shared journal; rejects if told to.
class Recorder : public Interceptor {
 public:
  Recorder(std::string name, std::vector<std::string>* journal, Status reject = Status::Ok())
      : name_(std::move(name)), journal_(journal), reject_(std::move(reject)) {}
  Status OnCallStart(const CallInfo& call) override {
    std::lock_guard<std::mutex> lock(mu_);
    journal_->push_back(name_ + ".start " + std::string(call.routine) + " " +
                        std::to_string(call.bytes_sent) + "/" +
                        std::to_string(call.bytes_received));
    return reject_;
  }
  void OnCallEnd(const CallInfo& call, const Status& status) override {
    std::lock_guard<std::mutex> lock(mu_);
    journal_->push_back(name_ + ".end " + StatusMetricName(status) + " " +
                        std::to_string(call.bytes_sent) + "/" +
                        std::to_string(call.bytes_received));
  }

 private:
  std::mutex mu_;
  std::string name_;
  std::vector<std::string>* journal_;
  Status reject_;
};

// One sample of the exposition format: name{labels} value.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Parses the text exposition format (comments, label escapes).
std::vector<Sample> ParseExposition(const std::string& text) {
  std::vector<Sample> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    Sample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') s.name += line[i++];
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        std::string key, value;
        while (line[i] != '=') key += line[i++];
        i += 2;  // ="
        while (line[i] != '"') {
          if (line[i] == '\\') {
            ++i;
            value += line[i] == 'n' ? '\n' : line[i];
          } else {
            value += line[i];
          }
          ++i;
        }
        ++i;  // "
        if (line[i] == ',') ++i;
        s.labels[key] = value;
      }
      ++i;  // }
    }
    EXPECT_EQ(line[i], ' ') << line;
    s.value = std::stod(line.substr(i + 1));
    out.push_back(std::move(s));
  }
  return out;
}

// The value of `name` whose labels include `want`; -1 if none.
double Find(const std::vector<Sample>& samples, const std::string& name,
            const std::map<std::string, std::string>& want) {
  for (const Sample& s : samples) {
    if (s.name != name) continue;
    bool match = true;
    for (const auto& [k, v] : want) {
      auto it = s.labels.find(k);
      match = match && it != s.labels.end() && it->second == v;
    }
    if (match) return s.value;
  }
  return -1;
}

class ObservabilityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = NewTransport("emulated");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    transport_ = std::move(t).value();
    ServerOptions options;
    options.stats = naa_stats_;
    options.interceptors = naa_chain_;
    options.metrics_port = 0;
    options.metrics_host = "127.0.0.1";
    options.log = log_.Sink();
    auto s = NaaServer::Start(*transport_, "127.0.0.1", 0, service_, options);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
    ASSERT_NE(server_->metrics_port(), 0);
    codegen::StubOptions stub;
    stub.stats = host_stats_;
    stub.interceptors = host_chain_;
    client_ = std::make_unique<vec::VectorArithClient>(*transport_, "127.0.0.1", server_->port(),
                                                       stub);
    peer_ = "127.0.0.1:" + std::to_string(server_->port());
  }
  void TearDown() override {
    client_.reset();
    if (server_) server_->Shutdown();
  }

  Status Add() { return client_->Add(a_, b_, out_); }
  // Unequal lengths: the kernel throws, the NAA answers 0x05.
  Status BadDot() {
    const double a[2] = {1, 2}, b[1] = {3};
    double r = 0;
    return client_->Dot(a, b, &r);
  }
  RoutineStats::Snapshot HostStats(const std::string& routine) {
    for (auto& s : host_stats_->Take()) {
      if (s.routine == routine) return s;
    }
    return {};
  }
  RoutineStats::Snapshot NaaStats(const std::string& routine) {
    for (auto& s : naa_stats_->Take()) {
      if (s.routine == routine) return s;
    }
    return {};
  }
  std::vector<Sample> Scrape() {
    httplib::Client http("127.0.0.1", server_->metrics_port());
    auto res = http.Get("/metrics");
    EXPECT_TRUE(res) << "no answer from the metrics endpoint";
    if (!res) return {};
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(res->get_header_value("Content-Type").rfind("text/plain; version=0.0.4", 0), 0u);
    return ParseExposition(res->body);
  }

  std::unique_ptr<Transport> transport_;
  vec::VectorArithServiceImpl service_;
  std::shared_ptr<StatsRegistry> naa_stats_ = std::make_shared<StatsRegistry>();
  std::shared_ptr<StatsRegistry> host_stats_ = std::make_shared<StatsRegistry>();
  std::shared_ptr<InterceptorChain> naa_chain_ = std::make_shared<InterceptorChain>();
  std::shared_ptr<InterceptorChain> host_chain_ = std::make_shared<InterceptorChain>();
  std::unique_ptr<NaaServer> server_;
  std::unique_ptr<vec::VectorArithClient> client_;
  std::string peer_;
  testing::LogCapture log_;
  std::vector<float> a_ = std::vector<float>(kN, 1.0f), b_ = std::vector<float>(kN, 2.0f),
                     out_ = std::vector<float>(kN);
};

TEST_F(ObservabilityTest, BothSidesCountEveryCallExactly) {
  constexpr int kOk = 25, kBad = 3;
  for (int i = 0; i < kOk; ++i) ASSERT_TRUE(Add().ok());
  for (int i = 0; i < kBad; ++i) {
    Status s = BadDot();
    ASSERT_EQ(s.code(), StatusCode::kNaaError);
    ASSERT_EQ(s.wire_code(), 0x05);
  }
  const auto host = HostStats("VectorArith.Add");
  EXPECT_EQ(host.side, CallSide::kHost);
  EXPECT_EQ(host.peer, peer_);
  EXPECT_EQ(host.started, uint64_t{kOk});
  EXPECT_EQ(host.completed, uint64_t{kOk});
  EXPECT_EQ(host.in_flight, 0u);
  EXPECT_EQ(host.bytes_sent, uint64_t{kOk} * 2 * kN * 4);
  EXPECT_EQ(host.bytes_received, uint64_t{kOk} * kN * 4);
  EXPECT_EQ(host.latency_ns.count, uint64_t{kOk});
  EXPECT_GE(host.latency_ns.max, host.latency_ns.Percentile(0.5));
  EXPECT_TRUE(host.errors.empty());

  const auto naa = NaaStats("VectorArith.Add");
  EXPECT_EQ(naa.side, CallSide::kNaa);
  EXPECT_EQ(naa.peer, "127.0.0.1");
  EXPECT_EQ(naa.completed, uint64_t{kOk});
  EXPECT_EQ(naa.in_flight, 0u);
  EXPECT_EQ(naa.bytes_sent, uint64_t{kOk} * kN * 4);  // `out`, written back
  // The spec dialect does not tell the NAA which regions are inputs: all of
  // Add's three count.
  EXPECT_EQ(naa.bytes_received, uint64_t{kOk} * 3 * kN * 4);

  const auto host_dot = HostStats("VectorArith.Dot");
  const auto naa_dot = NaaStats("VectorArith.Dot");
  using Errors = std::vector<std::pair<std::string, uint64_t>>;
  EXPECT_EQ(host_dot.completed, uint64_t{kBad});
  EXPECT_EQ(host_dot.errors, (Errors{{"NAA_KERNEL_FAILED", kBad}}));
  EXPECT_EQ(host_dot.bytes_received, 0u);
  EXPECT_EQ(naa_dot.completed, uint64_t{kBad});
  EXPECT_EQ(naa_dot.errors, (Errors{{"NAA_KERNEL_FAILED", kBad}}));
}

// The generated skeleton turns a kernel's exception into 0x05, and the NAA's
// log says which routine threw what.
TEST_F(ObservabilityTest, AKernelsExceptionIsLoggedWithItsMessage) {
  Status s = BadDot();
  ASSERT_EQ(s.wire_code(), 0x05) << s.ToString();
  EXPECT_TRUE(log_.WaitFor("call of function 5 failed with status 5: VectorArith.Dot: the kernel "
                           "threw 'Dot: lengths differ'"))
      << log_.All();
}

// A call that cannot connect is a failed call: counted, and seen by the
// interceptors, from the blocking and the asynchronous path alike.
TEST_F(ObservabilityTest, CallsThatCannotConnectAreCountedAndIntercepted) {
  // A port bound but not listening: connections to it are refused.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const uint16_t port = ntohs(addr.sin_port);
  std::vector<std::string> journal;
  host_chain_->Add(std::make_shared<Recorder>("h1", &journal));
  codegen::StubOptions stub;
  stub.stats = host_stats_;
  stub.interceptors = host_chain_;
  {
    vec::VectorArithClient refused(*transport_, "127.0.0.1", port, stub);
    const Status sync = refused.Add(a_, b_, out_);
    EXPECT_EQ(sync.code(), StatusCode::kUnavailable) << sync.ToString();
    const Status async = refused.AddAsync(a_, b_, out_).get();
    EXPECT_EQ(async.code(), StatusCode::kUnavailable) << async.ToString();
  }
  ::close(fd);
  RoutineStats::Snapshot stats;
  for (auto& s : host_stats_->Take()) {
    if (s.routine == "VectorArith.Add" && s.peer == "127.0.0.1:" + std::to_string(port)) stats = s;
  }
  using Errors = std::vector<std::pair<std::string, uint64_t>>;
  EXPECT_EQ(stats.started, 2u);
  EXPECT_EQ(stats.completed, 2u);
  EXPECT_EQ(stats.in_flight, 0u);
  EXPECT_EQ(stats.errors, (Errors{{"UNAVAILABLE", 2}}));
  EXPECT_EQ(stats.bytes_sent, 0u);
  EXPECT_EQ(stats.latency_ns.count, 2u);
  EXPECT_EQ(journal, (std::vector<std::string>{
                         "h1.start VectorArith.Add 0/0",
                         "h1.end UNAVAILABLE 0/0",
                         "h1.start VectorArith.Add 0/0",
                         "h1.end UNAVAILABLE 0/0",
                     }));
}

TEST_F(ObservabilityTest, AsyncCallsAreCountedToo) {
  // The CallEngine's path (StartCall .. EndCall), several calls in flight.
  constexpr int kCalls = 16;
  std::vector<std::vector<float>> outs(kCalls, std::vector<float>(kN));
  std::vector<std::future<Status>> futures;
  for (int i = 0; i < kCalls; ++i) futures.push_back(client_->AddAsync(a_, b_, outs[i]));
  for (auto& f : futures) ASSERT_TRUE(f.get().ok());
  const auto host = HostStats("VectorArith.Add");
  EXPECT_EQ(host.started, uint64_t{kCalls});
  EXPECT_EQ(host.completed, uint64_t{kCalls});
  EXPECT_EQ(host.in_flight, 0u);
  EXPECT_EQ(host.bytes_received, uint64_t{kCalls} * kN * 4);
  EXPECT_EQ(NaaStats("VectorArith.Add").completed, uint64_t{kCalls});
}

TEST_F(ObservabilityTest, MetricsEndpointScrapedDuringCalls) {
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(Add().ok());
  const std::map<std::string, std::string> add = {{"side", "naa"},
                                                  {"routine", "VectorArith.Add"},
                                                  {"peer", "127.0.0.1"}};
  auto samples = Scrape();
  EXPECT_EQ(Find(samples, "naarpc_calls_total", add), 10);
  EXPECT_EQ(Find(samples, "naarpc_calls_started_total", add), 10);
  EXPECT_EQ(Find(samples, "naarpc_calls_in_flight", add), 0);
  EXPECT_EQ(Find(samples, "naarpc_call_bytes_sent_total", add), 10.0 * kN * 4);
  EXPECT_EQ(Find(samples, "naarpc_call_duration_seconds_count", add), 10);
  auto inf = add;
  inf["le"] = "+Inf";
  EXPECT_EQ(Find(samples, "naarpc_call_duration_seconds_bucket", inf), 10);

  // Scrapes while two threads call: every scrape is consistent (monotonic
  // totals, never more ended than begun); the last, after them, exact.
  constexpr int kPerThread = 40;
  std::atomic<int> failures{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 2; ++t) {
    callers.emplace_back([this, &failures] {
      std::vector<float> a(kN, 1.0f), b(kN, 1.0f), out(kN);
      for (int i = 0; i < kPerThread; ++i) failures += !client_->Add(a, b, out).ok();
    });
  }
  double last_total = 10;
  for (int i = 0; i < 5; ++i) {
    samples = Scrape();
    const double total = Find(samples, "naarpc_calls_total", add);
    const double started = Find(samples, "naarpc_calls_started_total", add);
    EXPECT_GE(total, last_total);
    EXPECT_LE(total, started);
    EXPECT_LE(started, 10 + 2 * kPerThread);
    last_total = total;
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(failures.load(), 0);
  samples = Scrape();
  EXPECT_EQ(Find(samples, "naarpc_calls_total", add), 10 + 2 * kPerThread);
  EXPECT_EQ(Find(samples, "naarpc_calls_in_flight", add), 0);
  EXPECT_EQ(Find(samples, "naarpc_call_duration_seconds_count", add), 10 + 2 * kPerThread);
  EXPECT_EQ(Find(samples, "naarpc_call_bytes_sent_total", add), (10.0 + 2 * kPerThread) * kN * 4);
  // Cumulative buckets never decrease.
  double prev = 0;
  for (const Sample& s : samples) {
    if (s.name != "naarpc_call_duration_seconds_bucket" || s.labels.at("routine") != "VectorArith.Add" ||
        s.labels.at("side") != "naa") {
      continue;
    }
    EXPECT_GE(s.value, prev);
    prev = s.value;
  }
  EXPECT_EQ(prev, 10 + 2 * kPerThread);

  httplib::Client http("127.0.0.1", server_->metrics_port());
  auto res = http.Get("/other");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
}

TEST_F(ObservabilityTest, InterceptorsSeeCallsInOrderOnBothSides) {
  std::vector<std::string> journal;
  host_chain_->Add(std::make_shared<Recorder>("h1", &journal));
  host_chain_->Add(std::make_shared<Recorder>("h2", &journal));
  naa_chain_->Add(std::make_shared<Recorder>("n1", &journal));
  ASSERT_TRUE(Add().ok());
  // The NAA's hooks run while the host's call is in flight; the NAA's end
  // runs before its reply leaves.
  EXPECT_EQ(journal, (std::vector<std::string>{
                         "h1.start VectorArith.Add 8192/0",
                         "h2.start VectorArith.Add 8192/0",
                         "n1.start VectorArith.Add 0/12288",
                         "n1.end OK 4096/12288",
                         "h2.end OK 8192/4096",
                         "h1.end OK 8192/4096",
                     }));
}

TEST_F(ObservabilityTest, HostInterceptorRejectsBeforeAnythingIsSent) {
  ASSERT_TRUE(Add().ok());  // connected
  const uint64_t accepted = server_->connections_accepted();
  std::vector<std::string> journal;
  host_chain_->Add(std::make_shared<Recorder>("h1", &journal));
  const auto deny = host_chain_->Add(std::make_shared<Recorder>(
      "deny", &journal, Status(StatusCode::kFailedPrecondition, "not allowed")));
  host_chain_->Add(std::make_shared<Recorder>("h3", &journal));
  Status s = Add();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("not allowed"), std::string::npos);
  EXPECT_EQ(journal, (std::vector<std::string>{"h1.start VectorArith.Add 8192/0",
                                               "deny.start VectorArith.Add 8192/0",
                                               "h1.end FAILED_PRECONDITION 8192/0"}));
  EXPECT_EQ(NaaStats("VectorArith.Add").completed, 1u);  // the NAA never saw it
  const auto host = HostStats("VectorArith.Add");
  EXPECT_EQ(host.completed, 2u);
  EXPECT_EQ(host.errors, (std::vector<std::pair<std::string, uint64_t>>{
                             {"FAILED_PRECONDITION", 1}}));
  // Removed: calls pass again, on the same connection (a rejection does
  // not break the session).
  EXPECT_TRUE(host_chain_->Remove(deny));
  journal.clear();
  ASSERT_TRUE(Add().ok());
  EXPECT_EQ(journal.size(), 4u);
  EXPECT_EQ(server_->connections_accepted(), accepted);
}

TEST_F(ObservabilityTest, NaaInterceptorRejectsWithItsStatus) {
  std::vector<std::string> journal;
  const auto deny = naa_chain_->Add(std::make_shared<Recorder>(
      "deny", &journal, Status(StatusCode::kNaaError, "quota").set_wire_code(0x42)));
  Status s = Add();
  EXPECT_EQ(s.code(), StatusCode::kNaaError);
  EXPECT_EQ(s.wire_code(), 0x42);
  EXPECT_EQ(HostStats("VectorArith.Add").errors,
            (std::vector<std::pair<std::string, uint64_t>>{{"NAA_0x42", 1}}));
  EXPECT_EQ(NaaStats("VectorArith.Add").errors,
            (std::vector<std::pair<std::string, uint64_t>>{{"NAA_0x42", 1}}));
  // A rejection without an NAA status answers 0x05.
  naa_chain_->Remove(deny);
  naa_chain_->Add(std::make_shared<Recorder>("deny2", &journal, UnavailableError("busy")));
  s = Add();
  EXPECT_EQ(s.wire_code(), 0x05);
  naa_chain_->Remove(naa_chain_->current()->entries[0].first);
  EXPECT_TRUE(Add().ok());
  EXPECT_EQ(journal.size(), 2u);  // the removed ones saw nothing more
}

TEST_F(ObservabilityTest, EmptyChainCostsTheCallPathNoAllocation) {
  // Allocations of 50 calls (Invoke on a call object holding its session),
  // first unobserved (no statistics, no chain), then with statistics on and
  // a chain whose interceptor was removed: the same, and a removed
  // interceptor is never called.
  auto allocations_per_call = [&](const codegen::StubOptions& stub) {
    vec::VectorArithClient client(*transport_, "127.0.0.1", server_->port(), stub);
    auto call = client.NewAddCall();
    EXPECT_TRUE(call.ok());
    EXPECT_TRUE(call->Invoke().ok());  // warm
    counting = true;
    allocations = 0;
    for (int i = 0; i < 50; ++i) EXPECT_TRUE(call->Invoke().ok());
    counting = false;
    return allocations;
  };
  codegen::StubOptions bare;
  bare.stats = nullptr;
  const uint64_t baseline = allocations_per_call(bare);
  // The stub, the session and the emulated transport allocate nothing per
  // call on the calling thread (issue 28).
  EXPECT_EQ(baseline, 0u);

  std::vector<std::string> journal;
  codegen::StubOptions observed;
  observed.stats = host_stats_;
  observed.interceptors = std::make_shared<InterceptorChain>();
  observed.interceptors->Remove(
      observed.interceptors->Add(std::make_shared<Recorder>("gone", &journal)));
  EXPECT_EQ(observed.interceptors->current(), nullptr);
  const uint64_t with_stats = allocations_per_call(observed);
  EXPECT_EQ(with_stats, 0u);
  EXPECT_TRUE(journal.empty());
  EXPECT_EQ(HostStats("VectorArith.Add").completed, 51u);
}

TEST_F(ObservabilityTest, ATimedKernelCostsTheNaaNoAllocation) {
  // VectorArith's routines have a time limit (timeout_ms: 2000): each call
  // arms and disarms the server's kernel watchdog. Counted: what the NAA's
  // threads that ran a kernel allocate during 50 calls (statistics on, an
  // empty interceptor chain).
  class Marking final : public NaaHandler {
   public:
    explicit Marking(NaaHandler& inner) : inner_(inner) {}
    uint8_t Handle(NaaCall& call) override {
      ran_a_kernel = true;
      return inner_.Handle(call);
    }
    std::chrono::milliseconds KernelTimeout(uint8_t code) const override {
      return inner_.KernelTimeout(code);
    }
    std::string_view RoutineName(uint8_t code) const override { return inner_.RoutineName(code); }

   private:
    NaaHandler& inner_;
  } marking(service_);
  ASSERT_GT(marking.KernelTimeout(vec::VectorArithClient::kAddFunctionCode).count(), 0);
  ServerOptions options;
  options.stats = naa_stats_;
  options.interceptors = naa_chain_;
  options.log = [](std::string_view) {};
  auto server = NaaServer::Start(*transport_, "127.0.0.1", 0, marking, options);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  vec::VectorArithClient client(*transport_, "127.0.0.1", (*server)->port());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(client.Add(a_, b_, out_).ok());  // warm
  naa_allocations = 0;
  naa_counting = true;
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(client.Add(a_, b_, out_).ok());
  naa_counting = false;
  EXPECT_EQ(naa_allocations.load(), 0u);
  EXPECT_EQ(NaaStats("VectorArith.Add").completed, 53u);
  (*server)->Shutdown();
}

}  // namespace
}  // namespace naarpc
