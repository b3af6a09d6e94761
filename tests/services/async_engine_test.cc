// The generated clients' asynchronous calls (codegen's CallEngine): many
// calls in flight on one engine thread, callbacks and futures, deadlines of
// queued and running calls, a peer that disconnects mid-call, a client
// destroyed with calls in flight, and a transport without notification
// descriptors. Emulated here; verbs inside the Soft-RoCE guest.
#include <dirent.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <future>
#include <map>
#include <optional>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "naarpc/impl/codegen_support.h"
#include "naarpc/naa_server.h"
#include "naarpc/transport_factory.h"
#include "runtime/transport_impl/verbs/verbs_transport.h"
#include "tests/services/testing.naa.h"
#include "tests/testing/forwarding_transport.h"

namespace {

using naarpc::Status;
using naarpc::StatusCode;
namespace e2e = naarpc::testing::e2e;
using namespace std::chrono_literals;

// Wait(x): counts itself running, blocks until the gate opens; y = x.
class GateImpl final : public e2e::LatchService {
 public:
  e2e::LatchError Wait(const naarpc::NaaCall&, uint32_t x, uint32_t& y) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++running_;
    max_running_ = std::max(max_running_, running_);
    cv_.notify_all();
    cv_.wait(lock, [this] { return open_; });
    --running_;
    y = x;
    return e2e::LatchError::kOk;
  }
  // True once `n` kernels run; false after a minute (a hang guard: a test
  // whose calls never reach the kernel fails instead of hanging).
  [[nodiscard]] bool AwaitRunning(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(60), [&] { return running_ >= n; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  int max_running() {
    std::lock_guard<std::mutex> lock(mu_);
    return max_running_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int running_ = 0, max_running_ = 0;
  bool open_ = false;
};

class BulkImpl final : public e2e::BulkService {
 public:
  e2e::BulkError Flip(const naarpc::NaaCall&, std::span<const uint8_t> data,
                      std::span<uint8_t> back) override {
    for (size_t i = 0; i < data.size(); ++i) back[i] = data[i] ^ 0x5a;
    return e2e::BulkError::kOk;
  }
};

// Server-side connections, kept so a test can disconnect them (the client
// then sees its peer go away); Disconnect is safe from any thread.
class ConnectionRegistry {
 public:
  class Tracked final : public naarpc::testing::ForwardingConnection {
   public:
    Tracked(std::unique_ptr<naarpc::Connection> inner, ConnectionRegistry& registry)
        : ForwardingConnection(std::move(inner)), registry_(registry) {
      registry_.Add(this);
    }
    ~Tracked() override { registry_.Remove(this); }

   private:
    ConnectionRegistry& registry_;
  };
  void DisconnectAll() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto* c : live_) c->Disconnect().IgnoreError();
  }

 private:
  void Add(naarpc::Connection* c) {
    std::lock_guard<std::mutex> lock(mu_);
    live_.push_back(c);
  }
  void Remove(naarpc::Connection* c) {
    std::lock_guard<std::mutex> lock(mu_);
    live_.erase(std::remove(live_.begin(), live_.end(), c), live_.end());
  }
  std::mutex mu_;
  std::vector<naarpc::Connection*> live_;
};

// A connection whose transport offers no notification descriptor.
class NoNotifyFd final : public naarpc::testing::ForwardingConnection {
 public:
  using ForwardingConnection::ForwardingConnection;
  int notify_fd() override { return -1; }
};

// A connection whose notification descriptor is `fd` (one an event loop
// cannot watch, in the test that uses it).
class OtherNotifyFd final : public naarpc::testing::ForwardingConnection {
 public:
  OtherNotifyFd(std::unique_ptr<naarpc::Connection> inner, int fd)
      : ForwardingConnection(std::move(inner)), fd_(fd) {}
  int notify_fd() override { return fd_; }

 private:
  const int fd_;
};

std::string FdLink(int fd) {
  char link[256];
  const ssize_t n = ::readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), link,
                               sizeof link - 1);
  return n > 0 ? std::string(link, size_t(n)) : std::string();
}

// This process's epoll sets: each one's descriptor -> the descriptors
// registered with it (/proc/self/fdinfo).
std::map<int, std::multiset<int>> EpollSets() {
  std::map<int, std::multiset<int>> sets;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return sets;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const int fd = std::atoi(e->d_name);
    if (FdLink(fd) != "anon_inode:[eventpoll]") continue;
    std::ifstream info(std::string("/proc/self/fdinfo/") + e->d_name);
    std::multiset<int>& targets = sets[fd];
    for (std::string line; std::getline(info, line);) {
      if (line.rfind("tfd:", 0) != 0) continue;
      std::istringstream in(line.substr(4));
      int target = -1;
      if (in >> target) targets.insert(target);
    }
  }
  closedir(dir);
  return sets;
}

// The epoll set of a client's engine: one made since `before`, with an
// eventfd (its wake-up) registered. -1 if none.
int EngineEpoll(const std::map<int, std::multiset<int>>& before) {
  for (const auto& [ep, targets] : EpollSets()) {
    if (before.count(ep) != 0) continue;
    for (int t : targets) {
      if (FdLink(t) == "anon_inode:[eventfd]") return ep;
    }
  }
  return -1;
}

// The descriptors an engine's epoll set watches besides its eventfd.
std::multiset<int> Watched(int engine_epoll) {
  std::multiset<int> watched;
  const auto sets = EpollSets();
  const auto it = sets.find(engine_epoll);
  if (it == sets.end()) return watched;
  for (int t : it->second) {
    if (FdLink(t) != "anon_inode:[eventfd]") watched.insert(t);
  }
  return watched;
}

// Threads of this process by name (/proc/self/task/*/comm).
std::map<std::string, int> ThreadsByName() {
  std::map<std::string, int> names;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return names;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string name;
    if (std::getline(comm, name)) ++names[name];
  }
  closedir(dir);
  return names;
}

std::string Address(const char* transport) {
  if (std::string(transport) == "verbs") {
    if (const char* a = std::getenv("NAARPC_TEST_ADDRESS")) return a;
  }
  return "127.0.0.1";
}

// Hang guard only: every wait in these tests ends on an event well before.
constexpr auto kHangGuard = 60s;

class AsyncEngineTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (std::string(GetParam()) == "verbs" && !naarpc::RdmaDeviceAvailable()) {
      GTEST_SKIP() << "no RDMA device here; the verbs cases run inside the Soft-RoCE guest "
                      "(//tools/rxe-vm)";
    }
    address_ = Address(GetParam());
    auto t = naarpc::NewTransport(GetParam());
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    transport_ = std::move(t).value();
    server_transport_ = std::make_unique<naarpc::testing::WrappingTransport>(
        *transport_, [this](std::unique_ptr<naarpc::Connection> c) {
          return std::unique_ptr<naarpc::Connection>(
              std::make_unique<ConnectionRegistry::Tracked>(std::move(c), registry_));
        });
    auto h = naarpc::codegen::CompositeHandler::Create({&gate_, &bulk_});
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    handler_ = std::move(h).value();
    auto s = naarpc::NaaServer::Start(*server_transport_, address_, 0, *handler_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
  }
  void TearDown() override {
    gate_.Open();
    if (server_) server_->Shutdown();
  }
  template <typename Client = e2e::LatchClient>
  std::unique_ptr<Client> MakeClient(size_t sessions,
                                               naarpc::Transport* transport = nullptr) {
    naarpc::codegen::StubOptions options;
    options.max_sessions_per_routine = sessions;
    return std::make_unique<Client>(transport ? *transport : *transport_, address_,
                                    server_->port(), options);
  }

  std::string address_;
  GateImpl gate_;
  BulkImpl bulk_;
  std::unique_ptr<naarpc::codegen::CompositeHandler> handler_;
  ConnectionRegistry registry_;
  std::unique_ptr<naarpc::Transport> transport_;
  std::unique_ptr<naarpc::Transport> server_transport_;
  std::unique_ptr<naarpc::NaaServer> server_;
};

TEST_P(AsyncEngineTest, ManyCallsInFlightRunOnOneEngineThread) {
  constexpr int kCalls = 256;
  constexpr size_t kSessions = 8;
  auto client = MakeClient(kSessions);
  const auto before = ThreadsByName();
  std::vector<uint32_t> ys(kCalls, 0);
  std::vector<std::future<Status>> calls;
  for (int i = 0; i < kCalls; ++i) {
    calls.push_back(client->WaitAsync(1000 + i, &ys[i], naarpc::Deadline::After(kHangGuard)));
  }
  // Every session has a call held in its kernel; the other 248 are queued.
  ASSERT_TRUE(gate_.AwaitRunning(kSessions));
  const auto during = ThreadsByName();
  EXPECT_EQ(before.count("naarpc-engine"), 0u);
  EXPECT_EQ(during.at("naarpc-engine"), 1);
  // Helpers only connect sessions: at most one per session, never per call.
  EXPECT_LE(during.count("naarpc-helper") ? during.at("naarpc-helper") : 0, int(kSessions));
  for (auto& call : calls) {
    EXPECT_EQ(call.wait_for(0s), std::future_status::timeout) << "a call ended while held";
  }
  gate_.Open();
  for (int i = 0; i < kCalls; ++i) {
    Status s = calls[i].get();
    ASSERT_TRUE(s.ok()) << "call " << i << ": " << s.ToString();
    EXPECT_EQ(ys[i], uint32_t(1000 + i));
  }
  EXPECT_EQ(gate_.max_running(), int(kSessions));
}

TEST_P(AsyncEngineTest, CallbacksRunOnTheEngineNeverOnTheCallersStack) {
  gate_.Open();
  auto client = MakeClient(2);
  const auto caller = std::this_thread::get_id();
  std::promise<std::pair<Status, std::thread::id>> rejected, answered;
  client->WaitAsync(1, nullptr, [&](Status s) {
    rejected.set_value({std::move(s), std::this_thread::get_id()});
  });
  uint32_t y = 0;
  client->WaitAsync(7, &y, [&](Status s) {
    answered.set_value({std::move(s), std::this_thread::get_id()});
  });
  auto [bad, bad_thread] = rejected.get_future().get();
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument) << bad.ToString();
  EXPECT_NE(bad.message().find("'y' must not be null"), std::string::npos) << bad.ToString();
  EXPECT_NE(bad_thread, caller);
  auto [good, good_thread] = answered.get_future().get();
  ASSERT_TRUE(good.ok()) << good.ToString();
  EXPECT_EQ(y, 7u);
  EXPECT_NE(good_thread, caller);
}

TEST_P(AsyncEngineTest, AQueuedCallEndsAtItsDeadline) {
  auto client = MakeClient(1);
  uint32_t held_y = 0, queued_y = 0;
  auto held = client->WaitAsync(1, &held_y, naarpc::Deadline::After(kHangGuard));
  ASSERT_TRUE(gate_.AwaitRunning(1));
  // The only session is busy until the gate opens, which is after this.
  Status s = client->WaitAsync(2, &queued_y, naarpc::Deadline::After(100ms)).get();
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_NE(s.message().find("no free session"), std::string::npos) << s.ToString();
  EXPECT_EQ(queued_y, 0u);
  gate_.Open();
  Status h = held.get();
  ASSERT_TRUE(h.ok()) << h.ToString();
  EXPECT_EQ(held_y, 1u);
}

TEST_P(AsyncEngineTest, ARunningCallEndsAtItsDeadlineAndTheNaaServesOn) {
  auto client = MakeClient(1);
  // Connected first: the short deadline below is for the call alone (a
  // verbs connect + MRSP in the TCG guest can take longer).
  ASSERT_TRUE(client->NewWaitCall(naarpc::Deadline::After(kHangGuard)).ok());
  uint32_t y = 0;
  Status s = client->WaitAsync(1, &y, naarpc::Deadline::After(300ms)).get();
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_NE(s.message().find("no answer from the NAA"), std::string::npos) << s.ToString();
  gate_.Open();
  // The failed session was closed (nothing late lands in y); a new one serves.
  uint32_t y2 = 0;
  Status again = client->WaitAsync(5, &y2, naarpc::Deadline::After(kHangGuard)).get();
  ASSERT_TRUE(again.ok()) << again.ToString();
  EXPECT_EQ(y2, 5u);
  EXPECT_EQ(y, 0u);
}

TEST_P(AsyncEngineTest, APeerThatDisconnectsMidCallEndsTheCall) {
  auto client = MakeClient(2);
  uint32_t y = 0;
  auto call = client->WaitAsync(1, &y, naarpc::Deadline::After(kHangGuard));
  ASSERT_TRUE(gate_.AwaitRunning(1));
  registry_.DisconnectAll();
  Status s = call.get();
  EXPECT_TRUE(s.code() == StatusCode::kDisconnected || s.code() == StatusCode::kTransportError)
      << s.ToString();
  EXPECT_NE(s.message().find("Latch.Wait"), std::string::npos) << s.ToString();
  EXPECT_EQ(y, 0u);
  gate_.Open();
  uint32_t y2 = 0;
  Status again = client->WaitAsync(9, &y2, naarpc::Deadline::After(kHangGuard)).get();
  ASSERT_TRUE(again.ok()) << again.ToString();
  EXPECT_EQ(y2, 9u);
}

TEST_P(AsyncEngineTest, DestroyingTheClientCancelsItsCallsInFlight) {
  auto client = MakeClient(1);
  uint32_t held_y = 0, queued_y = 0;
  std::promise<Status> held_done, queued_done;
  client->WaitAsync(1, &held_y, [&](Status s) { held_done.set_value(std::move(s)); },
                    naarpc::Deadline::After(kHangGuard));
  client->WaitAsync(2, &queued_y, [&](Status s) { queued_done.set_value(std::move(s)); },
                    naarpc::Deadline::After(kHangGuard));
  ASSERT_TRUE(gate_.AwaitRunning(1));
  client.reset();
  // Both callbacks ran before the client was gone.
  auto held = held_done.get_future();
  auto queued = queued_done.get_future();
  ASSERT_EQ(held.wait_for(0s), std::future_status::ready);
  ASSERT_EQ(queued.wait_for(0s), std::future_status::ready);
  EXPECT_EQ(held.get().code(), StatusCode::kCancelled);
  EXPECT_EQ(queued.get().code(), StatusCode::kCancelled);
  gate_.Open();
  EXPECT_EQ(held_y, 0u);
  EXPECT_EQ(queued_y, 0u);
  auto other = MakeClient(1);
  uint32_t y = 0;
  Status s = other->Wait(3, &y, naarpc::Deadline::After(kHangGuard));
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(y, 3u);
}

TEST_P(AsyncEngineTest, ATransportWithoutNotifyFdStillCompletesCalls) {
  gate_.Open();
  naarpc::testing::WrappingTransport plain(*transport_, [](std::unique_ptr<naarpc::Connection> c) {
    return std::unique_ptr<naarpc::Connection>(std::make_unique<NoNotifyFd>(std::move(c)));
  });
  auto client = MakeClient(2, &plain);
  std::vector<uint32_t> ys(16, 0);
  std::vector<std::future<Status>> calls;
  for (int i = 0; i < 16; ++i) {
    calls.push_back(client->WaitAsync(i, &ys[i], naarpc::Deadline::After(kHangGuard)));
  }
  for (int i = 0; i < 16; ++i) {
    Status s = calls[i].get();
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(ys[i], uint32_t(i));
  }
}

TEST_P(AsyncEngineTest, SyncAndAsyncCallsShareTheSessions) {
  gate_.Open();
  auto client = MakeClient(2);
  constexpr int kEach = 200;
  std::vector<uint32_t> ys(kEach, 0);
  std::vector<std::future<Status>> calls;
  std::thread sync([&] {
    for (int i = 0; i < kEach; ++i) {
      uint32_t y = 0;
      Status s = client->Wait(50'000 + i, &y, naarpc::Deadline::After(kHangGuard));
      ASSERT_TRUE(s.ok()) << s.ToString();
      ASSERT_EQ(y, uint32_t(50'000 + i));
    }
  });
  for (int i = 0; i < kEach; ++i) {
    calls.push_back(client->WaitAsync(i, &ys[i], naarpc::Deadline::After(kHangGuard)));
  }
  for (int i = 0; i < kEach; ++i) {
    Status s = calls[i].get();
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(ys[i], uint32_t(i));
  }
  sync.join();
}

// Inputs and outputs far larger than the sockets buffer: the engine keeps
// pushing and taking them (the emulated transport's output and input
// progress) while it waits on notify_fd.
TEST_P(AsyncEngineTest, MegabytesEachWayWhileSeveralCallsAreInFlight) {
  constexpr int kCalls = 4;
  constexpr size_t kBytes = 8u << 20;
  auto client = MakeClient<e2e::BulkClient>(2);
  std::vector<std::vector<uint8_t>> in(kCalls, std::vector<uint8_t>(kBytes));
  std::vector<std::vector<uint8_t>> out(kCalls, std::vector<uint8_t>(kBytes));
  for (int c = 0; c < kCalls; ++c) {
    for (size_t i = 0; i < kBytes; ++i) in[c][i] = uint8_t(i * 31 + c);
  }
  std::vector<std::future<Status>> calls;
  for (int c = 0; c < kCalls; ++c) {
    calls.push_back(client->FlipAsync(in[c], out[c], naarpc::Deadline::After(kHangGuard)));
  }
  for (int c = 0; c < kCalls; ++c) {
    Status s = calls[c].get();
    ASSERT_TRUE(s.ok()) << s.ToString();
    size_t wrong = 0;
    for (size_t i = 0; i < kBytes; ++i) wrong += out[c][i] != (in[c][i] ^ 0x5a);
    EXPECT_EQ(wrong, 0u) << "call " << c;
  }
}

// The session API under the engine: one thread drives several sessions'
// calls with StartCall / ContinueCall and epoll on their notify_fd.
TEST_P(AsyncEngineTest, OneThreadDrivesSeveralSessionsThroughNotifyFd) {
  constexpr int kSessions = 4;
  std::vector<std::unique_ptr<naarpc::ClientSession>> sessions;
  for (int i = 0; i < kSessions; ++i) {
    auto s = naarpc::ClientSession::Open(
        *transport_, address_, server_->port(),
        {{.name = "x", .direction = naarpc::Direction::kIn, .size = 4},
         {.name = "y", .direction = naarpc::Direction::kOut, .size = 4}});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    sessions.push_back(std::move(s).value());
  }
  for (int i = 0; i < kSessions; ++i) {
    const uint32_t x = 100 + i;
    std::memcpy(sessions[i]->buffer(0).data(), &x, sizeof x);
    Status s = sessions[i]->StartCall(e2e::LatchClient::kWaitFunctionCode,
                                      naarpc::Deadline::After(kHangGuard));
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_TRUE(sessions[i]->call_in_flight());
  }
  ASSERT_TRUE(gate_.AwaitRunning(kSessions));
  // Every kernel is held: ContinueCall returns at once, the calls in flight
  // (one that waited would return only at the deadline, with a status).
  for (auto& session : sessions) {
    EXPECT_FALSE(session->ContinueCall().has_value());
    EXPECT_EQ(session->StartCall(e2e::LatchClient::kWaitFunctionCode, naarpc::Deadline::After(1s))
                  .code(),
              StatusCode::kFailedPrecondition);
  }
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  ASSERT_GE(ep, 0);
  for (int i = 0; i < kSessions; ++i) {
    ASSERT_GE(sessions[i]->notify_fd(), 0);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = i;
    ASSERT_EQ(::epoll_ctl(ep, EPOLL_CTL_ADD, sessions[i]->notify_fd(), &ev), 0);
  }
  gate_.Open();
  std::vector<std::optional<Status>> results(kSessions);
  int left = kSessions;
  while (left > 0) {
    epoll_event ready[kSessions];
    const int n = ::epoll_wait(ep, ready, kSessions, int(std::chrono::milliseconds(kHangGuard).count()));
    ASSERT_GT(n, 0) << "no session became ready before the hang guard";
    for (int k = 0; k < n; ++k) {
      const int i = int(ready[k].data.u32);
      if (results[i]) continue;
      results[i] = sessions[i]->ContinueCall();
      if (results[i]) {
        --left;
        ::epoll_ctl(ep, EPOLL_CTL_DEL, sessions[i]->notify_fd(), nullptr);
      }
    }
  }
  ::close(ep);
  for (int i = 0; i < kSessions; ++i) {
    ASSERT_TRUE(results[i]->ok()) << results[i]->ToString();
    uint32_t y = 0;
    std::memcpy(&y, sessions[i]->buffer(1).data(), sizeof y);
    EXPECT_EQ(y, uint32_t(100 + i));
    EXPECT_FALSE(sessions[i]->call_in_flight());
    // The session serves the next call, blocking this time.
    Status again = sessions[i]->Call(e2e::LatchClient::kWaitFunctionCode,
                                     naarpc::Deadline::After(kHangGuard));
    EXPECT_TRUE(again.ok()) << again.ToString();
  }
}

// The engine keeps a session's notification descriptor in its epoll set for
// the session's life: registered by the session's first call that waits,
// then re-armed (one-shot), never removed and added again per call.
TEST_P(AsyncEngineTest, ASessionStaysRegisteredWithTheEngineAcrossItsCalls) {
  const auto before = EpollSets();
  auto client = MakeClient(1);
  uint32_t y = 0;
  // Held in its kernel: the engine waits for its answer on the descriptor.
  auto held = client->WaitAsync(1, &y, naarpc::Deadline::After(kHangGuard));
  ASSERT_TRUE(gate_.AwaitRunning(1));
  // While the call is held the engine stops polling for the answer and
  // waits on the session's descriptor. (Opened at once, the answer could
  // come while it still polls: that call would never wait.) Nothing signals
  // the registration: /proc is read until it shows it, or the hang guard.
  int engine_epoll = -1;
  std::multiset<int> watched;
  for (const auto guard = naarpc::Deadline::After(kHangGuard); watched.empty() && !guard.expired();
       std::this_thread::yield()) {
    engine_epoll = EngineEpoll(before);
    if (engine_epoll >= 0) watched = Watched(engine_epoll);
  }
  ASSERT_GE(engine_epoll, 0) << "no epoll set with an eventfd appeared for the engine";
  ASSERT_EQ(watched.size(), 1u) << "the session's descriptor, registered once";
  gate_.Open();
  Status first = held.get();
  ASSERT_TRUE(first.ok()) << first.ToString();
  ASSERT_EQ(Watched(engine_epoll), watched) << "after the first call";
  for (int i = 0; i < 100; ++i) {
    Status s = client->WaitAsync(100 + i, &y, naarpc::Deadline::After(kHangGuard)).get();
    ASSERT_TRUE(s.ok()) << "call " << i << ": " << s.ToString();
    EXPECT_EQ(y, uint32_t(100 + i));
    // Between calls: still there, still once.
    ASSERT_EQ(Watched(engine_epoll), watched) << "after call " << i;
  }
}

// A session that failed is closed, and its descriptor leaves the epoll set
// with it; the session opened next (often under the same descriptor
// number) is registered afresh, and its calls are answered.
TEST_P(AsyncEngineTest, ASessionReopenedAfterItsPeerLeftIsWatchedAfresh) {
  const auto before = EpollSets();
  auto client = MakeClient(1);
  for (int round = 0; round < 5; ++round) {
    uint32_t y = 0;
    auto call = client->WaitAsync(round, &y, naarpc::Deadline::After(kHangGuard));
    ASSERT_TRUE(gate_.AwaitRunning(round + 1));  // the kernels of earlier rounds are still held
    registry_.DisconnectAll();
    Status s = call.get();
    EXPECT_TRUE(s.code() == StatusCode::kDisconnected || s.code() == StatusCode::kTransportError)
        << s.ToString();
    EXPECT_NE(s.message().find("Latch.Wait"), std::string::npos) << s.ToString();
    const int engine_epoll = EngineEpoll(before);
    ASSERT_GE(engine_epoll, 0);
    EXPECT_TRUE(Watched(engine_epoll).empty()) << "the closed session's descriptor left the set";
  }
  gate_.Open();
  for (int i = 0; i < 20; ++i) {
    uint32_t y = 0;
    Status s = client->WaitAsync(50 + i, &y, naarpc::Deadline::After(kHangGuard)).get();
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(y, uint32_t(50 + i));
  }
}

// A notification descriptor epoll cannot watch (here a regular file) ends
// the call with an error naming the routine; the engine serves on.
TEST_P(AsyncEngineTest, ADescriptorTheEngineCannotWatchEndsTheCallNamingTheRoutine) {
  const int file = ::memfd_create("not-pollable", MFD_CLOEXEC);
  ASSERT_GE(file, 0) << std::strerror(errno);
  naarpc::testing::WrappingTransport odd(*transport_, [file](std::unique_ptr<naarpc::Connection> c) {
    return std::unique_ptr<naarpc::Connection>(std::make_unique<OtherNotifyFd>(std::move(c), file));
  });
  {
    auto client = MakeClient(1, &odd);
    for (int i = 0; i < 3; ++i) {
      uint32_t y = 0;
      Status s = client->WaitAsync(i, &y, naarpc::Deadline::After(kHangGuard)).get();
      EXPECT_EQ(s.code(), StatusCode::kInternal) << s.ToString();
      EXPECT_NE(s.message().find("Latch.Wait"), std::string::npos) << s.ToString();
      EXPECT_NE(s.message().find("notification descriptor"), std::string::npos) << s.ToString();
      EXPECT_EQ(y, 0u);
    }
  }
  gate_.Open();
  auto client = MakeClient(1);
  uint32_t y = 0;
  Status s = client->WaitAsync(7, &y, naarpc::Deadline::After(kHangGuard)).get();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(y, 7u);
  ::close(file);
}

// Each callback submits the next call: they all run on the engine thread,
// each after the previous call ended.
TEST_P(AsyncEngineTest, CallsChainedFromCallbacksRunOneAfterAnother) {
  gate_.Open();
  auto client = MakeClient(2);
  constexpr int kCalls = 300;
  std::vector<uint32_t> ys(kCalls, 0);
  std::set<std::thread::id> threads;
  std::promise<Status> all_done;
  std::function<void(int)> next = [&](int i) {
    client->WaitAsync(
        1000 + i, &ys[i],
        [&, i](Status s) {
          threads.insert(std::this_thread::get_id());
          if (!s.ok() || i + 1 == kCalls) {
            all_done.set_value(s);
            return;
          }
          if (ys[i] != uint32_t(1000 + i)) {
            all_done.set_value(naarpc::InternalError("call " + std::to_string(i) + ": wrong y"));
            return;
          }
          next(i + 1);
        },
        naarpc::Deadline::After(kHangGuard));
  };
  next(0);
  Status s = all_done.get_future().get();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(ys[kCalls - 1], uint32_t(1000 + kCalls - 1));
  EXPECT_EQ(threads.size(), 1u);
  EXPECT_EQ(threads.count(std::this_thread::get_id()), 0u);
}

// Callbacks that keep the only session busy (each submits the next call) do
// not keep a blocking caller waiting for it forever.
TEST_P(AsyncEngineTest, ABlockingCallerGetsTheSessionFromABusyChainOfCallbacks) {
  gate_.Open();
  auto client = MakeClient(1);
  std::atomic<bool> stop{false};
  std::atomic<int> chained{0};
  uint32_t ay = 0;
  std::promise<void> running, chain_done;
  std::function<void()> next = [&] {
    client->WaitAsync(
        3, &ay,
        [&](Status s) {
          EXPECT_TRUE(s.ok()) << s.ToString();
          if (++chained == 10) running.set_value();
          if (stop.load()) {
            chain_done.set_value();
            return;
          }
          next();
        },
        naarpc::Deadline::After(kHangGuard));
  };
  next();
  running.get_future().wait();
  uint32_t y = 0;
  Status s = client->Wait(5, &y, naarpc::Deadline::After(kHangGuard));
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(y, 5u);
  stop.store(true);
  chain_done.get_future().wait();
  EXPECT_GE(chained.load(), 10);
}

// Several calls in flight and queued, each with its own deadline: each ends
// with kDeadlineExceeded (running: no answer; queued: no free session), and
// the client serves on.
TEST_P(AsyncEngineTest, EveryDeadlineOfManyEndsItsOwnCall) {
  constexpr size_t kSessions = 3;
  auto client = MakeClient(kSessions);
  // Connected first: the deadlines below are for the calls alone.
  {
    std::vector<naarpc::Result<e2e::LatchClient::WaitCall>> calls;
    for (size_t i = 0; i < kSessions; ++i) {
      calls.push_back(client->NewWaitCall(naarpc::Deadline::After(kHangGuard)));
      ASSERT_TRUE(calls.back().ok()) << calls.back().status().ToString();
    }
  }
  // Seconds, not milliseconds: a running call's request must reach its
  // kernel before its deadline, also on a loaded machine.
  const std::vector<int> running_ms = {3000, 1000, 2000};
  const std::vector<int> queued_ms = {2500, 1500};
  std::vector<uint32_t> ys(running_ms.size() + queued_ms.size(), 0);
  std::vector<std::future<Status>> running, queued;
  for (size_t i = 0; i < running_ms.size(); ++i) {
    running.push_back(client->WaitAsync(uint32_t(i + 1), &ys[i],
                                        naarpc::Deadline::After(std::chrono::milliseconds(running_ms[i]))));
  }
  ASSERT_TRUE(gate_.AwaitRunning(int(kSessions)));
  for (size_t i = 0; i < queued_ms.size(); ++i) {
    queued.push_back(client->WaitAsync(uint32_t(10 + i), &ys[running_ms.size() + i],
                                       naarpc::Deadline::After(std::chrono::milliseconds(queued_ms[i]))));
  }
  for (auto& f : running) {
    Status s = f.get();
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
    EXPECT_NE(s.message().find("no answer from the NAA"), std::string::npos) << s.ToString();
  }
  for (auto& f : queued) {
    Status s = f.get();
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
    EXPECT_NE(s.message().find("Latch.Wait"), std::string::npos) << s.ToString();
  }
  for (uint32_t y : ys) EXPECT_EQ(y, 0u);
  gate_.Open();
  uint32_t y = 0;
  Status again = client->WaitAsync(42, &y, naarpc::Deadline::After(kHangGuard)).get();
  ASSERT_TRUE(again.ok()) << again.ToString();
  EXPECT_EQ(y, 42u);
}

// A callback that submits another call while the client is being destroyed
// (its call was cancelled) gets that call cancelled too, before the client
// is gone.
TEST_P(AsyncEngineTest, ACallSubmittedByACancelledCallbackIsCancelledToo) {
  auto client = MakeClient(1);
  uint32_t y1 = 0, y2 = 0;
  std::promise<Status> first, second;
  e2e::LatchClient* raw = client.get();
  client->WaitAsync(
      1, &y1,
      [&](Status s) {
        first.set_value(s);
        raw->WaitAsync(2, &y2, [&](Status s2) { second.set_value(std::move(s2)); },
                       naarpc::Deadline::After(kHangGuard));
      },
      naarpc::Deadline::After(kHangGuard));
  ASSERT_TRUE(gate_.AwaitRunning(1));
  client.reset();
  auto f1 = first.get_future();
  auto f2 = second.get_future();
  ASSERT_EQ(f1.wait_for(0s), std::future_status::ready);
  ASSERT_EQ(f2.wait_for(0s), std::future_status::ready);
  EXPECT_EQ(f1.get().code(), StatusCode::kCancelled);
  EXPECT_EQ(f2.get().code(), StatusCode::kCancelled);
  EXPECT_EQ(y1, 0u);
  EXPECT_EQ(y2, 0u);
}

// One session, calls driven by StartCall / ContinueCall and poll(2) on
// notify_fd, interleaved with blocking calls and PeerGone (which arm and
// consume notifications their own way): no completion is missed (a missed
// one would leave poll waiting until the hang guard).
TEST_P(AsyncEngineTest, ContinueCallKeepsUpAcrossBlockingCallsOnItsSession) {
  gate_.Open();
  auto opened = naarpc::ClientSession::Open(
      *transport_, address_, server_->port(),
      {{.name = "x", .direction = naarpc::Direction::kIn, .size = 4},
       {.name = "y", .direction = naarpc::Direction::kOut, .size = 4}});
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  naarpc::ClientSession& session = **opened;
  const int fd = session.notify_fd();
  ASSERT_GE(fd, 0);
  for (uint32_t i = 0; i < 90; ++i) {
    std::memcpy(session.buffer(0).data(), &i, sizeof i);
    if (i % 3 == 2) {
      Status s = session.Call(e2e::LatchClient::kWaitFunctionCode, naarpc::Deadline::After(kHangGuard));
      ASSERT_TRUE(s.ok()) << "blocking call " << i << ": " << s.ToString();
    } else {
      Status s = session.StartCall(e2e::LatchClient::kWaitFunctionCode,
                                   naarpc::Deadline::After(kHangGuard));
      ASSERT_TRUE(s.ok()) << s.ToString();
      std::optional<Status> end;
      while (!(end = session.ContinueCall())) {
        pollfd p{fd, POLLIN, 0};
        ASSERT_EQ(::poll(&p, 1, int(std::chrono::milliseconds(kHangGuard).count())), 1)
            << "call " << i << ": notify_fd never became readable";
      }
      ASSERT_TRUE(end->ok()) << "call " << i << ": " << end->ToString();
    }
    uint32_t y = 0;
    std::memcpy(&y, session.buffer(1).data(), sizeof y);
    EXPECT_EQ(y, i);
    if (i % 4 == 1) {
      EXPECT_FALSE(session.PeerGone());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, AsyncEngineTest, ::testing::Values("emulated", "verbs"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
