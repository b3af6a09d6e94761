// The fault matrix: each side killed (SIGKILL), frozen (SIGSTOP, past the
// other side's deadline) or disconnected in every protocol state, plus
// connections dropped at chosen work requests, NaaServer::Shutdown with a
// call in flight, and corruption of data-phase and MRSP messages. Every cell
// asserts the status the surviving side reports, that it is reported (a
// deadline bounds every wait: nothing can hang; durations are never
// asserted), and, where the NAA survives, that it serves a fresh client
// correctly; where the NAA dies, that a restarted NAA serves a new session.
//
// The fault always hits a state that is known to be reached: the peer
// process (tests/e2e/fault_peer) prints "READY <state>" at its stop point
// and blocks there; the in-process NAA reports through ProbeTransport (it
// accepted / answered the MRSP / is about to write results) and through
// MatrixKernels (a kernel signals "calculating" and waits for a latch); the
// emulated FaultInjector fires at one chosen work request. No sleeps.
//
// Parameterised over the transport: "emulated" (loopback) and "verbs" (skips
// without an RDMA device; runs in the Soft-RoCE guest, tools/rxe-vm). Cells
// that need the emulated fault injector skip on verbs and say why.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "naarpc/client_session.h"
#include "naarpc/naa_server.h"
#include "runtime/transport_impl/emulated/emulated_transport.h"
#include "runtime/transport_impl/verbs/verbs_transport.h"
#include "tests/testing/forwarding_transport.h"
#include "tests/testing/log_capture.h"
#include "tests/testing/peer_process.h"

extern char** environ;

namespace naarpc {

// gtest prints StatusCode values by name (found by argument-dependent lookup).
static void PrintTo(StatusCode code, std::ostream* os) { *os << StatusCodeName(code); }

namespace {

using namespace std::chrono_literals;

// --- The matrix's routine (tests/e2e/fault_peer.cc has the same) ------------
// Layout: a (in), b (in), out1 (out), out2 (out), kRegionBytes each. A call
// is [metadata on the first call,] WRITE a, WRITE_WITH_IMM b; a reply is
// WRITE out1, WRITE_WITH_IMM out2: both have a middle write and a final one.
// kFill: out1 = a ^ b, out2 = a + b (bytewise).
constexpr uint8_t kFill = 1;
// As kFill, after signalling "calculating" and waiting for the test's latch.
constexpr uint8_t kBlock = 2;
// kBlock with a kernel time limit of kKernelLimit.
constexpr uint8_t kBlockLimited = 3;
constexpr size_t kRegionBytes = 256;
constexpr uint32_t kMetadataBytes = 2 * kMetadataEntrySize;  // two return regions
constexpr auto kKernelLimit = 3000ms;  // Shutdown must begin first (ShutdownWithARunawayKernelInFlight)

// Upper bound of every wait for an event that must come: never reached when
// things work, so it costs nothing; it only keeps a broken run from hanging.
constexpr auto kPatience = std::chrono::milliseconds(30'000);
// Deadline of an operation against a frozen peer (it must expire). Long
// enough for the peer to reach its stop point and be frozen first (checked).
constexpr auto kFrozenPeerDeadline = std::chrono::milliseconds(2'000);
// The NAA's timeouts in the host-frozen cells (they must expire for the
// frozen host; a healthy client must get through its MRSP and call within
// them, also on a slow machine: they apply to every connection).
constexpr auto kNaaMrspTimeout = std::chrono::milliseconds(2'000);
constexpr auto kNaaIdleTimeout = std::chrono::milliseconds(2'000);

std::vector<RegionSpec> MatrixLayout() {
  return {{"a", Direction::kIn, kRegionBytes},
          {"b", Direction::kIn, kRegionBytes},
          {"out1", Direction::kOut, kRegionBytes},
          {"out2", Direction::kOut, kRegionBytes}};
}

uint8_t InA(size_t i, int salt) { return uint8_t(i * 3 + 1 + salt); }
uint8_t InB(size_t i, int salt) { return uint8_t(i * 5 + 7 + 11 * salt); }

void FillInputs(ClientSession& s, int salt) {
  auto a = s.buffer(0), b = s.buffer(1), o1 = s.buffer(2), o2 = s.buffer(3);
  for (size_t i = 0; i < kRegionBytes; ++i) {
    a[i] = std::byte(InA(i, salt));
    b[i] = std::byte(InB(i, salt));
    o1[i] = o2[i] = std::byte{0};
  }
}

// out1 == a ^ b and out2 == a + b for the inputs FillInputs(salt) wrote.
::testing::AssertionResult ResultsAreRight(ClientSession& s, int salt) {
  auto o1 = s.buffer(2), o2 = s.buffer(3);
  for (size_t i = 0; i < kRegionBytes; ++i) {
    const uint8_t a = InA(i, salt), b = InB(i, salt);
    if (uint8_t(o1[i]) != uint8_t(a ^ b) || uint8_t(o2[i]) != uint8_t(a + b)) {
      return ::testing::AssertionFailure()
             << "wrong result at byte " << i << ": out1 " << int(o1[i]) << " (want "
             << int(a ^ b) << "), out2 " << int(o2[i]) << " (want " << int(uint8_t(a + b)) << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// A one-shot event.
class Event {
 public:
  void Set() {
    // Notifies under the lock: a waiter may destroy the event once it sees
    // it set, which it cannot before the lock is released.
    std::lock_guard<std::mutex> lock(mu_);
    set_ = true;
    cv_.notify_all();
  }
  // True once set; false if `limit` passed first.
  bool Wait(std::chrono::milliseconds limit = kPatience) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, limit, [this] { return set_; });
  }
  bool IsSet() {
    std::lock_guard<std::mutex> lock(mu_);
    return set_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool set_ = false;
};

// Runs a function when the scope ends (releases latches before a thread
// that waits for them is joined, also when an ASSERT returns early).
class AtScopeExit {
 public:
  explicit AtScopeExit(std::function<void()> f) : f_(std::move(f)) {}
  ~AtScopeExit() { f_(); }
  AtScopeExit(const AtScopeExit&) = delete;
  AtScopeExit& operator=(const AtScopeExit&) = delete;

 private:
  std::function<void()> f_;
};

// The in-process NAA's routine: kFill; kBlock/kBlockLimited signal
// `calculating` and wait for Release() (bounded), then fill.
class MatrixKernels final : public NaaHandler {
 public:
  Event calculating;  // a blocking kernel started
  Event returned;     // a blocking kernel returned
  void Release() { release_.Set(); }

  uint8_t Handle(NaaCall& call) override {
    switch (call.function_code) {
      case kFill:
        return Fill(call);
      case kBlock:
      case kBlockLimited: {
        calculating.Set();
        if (!release_.Wait()) return kNaaStatusKernelFailed;
        const uint8_t status = Fill(call);
        returned.Set();
        return status;
      }
      default:
        return kNaaStatusUnknownFunction;
    }
  }
  std::chrono::milliseconds KernelTimeout(uint8_t function_code) const override {
    return function_code == kBlockLimited ? std::chrono::milliseconds(kKernelLimit)
                                          : std::chrono::milliseconds::zero();
  }

 private:
  static uint8_t Fill(NaaCall& call) {
    auto& p = call.params;
    if (p.size() != 4) return kNaaStatusBadRegionLayout;
    for (const auto& r : p) {
      if (r.data.size() != kRegionBytes) return kNaaStatusBadRegionLayout;
    }
    for (size_t i = 0; i < kRegionBytes; ++i) {
      const auto a = uint8_t(p[0].data[i]), b = uint8_t(p[1].data[i]);
      p[2].data[i] = std::byte(a ^ b);
      p[3].data[i] = std::byte(uint8_t(a + b));
    }
    return kNaaStatusSuccess;
  }
  Event release_;
};

bool HasOpcode(std::span<const SendRequest> requests, WorkOpcode op) {
  for (const SendRequest& r : requests) {
    if (r.opcode == op) return true;
  }
  return false;
}

// The in-process NAA's transport, wrapped to report what the NAA did on its
// first accepted connection (the faulty host's) and when Shutdown began;
// optionally holds that connection's first reply until released.
class ProbeTransport final : public Transport {
 public:
  explicit ProbeTransport(Transport& inner) : inner_(inner) {}

  Event accepted;            // the first connection was accepted
  Event answered;            // ... its MRSP answer was posted
  Event answer_acked;        // ... and acknowledged by the host (polled)
  Event replying;            // ... its first reply is held (HoldFirstReply)
  Event listener_shut_down;  // Listener::Shutdown was called (Shutdown began)

  void HoldFirstReply() { hold_reply_ = true; }
  void ReleaseReply() { release_reply_.Set(); }

  std::string_view name() const override { return inner_.name(); }
  using Transport::Connect;
  Result<std::unique_ptr<Connection>> Connect(const std::string& host, uint16_t port,
                                              Deadline deadline,
                                              const ConnectOptions& options) override {
    return inner_.Connect(host, port, deadline, options);
  }
  Result<std::unique_ptr<Listener>> Listen(const std::string& host, uint16_t port) override {
    NAARPC_ASSIGN_OR_RETURN(std::unique_ptr<Listener> l, inner_.Listen(host, port));
    return std::unique_ptr<Listener>(std::make_unique<ProbeListener>(std::move(l), this));
  }

 private:
  class ProbeConnection final : public testing::ForwardingConnection {
   public:
    ProbeConnection(std::unique_ptr<Connection> inner, ProbeTransport* owner)
        : ForwardingConnection(std::move(inner)), owner_(owner) {}
    Status PostSend(std::span<const SendRequest> requests) override {
      if (HasOpcode(requests, WorkOpcode::kSend)) {
        Status s = inner().PostSend(requests);
        owner_->answered.Set();
        return s;
      }
      if (!requests.empty() && requests.back().opcode == WorkOpcode::kRdmaWriteWithImm &&
          owner_->hold_reply_.load() && !held_) {
        held_ = true;
        owner_->replying.Set();
        owner_->release_reply_.Wait();
      }
      return inner().PostSend(requests);
    }
    // However the NAA takes its completions (blocking or event-driven).
    Result<size_t> PollCompletions(std::span<Completion> out, Deadline deadline) override {
      return NoteAcks(out, inner().PollCompletions(out, deadline));
    }
    Result<size_t> TryPollCompletions(std::span<Completion> out) override {
      return NoteAcks(out, inner().TryPollCompletions(out));
    }

   private:
    Result<size_t> NoteAcks(std::span<Completion> out, Result<size_t> n) {
      for (size_t i = 0; n.ok() && i < *n; ++i) {
        if (out[i].opcode == WorkOpcode::kSend && out[i].status == CompletionStatus::kSuccess) {
          owner_->answer_acked.Set();
        }
      }
      return n;
    }

    ProbeTransport* owner_;
    bool held_ = false;
  };

  class ProbeListener final : public Listener {
   public:
    ProbeListener(std::unique_ptr<Listener> inner, ProbeTransport* owner)
        : inner_(std::move(inner)), owner_(owner) {}
    Result<std::unique_ptr<Connection>> Accept(Deadline deadline) override {
      NAARPC_ASSIGN_OR_RETURN(std::unique_ptr<Connection> c, inner_->Accept(deadline));
      if (!first_done_) {
        first_done_ = true;
        c = std::make_unique<ProbeConnection>(std::move(c), owner_);
        owner_->accepted.Set();
      }
      return c;
    }
    uint16_t port() const override { return inner_->port(); }
    void Shutdown() override {
      owner_->listener_shut_down.Set();
      inner_->Shutdown();
    }

   private:
    std::unique_ptr<Listener> inner_;
    ProbeTransport* owner_;
    bool first_done_ = false;  // Accept runs on one thread
  };

  Transport& inner_;
  std::atomic<bool> hold_reply_{false};
  Event release_reply_;
};

// A fault injector driven by a predicate; counts the faults it injected.
class PredicateFaults final : public FaultInjector {
 public:
  explicit PredicateFaults(std::function<FaultAction(const FaultPoint&)> f) : f_(std::move(f)) {}
  FaultAction OnPost(const FaultPoint& point) override {
    std::lock_guard<std::mutex> lock(mu_);
    FaultAction a = f_(point);
    if (a.kind != FaultAction::Kind::kNone) ++fired_;
    return a;
  }
  int fired() {
    std::lock_guard<std::mutex> lock(mu_);
    return fired_;
  }

 private:
  std::mutex mu_;
  std::function<FaultAction(const FaultPoint&)> f_;
  int fired_ = 0;
};

// Fires `action` at the first work request that `match` selects, once.
std::shared_ptr<PredicateFaults> Once(std::function<bool(const FaultPoint&)> match,
                                      FaultAction action) {
  auto done = std::make_shared<bool>(false);
  return std::make_shared<PredicateFaults>([=](const FaultPoint& p) {
    if (*done || !match(p)) return FaultAction{};
    *done = true;
    return action;
  });
}

// --- The peer process (tests/e2e/fault_peer) ---------------------------------

using testing::PeerProcess;

// --- Fixture ------------------------------------------------------------------

enum class Fault { kKill, kFreeze, kDisconnect };

std::string FaultName(Fault f) {
  switch (f) {
    case Fault::kKill: return "killed";
    case Fault::kFreeze: return "frozen";
    case Fault::kDisconnect: return "disconnected";
  }
  return "?";
}

// Address the NAA listens on: loopback for the emulated transport; the
// guest's rxe netdev address for verbs (set by tools/rxe-vm).
std::string TestAddress(const std::string& transport) {
  if (transport == "verbs") {
    if (const char* a = std::getenv("NAARPC_TEST_ADDRESS")) return a;
  }
  return "127.0.0.1";
}

std::unique_ptr<Transport> MakeTransport(const std::string& name,
                                         std::shared_ptr<FaultInjector> faults = nullptr) {
  if (name == "verbs") {
    auto t = NewVerbsTransport();
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(t).value() : nullptr;
  }
  EmulatedOptions options;
  options.faults = std::move(faults);
  return NewEmulatedTransport(options);
}

ClientOptions PatientClient() {
  ClientOptions o;
  o.connect_timeout = kPatience;
  o.mrsp_timeout = kPatience;
  return o;
}

class MatrixBase : public ::testing::Test {
 protected:
  // Empty, or why this transport cannot run here.
  static std::string Unavailable(const std::string& transport) {
    if (transport == "verbs" && !RdmaDeviceAvailable()) {
      return "no RDMA device here; the verbs cells run inside the Soft-RoCE guest "
             "(tools/rxe-vm)";
    }
    return "";
  }

  void Init(const std::string& transport) {
    signal(SIGPIPE, SIG_IGN);  // a command to a peer that just died must not kill us
    transport_name_ = transport;
    address_ = TestAddress(transport);
    transport_ = MakeTransport(transport);
    ASSERT_NE(transport_, nullptr);
    probe_ = std::make_unique<ProbeTransport>(*transport_);
  }

  void TearDown() override {
    // Nothing may stay blocked on a latch while the server shuts down.
    kernels_.Release();
    if (probe_) probe_->ReleaseReply();
    if (server_) server_->Shutdown();
  }

  bool emulated() const { return transport_name_ == "emulated"; }

  ServerOptions LoggingServerOptions() {
    ServerOptions o;
    o.log = log_.Sink();
    return o;
  }

  // Starts the in-process NAA on the probe (or `on`).
  void StartServer(const ServerOptions& options, Transport* on = nullptr) {
    auto s = NaaServer::Start(on ? *on : *probe_, address_, 0, kernels_, options);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
  }

  Result<std::unique_ptr<ClientSession>> OpenTo(uint16_t port, const ClientOptions& options,
                                                Transport* via = nullptr) {
    return ClientSession::Open(via ? *via : *transport_, address_, port, MatrixLayout(), options);
  }

  // A fresh client: opens a session to `port`, calls kFill, checks the
  // results, closes.
  ::testing::AssertionResult FreshClientIsServed(uint16_t port, int salt) {
    auto s = OpenTo(port, PatientClient());
    if (!s.ok()) return ::testing::AssertionFailure() << "open: " << s.status().ToString();
    FillInputs(**s, salt);
    Status st = (*s)->Call(kFill, Deadline::After(kPatience));
    if (!st.ok()) return ::testing::AssertionFailure() << "call: " << st.ToString();
    auto right = ResultsAreRight(**s, salt);
    if (!right) return right;
    if (Status c = (*s)->Close(); !c.ok()) {
      return ::testing::AssertionFailure() << "close: " << c.ToString();
    }
    return ::testing::AssertionSuccess();
  }

  // Starts fault_peer as a host of server_.
  std::unique_ptr<PeerProcess> StartHostPeer(const std::string& stop_at, uint8_t function) {
    return PeerProcess::Start("fault_peer", {"host", "--transport=" + transport_name_, "--address=" + address_,
                               "--port=" + std::to_string(server_->port()),
                               "--stop-at=" + stop_at, "--function=" + std::to_string(function)});
  }
  // Starts fault_peer as an NAA; `port` gets its port (0 if it failed).
  std::unique_ptr<PeerProcess> StartNaaPeer(const std::string& stop_at, uint16_t& port) {
    port = 0;
    auto p = PeerProcess::Start("fault_peer", {"naa", "--transport=" + transport_name_, "--address=" + address_,
                                 "--stop-at=" + stop_at});
    if (!p) return p;
    std::string line;
    if (p->ExpectPrefix("port ", line)) port = uint16_t(std::stoi(line.substr(5)));
    return p;
  }

  // The NAA logged nothing: it saw the host leave (kDisconnected or a clean
  // end), which it does not log, and no other failure.
  // Nothing but a host that left with a call in flight (docs/server.md, "Log").
  ::testing::AssertionResult NaaLoggedNothing() {
    std::string all;
    for (size_t p = 0, e; (e = log_.All().find('\n', p)) != std::string::npos; p = e + 1) {
      const std::string line = log_.All().substr(p, e - p);
      if (line.find("]: disconnected during a call of") == std::string::npos &&
          line.find("]: disconnected before acknowledging the results of") == std::string::npos) {
        all += line + "\n";
      }
    }
    if (all.empty()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "the NAA logged:\n" << all;
  }

  std::string transport_name_;
  std::string address_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<ProbeTransport> probe_;
  MatrixKernels kernels_;
  testing::LogCapture log_;
  std::unique_ptr<NaaServer> server_;  // last: goes first
};

// --- Host-side faults: the in-process NAA survives ----------------------------
//
// The host is fault_peer in its own process; the cell's state is reached when
// the host says so (READY) and the NAA's side of it is confirmed by the probe
// or the kernel latch.

enum class HostState {
  kHello,        // connected, nothing sent; the NAA waits for the MRSP request
  kMrsp,         // the MRSP request sent; the NAA has answered; host not polling
  kDataSending,  // the call's first writes sent, its final WRITE_WITH_IMM not
  kCalculating,  // the NAA's kernel runs (blocked on the latch)
  kNaaReplying,  // the NAA is about to write the results (held by the probe)
  kIdle,         // between calls: one call done, the session open
};

std::string HostStateName(HostState s) {
  switch (s) {
    case HostState::kHello: return "hello";
    case HostState::kMrsp: return "mrsp";
    case HostState::kDataSending: return "data_sending";
    case HostState::kCalculating: return "calculating";
    case HostState::kNaaReplying: return "naa_replying";
    case HostState::kIdle: return "idle";
  }
  return "?";
}

struct HostCell {
  std::string transport;
  HostState state;
  Fault fault;
};

std::string HostCellName(const ::testing::TestParamInfo<HostCell>& info) {
  return info.param.transport + "_" + HostStateName(info.param.state) + "_" +
         FaultName(info.param.fault);
}

void PrintTo(const HostCell& c, std::ostream* os) {
  *os << c.transport << " host " << HostStateName(c.state) << " " << FaultName(c.fault);
}

std::vector<HostCell> AllHostCells() {
  std::vector<HostCell> cells;
  for (const char* t : {"emulated", "verbs"}) {
    for (HostState s : {HostState::kHello, HostState::kMrsp, HostState::kDataSending,
                        HostState::kCalculating, HostState::kNaaReplying, HostState::kIdle}) {
      for (Fault f : {Fault::kKill, Fault::kFreeze, Fault::kDisconnect}) cells.push_back({t, s, f});
    }
  }
  return cells;
}

class HostFaultTest : public MatrixBase, public ::testing::WithParamInterface<HostCell> {
 protected:
  void SetUp() override {
    if (std::string why = Unavailable(GetParam().transport); !why.empty()) GTEST_SKIP() << why;
    Init(GetParam().transport);
  }
};

// What each cell asserts:
//  * killed / disconnected: the NAA closes the connection without logging
//    anything (it saw the host leave: kDisconnected, which it does not log);
//  * frozen in hello: the NAA's mrsp_timeout passes and it logs
//    DEADLINE_EXCEEDED ("no MRSP request within") and closes the connection;
//  * frozen after the MRSP: the NAA holds an idle connection; with
//    ServerOptions::idle_timeout it logs "idle: ... closing" and closes it;
//  * always: a fresh client is served correctly during the fault and after;
//  * disconnected: the host itself reports kDisconnected.
TEST_P(HostFaultTest, NaaReportsItAndKeepsServing) {
  const HostCell& cell = GetParam();
  ServerOptions options = LoggingServerOptions();
  if (cell.fault == Fault::kFreeze) {
    // The timeout that must notice the frozen host; the other stays long.
    if (cell.state == HostState::kHello) {
      options.mrsp_timeout = kNaaMrspTimeout;
    } else {
      options.idle_timeout = kNaaIdleTimeout;
    }
  }
  if (cell.state == HostState::kNaaReplying) probe_->HoldFirstReply();
  ASSERT_NO_FATAL_FAILURE(StartServer(options));

  std::string stop_at = "none";
  switch (cell.state) {
    case HostState::kHello: stop_at = "hello"; break;
    case HostState::kMrsp: stop_at = "mrsp"; break;
    case HostState::kDataSending: stop_at = "data_sending"; break;
    case HostState::kIdle: stop_at = "idle"; break;
    default: break;
  }
  auto host = StartHostPeer(stop_at, cell.state == HostState::kCalculating ? kBlock : kFill);
  ASSERT_NE(host, nullptr);

  // Reach the state, on both sides.
  switch (cell.state) {
    case HostState::kHello:
      ASSERT_TRUE(host->Expect("READY hello"));
      ASSERT_TRUE(probe_->accepted.Wait());
      break;
    case HostState::kMrsp:
      ASSERT_TRUE(host->Expect("READY mrsp"));
      ASSERT_TRUE(probe_->answered.Wait());
      // An HCA takes the answer whether or not its process polls: on verbs
      // the state is "answer delivered, not polled". (The emulated transport
      // makes progress only while its owner polls: the answer stays unread.)
      if (!emulated()) {
        ASSERT_TRUE(probe_->answer_acked.Wait());
      }
      break;
    case HostState::kDataSending:
      ASSERT_TRUE(host->Expect("open OK"));
      ASSERT_TRUE(host->Expect("READY data_sending"));
      ASSERT_TRUE(probe_->answered.Wait());
      break;
    case HostState::kCalculating:
      ASSERT_TRUE(host->Expect("calling"));
      ASSERT_TRUE(kernels_.calculating.Wait());
      break;
    case HostState::kNaaReplying:
      ASSERT_TRUE(host->Expect("calling"));
      ASSERT_TRUE(probe_->replying.Wait());
      break;
    case HostState::kIdle:
      ASSERT_TRUE(host->Expect("result OK"));
      ASSERT_TRUE(host->Expect("READY idle"));
      break;
  }

  // The fault.
  switch (cell.fault) {
    case Fault::kKill:
      host->Kill(SIGKILL);
      EXPECT_EQ(host->Wait(), 128 + SIGKILL);
      break;
    case Fault::kFreeze:
      ASSERT_TRUE(host->Freeze());
      break;
    case Fault::kDisconnect:
      host->Send("disconnect");
      ASSERT_TRUE(host->Expect("DISCONNECTED"));
      break;
  }
  // The NAA goes on with what the fault interrupted.
  kernels_.Release();
  probe_->ReleaseReply();

  EXPECT_TRUE(FreshClientIsServed(server_->port(), 1)) << "while the faulty host is "
                                                       << FaultName(cell.fault);

  // What the NAA reports, and that it lets the connection go.
  if (cell.fault == Fault::kFreeze) {
    if (cell.state == HostState::kHello) {
      EXPECT_TRUE(log_.WaitFor("no MRSP request within", kPatience)) << log_.All();
      EXPECT_NE(log_.All().find("DEADLINE_EXCEEDED: no MRSP request within " +
                                std::to_string(kNaaMrspTimeout.count()) + " ms"),
                std::string::npos)
          << log_.All();
    } else {
      const bool before_any_call =
          cell.state == HostState::kMrsp || cell.state == HostState::kDataSending;
      const std::string line = std::string("since ") +
                               (before_any_call ? "the MRSP" : "call 1") +
                               "; closing the connection";
      EXPECT_TRUE(log_.WaitFor(line, kPatience)) << "want '" << line << "', got:\n" << log_.All();
    }
  }
  EXPECT_TRUE(server_->WaitForOpenConnectionsAtMost(0, Deadline::After(kPatience)))
      << "the faulty host's connection is still open";
  if (cell.fault != Fault::kFreeze) {
    EXPECT_TRUE(NaaLoggedNothing());
    if (emulated() && (cell.state == HostState::kCalculating ||
                       cell.state == HostState::kNaaReplying)) {
      // A host gone while its call ran: logged with the call.
      EXPECT_TRUE(log_.WaitFor("]: disconnected ", kPatience)) << log_.All();
    }
  }

  if (cell.fault == Fault::kDisconnect) {
    // The host's own view of the disconnect it made.
    switch (cell.state) {
      case HostState::kHello:
        EXPECT_TRUE(host->Expect("open DISCONNECTED"));
        break;
      case HostState::kMrsp:
        if (emulated()) {
          EXPECT_TRUE(host->Expect("open DISCONNECTED"));
        } else {
          // The answer was in its completion queue before the disconnect:
          // Open completes, and the disconnect is reported by the call.
          EXPECT_TRUE(host->Expect("open OK"));
          EXPECT_TRUE(host->Expect("result DISCONNECTED"));
        }
        break;
      case HostState::kDataSending:
      case HostState::kCalculating:
      case HostState::kNaaReplying:
        EXPECT_TRUE(host->Expect("result DISCONNECTED"));
        break;
      case HostState::kIdle:
        break;  // its call had returned OK
    }
  }
  EXPECT_TRUE(FreshClientIsServed(server_->port(), 2)) << "after the faulty connection closed";
}

INSTANTIATE_TEST_SUITE_P(Matrix, HostFaultTest, ::testing::ValuesIn(AllHostCells()),
                         HostCellName);

// --- NAA-side faults: the in-process host survives ----------------------------
//
// The NAA is fault_peer in its own process (a NaaServer); the cell's state is
// reached when it says so (READY). Afterwards a restarted NAA must serve a
// new session.

enum class NaaState {
  kBeforeAccept,    // listening; the transport handshake is not answered yet
  kHello,           // the connection accepted; nothing received
  kMrsp,            // the MRSP request received; no answer sent
  kDataReceiving,   // the call's WRITE_WITH_IMM polled; kernel not started
  kCalculating,     // inside the kernel
  kDataSending,     // the reply's first write sent, its final one not
  kIdle,            // between calls: the reply sent; the host calls next
};

std::string NaaStateName(NaaState s) {
  switch (s) {
    case NaaState::kBeforeAccept: return "before_accept";
    case NaaState::kHello: return "hello";
    case NaaState::kMrsp: return "mrsp";
    case NaaState::kDataReceiving: return "data_receiving";
    case NaaState::kCalculating: return "calculating";
    case NaaState::kDataSending: return "data_sending";
    case NaaState::kIdle: return "idle";
  }
  return "?";
}

struct NaaCell {
  std::string transport;
  NaaState state;
  Fault fault;
};

std::string NaaCellName(const ::testing::TestParamInfo<NaaCell>& info) {
  return info.param.transport + "_" +
         NaaStateName(info.param.state) + "_" + FaultName(info.param.fault);
}

void PrintTo(const NaaCell& c, std::ostream* os) {
  *os << c.transport << " NAA " << NaaStateName(c.state) << " " << FaultName(c.fault);
}

std::vector<NaaCell> AllNaaCells() {
  std::vector<NaaCell> cells;
  for (const char* t : {"emulated", "verbs"}) {
    // Before it accepts, an NAA can be frozen (the handshake is never
    // answered) or gone (killed); it has no connection to disconnect.
    cells.push_back({t, NaaState::kBeforeAccept, Fault::kKill});
    cells.push_back({t, NaaState::kBeforeAccept, Fault::kFreeze});
    for (NaaState s : {NaaState::kHello, NaaState::kMrsp, NaaState::kDataReceiving,
                       NaaState::kCalculating, NaaState::kDataSending, NaaState::kIdle}) {
      for (Fault f : {Fault::kKill, Fault::kFreeze, Fault::kDisconnect}) cells.push_back({t, s, f});
    }
  }
  return cells;
}

class NaaFaultTest : public MatrixBase, public ::testing::WithParamInterface<NaaCell> {
 protected:
  void SetUp() override {
    if (std::string why = Unavailable(GetParam().transport); !why.empty()) GTEST_SKIP() << why;
    Init(GetParam().transport);
  }

  void ApplyFault(PeerProcess& naa, Fault fault) {
    switch (fault) {
      case Fault::kKill:
        naa.Kill(SIGKILL);
        EXPECT_EQ(naa.Wait(), 128 + SIGKILL);
        break;
      case Fault::kFreeze:
        ASSERT_TRUE(naa.Freeze());
        break;
      case Fault::kDisconnect:
        naa.Send("disconnect");
        ASSERT_TRUE(naa.Expect("DISCONNECTED"));
        break;
    }
  }
};

// What each cell asserts: the host's Open or Call fails with
//  * kDisconnected when the NAA was killed or disconnected (the host noticed;
//    its deadline is kPatience, so a deadline status would mean it did not),
//  * kDeadlineExceeded when the NAA is frozen (its deadline, kFrozenPeerDeadline),
//  * kUnavailable when no NAA runs at all (killed before accepting);
// a failed Call leaves the session in ERROR; a restarted NAA serves a new
// session correctly.
TEST_P(NaaFaultTest, HostGetsAClearStatusAndARestartedNaaServes) {
  const NaaCell& cell = GetParam();
  const bool frozen = cell.fault == Fault::kFreeze;
  std::string stop_at = "none";
  switch (cell.state) {
    case NaaState::kHello: stop_at = "hello"; break;
    case NaaState::kMrsp: stop_at = "mrsp"; break;
    case NaaState::kDataReceiving: stop_at = "data_receiving"; break;
    case NaaState::kCalculating: stop_at = "calculating"; break;
    case NaaState::kDataSending: stop_at = "data_sending"; break;
    case NaaState::kIdle: stop_at = "idle"; break;
    case NaaState::kBeforeAccept: break;
  }
  uint16_t port = 0;
  auto naa = StartNaaPeer(stop_at, port);
  ASSERT_NE(naa, nullptr);
  ASSERT_NE(port, 0) << "the NAA process did not start";

  // The operation the fault hits has a short deadline only if the NAA is
  // frozen (then it must expire); everything else is patient.
  ClientOptions open_options = PatientClient();
  const auto call_limit = frozen ? kFrozenPeerDeadline : kPatience;
  Status got;
  bool returned_before_fault = false;
  std::unique_ptr<ClientSession> session;
  switch (cell.state) {
    case NaaState::kBeforeAccept: {
      // The fault first: the host meets a frozen NAA in the handshake, or
      // finds none.
      ApplyFault(*naa, cell.fault);
      if (HasFatalFailure()) return;
      // Killed: every attempt is refused until the connect timeout.
      open_options.connect_timeout = frozen ? kFrozenPeerDeadline : 500ms;
      got = OpenTo(port, open_options).status();
      break;
    }
    case NaaState::kHello:
    case NaaState::kMrsp: {
      if (frozen) open_options.mrsp_timeout = kFrozenPeerDeadline;
      auto open = std::async(std::launch::async, [&] { return OpenTo(port, open_options); });
      ASSERT_TRUE(naa->Expect("READY " + stop_at));
      returned_before_fault = open.wait_for(0s) == std::future_status::ready;
      ApplyFault(*naa, cell.fault);
      auto result = open.get();
      got = result.status();
      if (result.ok()) session = std::move(result).value();
      break;
    }
    case NaaState::kDataReceiving:
    case NaaState::kCalculating:
    case NaaState::kDataSending: {
      auto s = OpenTo(port, open_options);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      session = std::move(s).value();
      FillInputs(*session, 3);
      const uint8_t fn = cell.state == NaaState::kCalculating ? kBlock : kFill;
      auto call = std::async(std::launch::async, [&] {
        return session->Call(fn, Deadline::After(call_limit));
      });
      ASSERT_TRUE(naa->Expect("READY " + stop_at));
      returned_before_fault = call.wait_for(0s) == std::future_status::ready;
      ApplyFault(*naa, cell.fault);
      got = call.get();
      break;
    }
    case NaaState::kIdle: {
      auto s = OpenTo(port, open_options);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      session = std::move(s).value();
      FillInputs(*session, 4);
      Status first = session->Call(kFill, Deadline::After(kPatience));
      ASSERT_TRUE(first.ok()) << first.ToString();
      ASSERT_TRUE(ResultsAreRight(*session, 4));
      ASSERT_TRUE(naa->Expect("READY idle"));
      ApplyFault(*naa, cell.fault);
      FillInputs(*session, 5);
      got = session->Call(kFill, Deadline::After(call_limit));
      break;
    }
  }
  if (HasFatalFailure()) return;
  EXPECT_FALSE(returned_before_fault)
      << "the operation ended before the fault was applied, so this cell proves nothing: "
      << got.ToString();

  StatusCode want = frozen ? StatusCode::kDeadlineExceeded : StatusCode::kDisconnected;
  if (cell.state == NaaState::kBeforeAccept && cell.fault == Fault::kKill) {
    want = StatusCode::kUnavailable;
  }
  // On verbs an NAA frozen right after accepting, before its MRSP receive is
  // posted (the fault peer's wrapped listener runs no accept hook), answers
  // the request with RNR NAKs: the host's send fails once its retries are
  // used up (~31 ms with VerbsOptions' defaults), before the deadline.
  if (frozen && cell.transport == "verbs" && cell.state == NaaState::kHello) {
    want = StatusCode::kTransportError;
    EXPECT_NE(got.message().find("RNR retry exceeded"), std::string::npos) << got.ToString();
  }
  EXPECT_EQ(got.code(), want) << got.ToString();
  if (session) {
    EXPECT_EQ(session->state(), CommState::kError);
  }

  // A restarted NAA serves a new session.
  naa.reset();
  uint16_t fresh_port = 0;
  auto fresh = StartNaaPeer("none", fresh_port);
  ASSERT_NE(fresh, nullptr);
  ASSERT_NE(fresh_port, 0);
  EXPECT_TRUE(FreshClientIsServed(fresh_port, 6));
  fresh->CloseStdin();
  EXPECT_EQ(fresh->Wait(), 0) << "the restarted NAA did not shut down cleanly";
}

INSTANTIATE_TEST_SUITE_P(Matrix, NaaFaultTest, ::testing::ValuesIn(AllNaaCells()), NaaCellName);

// --- Single cells: fault injection, Shutdown, corruption -----------------------

class FaultMatrixTest : public MatrixBase, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    if (std::string why = Unavailable(GetParam()); !why.empty()) GTEST_SKIP() << why;
    Init(GetParam());
  }
  // For cells that need the emulated transport's fault injector.
  std::string NeedsInjector(const std::string& verbs_coverage) const {
    return "needs the emulated transport's FaultInjector (acting at one chosen work request); "
           "on verbs, " + verbs_coverage;
  }
};

// Host-side connection drops at chosen work requests: the host gets
// kDisconnected, the NAA closes the connection silently and serves others.
TEST_P(FaultMatrixTest, HostDropsAtItsMrspRequest) {
  if (!emulated()) {
    GTEST_SKIP() << NeedsInjector("HostFaultTest *_hello_disconnected covers the host leaving "
                                  "before its MRSP request");
  }
  auto faults = Once([](const FaultPoint& p) { return !p.is_listener_side && p.opcode == WorkOpcode::kSend; },
                     FaultAction::Drop());
  auto faulty = MakeTransport("emulated", faults);
  ASSERT_NO_FATAL_FAILURE(StartServer(LoggingServerOptions()));
  auto s = OpenTo(server_->port(), PatientClient(), faulty.get());
  EXPECT_EQ(faults->fired(), 1);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kDisconnected) << s.status().ToString();
  EXPECT_TRUE(FreshClientIsServed(server_->port(), 1));
  EXPECT_TRUE(server_->WaitForOpenConnectionsAtMost(0, Deadline::After(kPatience)));
  EXPECT_TRUE(NaaLoggedNothing());
}

// The host's connection drops at its final input write (the WRITE_WITH_IMM
// carrying the function code) or at a middle one (the plain WRITE of `a`).
TEST_P(FaultMatrixTest, HostDropsAtItsFinalInputWrite) {
  if (!emulated()) {
    GTEST_SKIP() << NeedsInjector("HostFaultTest *_data_sending_* covers a host lost between "
                                  "its middle writes and its final one");
  }
  auto faults = Once([](const FaultPoint& p) {
    return !p.is_listener_side && p.opcode == WorkOpcode::kRdmaWriteWithImm;
  }, FaultAction::Drop());
  auto faulty = MakeTransport("emulated", faults);
  ASSERT_NO_FATAL_FAILURE(StartServer(LoggingServerOptions()));
  auto s = OpenTo(server_->port(), PatientClient(), faulty.get());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  FillInputs(**s, 1);
  Status st = (*s)->Call(kFill, Deadline::After(kPatience));
  EXPECT_EQ(faults->fired(), 1);
  EXPECT_EQ(st.code(), StatusCode::kDisconnected) << st.ToString();
  EXPECT_EQ((*s)->state(), CommState::kError);
  EXPECT_EQ(kernels_.returned.IsSet(), false);
  EXPECT_TRUE(FreshClientIsServed(server_->port(), 2));
  EXPECT_TRUE(server_->WaitForOpenConnectionsAtMost(0, Deadline::After(kPatience)));
  EXPECT_TRUE(NaaLoggedNothing());
}

TEST_P(FaultMatrixTest, HostDropsAtAMiddleInputWrite) {
  if (!emulated()) {
    GTEST_SKIP() << NeedsInjector("HostFaultTest *_data_sending_* covers a host lost between "
                                  "its middle writes and its final one");
  }
  // The plain WRITE of parameter `a` (the metadata write is 16 bytes).
  auto faults = Once([](const FaultPoint& p) {
    return !p.is_listener_side && p.opcode == WorkOpcode::kRdmaWrite && p.length == kRegionBytes;
  }, FaultAction::Drop());
  auto faulty = MakeTransport("emulated", faults);
  ASSERT_NO_FATAL_FAILURE(StartServer(LoggingServerOptions()));
  auto s = OpenTo(server_->port(), PatientClient(), faulty.get());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  FillInputs(**s, 1);
  Status st = (*s)->Call(kFill, Deadline::After(kPatience));
  EXPECT_EQ(faults->fired(), 1);
  EXPECT_EQ(st.code(), StatusCode::kDisconnected) << st.ToString();
  EXPECT_EQ((*s)->state(), CommState::kError);
  EXPECT_TRUE(FreshClientIsServed(server_->port(), 2));
  EXPECT_TRUE(server_->WaitForOpenConnectionsAtMost(0, Deadline::After(kPatience)));
  EXPECT_TRUE(NaaLoggedNothing());
}

// NAA-side drops: the NAA's transport drops this one connection at its MRSP
// answer / at its final result write / at its middle result write (out1).
// The host gets kDisconnected; the same NAA serves the next host.
class NaaDropTest : public FaultMatrixTest {
 protected:
  void Run(std::function<bool(const FaultPoint&)> match, bool during_open) {
    auto faults = Once(std::move(match), FaultAction::Drop());
    faulty_ = MakeTransport("emulated", faults);
    ASSERT_NO_FATAL_FAILURE(StartServer(LoggingServerOptions(), faulty_.get()));
    auto s = OpenTo(server_->port(), PatientClient());
    if (during_open) {
      EXPECT_EQ(faults->fired(), 1);
      ASSERT_FALSE(s.ok());
      EXPECT_EQ(s.status().code(), StatusCode::kDisconnected) << s.status().ToString();
    } else {
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      FillInputs(**s, 1);
      Status st = (*s)->Call(kFill, Deadline::After(kPatience));
      EXPECT_EQ(faults->fired(), 1);
      EXPECT_EQ(st.code(), StatusCode::kDisconnected) << st.ToString();
      EXPECT_EQ((*s)->state(), CommState::kError);
    }
    EXPECT_TRUE(FreshClientIsServed(server_->port(), 2));
    EXPECT_TRUE(server_->WaitForOpenConnectionsAtMost(0, Deadline::After(kPatience)));
    EXPECT_TRUE(NaaLoggedNothing());
  }
  void TearDown() override {
    FaultMatrixTest::TearDown();
    server_.reset();  // before faulty_
  }
  std::unique_ptr<Transport> faulty_;
};

TEST_P(NaaDropTest, NaaDropsAtItsMrspAnswer) {
  if (!emulated()) {
    GTEST_SKIP() << NeedsInjector("NaaFaultTest *_mrsp_disconnected covers an NAA leaving "
                                  "instead of answering the MRSP");
  }
  Run([](const FaultPoint& p) { return p.is_listener_side && p.opcode == WorkOpcode::kSend; },
      /*during_open=*/true);
}

TEST_P(NaaDropTest, NaaDropsAtItsFinalResultWrite) {
  if (!emulated()) {
    GTEST_SKIP() << NeedsInjector("NaaFaultTest *_data_sending_disconnected covers an NAA "
                                  "leaving before its final result write");
  }
  Run([](const FaultPoint& p) {
    return p.is_listener_side && p.opcode == WorkOpcode::kRdmaWriteWithImm;
  }, /*during_open=*/false);
}

TEST_P(NaaDropTest, NaaDropsAtItsMiddleResultWrite) {
  if (!emulated()) {
    GTEST_SKIP() << NeedsInjector("NaaFaultTest *_calculating_disconnected covers an NAA "
                                  "leaving before it writes results");
  }
  Run([](const FaultPoint& p) {
    return p.is_listener_side && p.opcode == WorkOpcode::kRdmaWrite;
  }, /*during_open=*/false);
}

// --- NaaServer::Shutdown with a call in flight ----------------------------------

// Shutdown begins while a kernel (no time limit) runs: every connection is
// disconnected at once, so the host's call fails with kDisconnected while
// the kernel still runs; Shutdown returns once the kernel has returned (it
// uses the connection's memory).
TEST_P(FaultMatrixTest, ShutdownDisconnectsACallInFlight) {
  ASSERT_NO_FATAL_FAILURE(StartServer(LoggingServerOptions()));
  auto s = OpenTo(server_->port(), PatientClient());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  FillInputs(**s, 8);
  auto call = std::async(std::launch::async,
                         [&] { return (*s)->Call(kBlock, Deadline::After(10s)); });
  AtScopeExit release([this] { kernels_.Release(); });
  ASSERT_TRUE(kernels_.calculating.Wait());
  Event shutdown_returned;
  std::jthread shutdown([&] {
    server_->Shutdown();
    shutdown_returned.Set();
  });
  ASSERT_TRUE(probe_->listener_shut_down.Wait());
  const Status st = call.get();  // while the kernel is still blocked
  EXPECT_EQ(st.code(), StatusCode::kDisconnected) << st.ToString();
  EXPECT_FALSE(kernels_.returned.IsSet());
  kernels_.Release();
  EXPECT_TRUE(shutdown_returned.Wait());
}

// Shutdown begins while a kernel with a time limit runs (and will run past
// it): the host's call fails with kDisconnected at once (Shutdown
// disconnects every connection); Shutdown waits for the runaway kernel only
// ServerOptions::shutdown_grace (0 here), logs it, and returns while the
// kernel still runs.
TEST_P(FaultMatrixTest, ShutdownWithARunawayKernelInFlight) {
  ServerOptions options = LoggingServerOptions();
  options.shutdown_grace = 0ms;
  ASSERT_NO_FATAL_FAILURE(StartServer(options));
  auto s = OpenTo(server_->port(), PatientClient());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  FillInputs(**s, 9);
  auto call = std::async(std::launch::async,
                         [&] { return (*s)->Call(kBlockLimited, Deadline::After(kPatience)); });
  AtScopeExit release([this] {
    kernels_.Release();
    kernels_.returned.Wait();  // the abandoned kernel uses kernels_
  });
  ASSERT_TRUE(kernels_.calculating.Wait());
  Event shutdown_returned;
  std::jthread shutdown([&] {
    server_->Shutdown();
    shutdown_returned.Set();
  });
  ASSERT_TRUE(probe_->listener_shut_down.Wait());
  const Status st = call.get();
  EXPECT_EQ(st.code(), StatusCode::kDisconnected) << st.ToString();
  EXPECT_EQ((*s)->state(), CommState::kError);
  EXPECT_TRUE(shutdown_returned.Wait()) << "Shutdown did not return within its grace";
  EXPECT_FALSE(kernels_.returned.IsSet()) << "the kernel cannot return before the latch";
  EXPECT_TRUE(log_.WaitFor("1 kernel(s) that overran their time limit still running", kPatience))
      << log_.All();
}

// Shutdown while a host is in the middle of its call's writes (the NAA is
// waiting for the final WRITE_WITH_IMM): the NAA closes the connection at its
// next stop check; Shutdown returns; the host's final write then fails with
// kDisconnected.
TEST_P(FaultMatrixTest, ShutdownWhileAHostIsMidCall) {
  ASSERT_NO_FATAL_FAILURE(StartServer(LoggingServerOptions()));
  auto host = StartHostPeer("data_sending", kFill);
  ASSERT_NE(host, nullptr);
  ASSERT_TRUE(host->Expect("READY data_sending"));
  server_->Shutdown();
  host->Send("continue");
  EXPECT_TRUE(host->Expect("result DISCONNECTED"));
  EXPECT_TRUE(NaaLoggedNothing());
}

// --- Corruption (emulated FaultInjector kCorruptPayload) -------------------------

class CorruptionTest : public FaultMatrixTest {
 protected:
  void TearDown() override {
    FaultMatrixTest::TearDown();
    server_.reset();  // before faulty_
  }
  std::unique_ptr<Transport> faulty_;
};

// An input write with one byte flipped on the wire: RDMA (and the emulated
// transport) cannot tell, the NAA computes on the corrupted input, and the
// caller gets OK with wrong results. FINDING: naarpc has no end-to-end
// integrity check of payloads; it relies on the link's CRC (RoCE ICRC).
TEST_P(CorruptionTest, CorruptInputWriteGivesOkWithWrongResults) {
  if (!emulated()) {
    GTEST_SKIP() << NeedsInjector("an HCA checks the ICRC of every packet: a payload cannot be "
                                  "corrupted in flight from a test");
  }
  constexpr uint32_t kFlip = 5;
  auto faults = Once([](const FaultPoint& p) {
    return !p.is_listener_side && p.opcode == WorkOpcode::kRdmaWrite && p.length == kRegionBytes;
  }, FaultAction::Corrupt(kFlip));  // the WRITE of `a`
  faulty_ = MakeTransport("emulated", faults);
  ASSERT_NO_FATAL_FAILURE(StartServer(LoggingServerOptions()));
  auto s = OpenTo(server_->port(), PatientClient(), faulty_.get());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  FillInputs(**s, 1);
  const Status st = (*s)->Call(kFill, Deadline::After(kPatience));
  EXPECT_EQ(faults->fired(), 1);
  ASSERT_TRUE(st.ok()) << "corruption is not detected: the call succeeds; got " << st.ToString();
  auto o1 = (*s)->buffer(2), o2 = (*s)->buffer(3);
  for (size_t i = 0; i < kRegionBytes; ++i) {
    const uint8_t a = InA(i, 1) ^ (i == kFlip ? 0xff : 0), b = InB(i, 1);
    ASSERT_EQ(uint8_t(o1[i]), uint8_t(a ^ b)) << "byte " << i;
    ASSERT_EQ(uint8_t(o2[i]), uint8_t(a + b)) << "byte " << i;
  }
  EXPECT_FALSE(ResultsAreRight(**s, 1));
  // The session itself is unharmed.
  FillInputs(**s, 2);
  ASSERT_TRUE((*s)->Call(kFill, Deadline::After(kPatience)).ok());
  EXPECT_TRUE(ResultsAreRight(**s, 2));
  EXPECT_TRUE(NaaLoggedNothing());
}

// A result write with one byte flipped: the caller gets OK and one wrong
// byte (FINDING, as above).
TEST_P(CorruptionTest, CorruptResultWriteGivesOkWithAWrongByte) {
  if (!emulated()) {
    GTEST_SKIP() << NeedsInjector("an HCA checks the ICRC of every packet: a payload cannot be "
                                  "corrupted in flight from a test");
  }
  constexpr uint32_t kFlip = 9;
  auto faults = Once([](const FaultPoint& p) {
    return p.is_listener_side && p.opcode == WorkOpcode::kRdmaWriteWithImm;
  }, FaultAction::Corrupt(kFlip));  // the final result write: out2
  faulty_ = MakeTransport("emulated", faults);
  ASSERT_NO_FATAL_FAILURE(StartServer(LoggingServerOptions(), faulty_.get()));
  auto s = OpenTo(server_->port(), PatientClient());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  FillInputs(**s, 3);
  const Status st = (*s)->Call(kFill, Deadline::After(kPatience));
  EXPECT_EQ(faults->fired(), 1);
  ASSERT_TRUE(st.ok()) << "corruption is not detected: the call succeeds; got " << st.ToString();
  auto o1 = (*s)->buffer(2), o2 = (*s)->buffer(3);
  for (size_t i = 0; i < kRegionBytes; ++i) {
    const uint8_t a = InA(i, 3), b = InB(i, 3);
    ASSERT_EQ(uint8_t(o1[i]), uint8_t(a ^ b)) << "byte " << i;
    ASSERT_EQ(uint8_t(o2[i]), uint8_t(uint8_t(a + b) ^ (i == kFlip ? 0xff : 0))) << "byte " << i;
  }
  FillInputs(**s, 4);
  ASSERT_TRUE((*s)->Call(kFill, Deadline::After(kPatience)).ok());
  EXPECT_TRUE(ResultsAreRight(**s, 4));
}

// The spec dialect's metadata write (the return addresses, written on a
// session's first call only) with its first byte flipped: the NAA cannot
// resolve the return regions and answers 0x04 (bad region layout), which the
// caller gets as kNaaError. FINDING: since the host writes the metadata only
// on the first call (ClientOptions::metadata_every_call = false), every later
// call of that session fails the same way; a new session works.
TEST_P(CorruptionTest, CorruptMetadataWriteIsRejectedByTheNaa) {
  if (!emulated()) {
    GTEST_SKIP() << NeedsInjector("an HCA checks the ICRC of every packet: a payload cannot be "
                                  "corrupted in flight from a test");
  }
  auto faults = Once([](const FaultPoint& p) {
    return !p.is_listener_side && p.opcode == WorkOpcode::kRdmaWrite && p.length == kMetadataBytes;
  }, FaultAction::Corrupt(0));
  faulty_ = MakeTransport("emulated", faults);
  ASSERT_NO_FATAL_FAILURE(StartServer(LoggingServerOptions()));
  auto s = OpenTo(server_->port(), PatientClient(), faulty_.get());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  FillInputs(**s, 1);
  Status st = (*s)->Call(kFill, Deadline::After(kPatience));
  EXPECT_EQ(faults->fired(), 1);
  EXPECT_EQ(st.code(), StatusCode::kNaaError) << st.ToString();
  EXPECT_EQ(st.wire_code(), std::optional<uint8_t>(kNaaStatusBadRegionLayout)) << st.ToString();
  for (std::byte x : (*s)->buffer(2)) ASSERT_EQ(x, std::byte{0}) << "an error reply writes no data";
  EXPECT_EQ((*s)->state(), CommState::kFinished);
  st = (*s)->Call(kFill, Deadline::After(kPatience));
  EXPECT_EQ(st.wire_code(), std::optional<uint8_t>(kNaaStatusBadRegionLayout))
      << "the metadata is not rewritten: " << st.ToString();
  EXPECT_TRUE(FreshClientIsServed(server_->port(), 2));
}

// A corrupted MRSP request: the NAA's decoder rejects it (PROTOCOL_ERROR,
// logged) and drops the connection; the host gets kDisconnected (a NAAICE
// NAA answers a malformed message with nothing: docs/protocol.md 3.5).
TEST_P(CorruptionTest, CorruptMrspRequestIsRejected) {
  if (!emulated()) {
    GTEST_SKIP() << NeedsInjector("an HCA checks the ICRC of every packet; "
                                  "WireConformanceTest sends malformed MRSP messages on verbs");
  }
  struct Case {
    uint32_t offset;
    const char* logged;
  };
  for (const Case& c : {Case{0, "unknown type 0xfe"}, Case{1, "does not match count"}}) {
    SCOPED_TRACE("flipped byte " + std::to_string(c.offset));
    auto faults = Once([](const FaultPoint& p) {
      return !p.is_listener_side && p.opcode == WorkOpcode::kSend;
    }, FaultAction::Corrupt(c.offset));
    auto faulty = MakeTransport("emulated", faults);
    testing::LogCapture log;
    ServerOptions options;
    options.log = log.Sink();
    auto server = NaaServer::Start(*transport_, address_, 0, kernels_, options);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    auto s = OpenTo((*server)->port(), PatientClient(), faulty.get());
    EXPECT_EQ(faults->fired(), 1);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), StatusCode::kDisconnected) << s.status().ToString();
    EXPECT_TRUE(log.WaitFor("PROTOCOL_ERROR: MRSP request from the host", kPatience)) << log.All();
    EXPECT_NE(log.All().find(c.logged), std::string::npos) << log.All();
    EXPECT_TRUE(FreshClientIsServed((*server)->port(), 1));
    (*server)->Shutdown();
  }
}

// A corrupted MRSP answer: its header is rejected by the host's decoder
// (kProtocolError); a corrupted rkey cannot be seen by any decoder: the
// session opens and its first write is refused by the NAA's transport
// (remote access error), which the caller gets as kTransportError. The NAA
// closes the connection either way and serves others.
TEST_P(CorruptionTest, CorruptMrspAnswerIsRejected) {
  if (!emulated()) {
    GTEST_SKIP() << NeedsInjector("an HCA checks the ICRC of every packet; "
                                  "WireConformanceTest covers malformed MRSP messages on verbs");
  }
  auto faults = Once([](const FaultPoint& p) {
    return p.is_listener_side && p.opcode == WorkOpcode::kSend;
  }, FaultAction::Corrupt(0));  // type 0x02 -> 0xfd
  faulty_ = MakeTransport("emulated", faults);
  ASSERT_NO_FATAL_FAILURE(StartServer(LoggingServerOptions(), faulty_.get()));
  auto s = OpenTo(server_->port(), PatientClient());
  EXPECT_EQ(faults->fired(), 1);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kProtocolError) << s.status().ToString();
  EXPECT_NE(s.status().message().find("MRSP answer from the NAA"), std::string::npos)
      << s.status().ToString();
  EXPECT_TRUE(FreshClientIsServed(server_->port(), 1));
  EXPECT_TRUE(server_->WaitForOpenConnectionsAtMost(0, Deadline::After(kPatience)));
  EXPECT_TRUE(NaaLoggedNothing());
}

TEST_P(CorruptionTest, CorruptRkeyInMrspAnswerFailsTheFirstCall) {
  if (!emulated()) {
    GTEST_SKIP() << NeedsInjector("an HCA checks the ICRC of every packet: a payload cannot be "
                                  "corrupted in flight from a test");
  }
  // Entry 0 (the metadata region) starts at offset 4; its rkey is bytes
  // 12..15, big-endian: byte 15 is the key's low byte.
  auto faults = Once([](const FaultPoint& p) {
    return p.is_listener_side && p.opcode == WorkOpcode::kSend;
  }, FaultAction::Corrupt(15));
  faulty_ = MakeTransport("emulated", faults);
  ASSERT_NO_FATAL_FAILURE(StartServer(LoggingServerOptions(), faulty_.get()));
  auto s = OpenTo(server_->port(), PatientClient());
  EXPECT_EQ(faults->fired(), 1);
  ASSERT_TRUE(s.ok()) << "an rkey is opaque: the MRSP cannot tell; got " << s.status().ToString();
  FillInputs(**s, 1);
  const Status st = (*s)->Call(kFill, Deadline::After(kPatience));
  EXPECT_EQ(st.code(), StatusCode::kTransportError) << st.ToString();
  EXPECT_NE(st.message().find("remote access error"), std::string::npos) << st.ToString();
  EXPECT_EQ((*s)->state(), CommState::kError);
  EXPECT_TRUE(FreshClientIsServed(server_->port(), 2));
  EXPECT_TRUE(server_->WaitForOpenConnectionsAtMost(0, Deadline::After(kPatience)));
}

const auto kTransports = ::testing::Values("emulated", "verbs");
std::string TransportName(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

INSTANTIATE_TEST_SUITE_P(Matrix, FaultMatrixTest, kTransports, TransportName);
INSTANTIATE_TEST_SUITE_P(Matrix, NaaDropTest, kTransports, TransportName);
INSTANTIATE_TEST_SUITE_P(Matrix, CorruptionTest, kTransports, TransportName);

}  // namespace
}  // namespace naarpc
