// One side of a fault-matrix cell (tests/e2e/fault_matrix_test.cc) in a
// process of its own, so that the test can kill it (SIGKILL), freeze it
// (SIGSTOP) or make it disconnect at a chosen protocol point. Started with
// posix_spawn (no fork() after verbs registrations).
//
//   fault_peer naa  --transport=T --address=A --stop-at=S
//       A NaaServer serving the matrix kernels on port 0; prints "port N".
//       S: none, hello, mrsp, data_receiving, calculating, data_sending, idle.
//   fault_peer host --transport=T --address=A --port=P --stop-at=S --function=F
//       Opens a ClientSession (the matrix layout), prints "open <CODE>", then
//       "calling", calls function F once and prints "result <CODE>" (OK only
//       if the results are right, else WRONG_DATA).
//       S: none, hello, mrsp, data_sending, idle.
//
// Stop points (only the first connection stops, once). When the process
// reaches its stop point it prints "READY <S>" and the thread that reached it
// blocks until a command arrives, so the test knows the state is reached:
//   naa  hello           the connection is accepted; nothing received yet
//   naa  mrsp            the host's MRSP request is received; no answer sent
//   naa  data_receiving  a call's WRITE_WITH_IMM is polled; kernel not started
//   naa  calculating     inside the kernel (function kBlock)
//   naa  data_sending    the reply's first write is posted, its final
//                        WRITE_WITH_IMM (the status) is not
//   naa  idle            the reply is posted in full (the call is over)
//   host hello           connected; nothing sent
//   host mrsp            the MRSP request is posted; the answer not polled
//   host data_sending    the call's first write(s) posted, the final
//                        WRITE_WITH_IMM (the function code) not
//   host idle            the call has returned
//
// stdin commands (one per line):
//   disconnect  Connection::Disconnect() on the first connection (from the
//               command thread: both transports allow that), prints
//               "DISCONNECTED", then resumes a stopped thread;
//   continue    resumes a stopped thread;
//   EOF         exits (the test is done, or gone).
// Only protocol lines go to stdout; diagnostics go to stderr.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "naarpc/client_session.h"
#include "naarpc/naa_server.h"
#include "naarpc/transport_factory.h"
#include "tests/testing/forwarding_transport.h"

namespace {

using naarpc::Completion;
using naarpc::CompletionStatus;
using naarpc::Connection;
using naarpc::Deadline;
using naarpc::Result;
using naarpc::SendRequest;
using naarpc::Status;
using naarpc::WorkOpcode;

// --- The matrix's routine (fault_matrix_test.cc has the same) ---------------
// Layout: a (in), b (in), out1 (out), out2 (out), kRegionBytes each; two
// return regions, so a reply is one WRITE and one WRITE_WITH_IMM.
// kFill: out1 = a ^ b, out2 = a + b (bytewise). kBlock: the same; on an NAA
// stopping at "calculating", it stops first.
constexpr uint8_t kFill = 1;
constexpr uint8_t kBlock = 2;
constexpr size_t kRegionBytes = 256;

std::vector<naarpc::RegionSpec> MatrixLayout() {
  return {{"a", naarpc::Direction::kIn, kRegionBytes},
          {"b", naarpc::Direction::kIn, kRegionBytes},
          {"out1", naarpc::Direction::kOut, kRegionBytes},
          {"out2", naarpc::Direction::kOut, kRegionBytes}};
}

std::mutex say_mu;
void Say(const std::string& line) {
  std::lock_guard<std::mutex> lock(say_mu);
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

// Stop points and the commands that end them.
class Control {
 public:
  explicit Control(std::string stop_at) : stop_at_(std::move(stop_at)) {}

  // True once, if `state` is the stop point.
  bool Arm(const std::string& state) {
    std::lock_guard<std::mutex> lock(mu_);
    if (fired_ || stop_at_ != state) return false;
    fired_ = true;
    return true;
  }

  // Reports the state and blocks until a command resumes it.
  void Stop(const std::string& state) {
    std::unique_lock<std::mutex> lock(mu_);
    stopped_ = true;
    Say("READY " + state);
    cv_.wait(lock, [this] { return resumed_ || eof_; });
    if (!resumed_) {  // the test closed stdin (or died) while we were stopped
      std::fflush(stdout);
      _exit(0);
    }
    stopped_ = false;
  }

  // The connection "disconnect" acts on (the first one).
  void Register(Connection* c) {
    std::lock_guard<std::mutex> lock(mu_);
    if (conn_ == nullptr && !registered_) {
      conn_ = c;
      registered_ = true;
    }
  }
  void Unregister(Connection* c) {
    std::lock_guard<std::mutex> lock(mu_);
    if (conn_ == c) conn_ = nullptr;
  }

  // Reads commands from stdin until EOF (run on its own thread).
  void ReadCommands() {
    char line[128];
    while (std::fgets(line, sizeof line, stdin) != nullptr) {
      const std::string cmd(line, strcspn(line, "\r\n"));
      std::lock_guard<std::mutex> lock(mu_);
      if (cmd == "disconnect") {
        if (conn_ != nullptr) {
          Status s = conn_->Disconnect();
          if (!s.ok()) std::fprintf(stderr, "fault_peer: disconnect: %s\n", s.ToString().c_str());
          Say("DISCONNECTED");
        } else {
          Say("DISCONNECTED none");
        }
        resumed_ = true;
      } else if (cmd == "continue") {
        resumed_ = true;
      } else {
        std::fprintf(stderr, "fault_peer: unknown command '%s'\n", cmd.c_str());
      }
      cv_.notify_all();
    }
    std::lock_guard<std::mutex> lock(mu_);
    eof_ = true;
    cv_.notify_all();
  }

  // Waits for EOF on stdin; true if a thread is stopped meanwhile.
  bool WaitForEof() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return eof_; });
    return stopped_;
  }

 private:
  const std::string stop_at_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool fired_ = false;
  bool stopped_ = false;
  bool resumed_ = false;
  bool eof_ = false;
  bool registered_ = false;
  Connection* conn_ = nullptr;
};

bool HasOpcode(std::span<const SendRequest> requests, WorkOpcode op) {
  for (const SendRequest& r : requests) {
    if (r.opcode == op) return true;
  }
  return false;
}

// The first connection: stops at the chosen point of the data path.
class StopConnection final : public naarpc::testing::ForwardingConnection {
 public:
  StopConnection(std::unique_ptr<Connection> inner, Control& control, bool naa)
      : ForwardingConnection(std::move(inner)), control_(control), naa_(naa) {
    control_.Register(this);
  }
  ~StopConnection() override { control_.Unregister(this); }

  Status PostSend(std::span<const SendRequest> requests) override {
    const bool mrsp = HasOpcode(requests, WorkOpcode::kSend);
    const bool final_write =
        !requests.empty() && requests.back().opcode == WorkOpcode::kRdmaWriteWithImm;
    if (mrsp && control_.Arm("mrsp")) {
      if (naa_) {  // request received, answer not sent
        control_.Stop("mrsp");
        return inner().PostSend(requests);
      }
      Status s = inner().PostSend(requests);  // request sent, answer not polled
      control_.Stop("mrsp");
      return s;
    }
    if (final_write && requests.size() >= 2 && control_.Arm("data_sending")) {
      Status s = inner().PostSend(requests.first(requests.size() - 1));
      if (!s.ok()) return s;
      control_.Stop("data_sending");
      return inner().PostSend(requests.last(1));
    }
    if (naa_ && final_write && control_.Arm("idle")) {
      Status s = inner().PostSend(requests);
      control_.Stop("idle");
      return s;
    }
    return inner().PostSend(requests);
  }

  // However the NAA takes its completions (blocking or event-driven).
  Result<size_t> PollCompletions(std::span<Completion> out, Deadline deadline) override {
    return StopAtACall(out, inner().PollCompletions(out, deadline));
  }
  Result<size_t> TryPollCompletions(std::span<Completion> out) override {
    return StopAtACall(out, inner().TryPollCompletions(out));
  }

 private:
  Result<size_t> StopAtACall(std::span<Completion> out, Result<size_t> n) {
    if (naa_ && n.ok()) {
      for (size_t i = 0; i < *n; ++i) {
        if (out[i].opcode == WorkOpcode::kRecvRdmaWithImm &&
            out[i].status == CompletionStatus::kSuccess && control_.Arm("data_receiving")) {
          control_.Stop("data_receiving");
          break;
        }
      }
    }
    return n;
  }

  Control& control_;
  const bool naa_;
};

class MatrixKernels final : public naarpc::NaaHandler {
 public:
  explicit MatrixKernels(Control& control) : control_(control) {}
  uint8_t Handle(naarpc::NaaCall& call) override {
    if (call.function_code == kBlock && control_.Arm("calculating")) control_.Stop("calculating");
    if (call.function_code != kFill && call.function_code != kBlock) {
      return naarpc::kNaaStatusUnknownFunction;
    }
    auto& p = call.params;
    if (p.size() != 4) return naarpc::kNaaStatusBadRegionLayout;
    for (const auto& r : p) {
      if (r.data.size() != kRegionBytes) return naarpc::kNaaStatusBadRegionLayout;
    }
    for (size_t i = 0; i < kRegionBytes; ++i) {
      const auto a = uint8_t(p[0].data[i]), b = uint8_t(p[1].data[i]);
      p[2].data[i] = std::byte(a ^ b);
      p[3].data[i] = std::byte(uint8_t(a + b));
    }
    return naarpc::kNaaStatusSuccess;
  }

 private:
  Control& control_;
};

int RunNaa(naarpc::Transport& base, Control& control, const std::string& address) {
  bool first = true;  // touched by the accept thread only
  naarpc::testing::WrappingTransport transport(
      base, [&](std::unique_ptr<Connection> c) -> std::unique_ptr<Connection> {
        if (!first) return c;
        first = false;
        auto stop = std::make_unique<StopConnection>(std::move(c), control, /*naa=*/true);
        if (control.Arm("hello")) control.Stop("hello");
        return stop;
      });
  MatrixKernels kernels(control);
  naarpc::ServerOptions options;
  options.log = [](std::string_view line) {
    std::fprintf(stderr, "fault_peer NAA: %.*s\n", int(line.size()), line.data());
  };
  auto server = naarpc::NaaServer::Start(transport, address, 0, kernels, options);
  if (!server.ok()) {
    std::fprintf(stderr, "fault_peer: %s\n", server.status().ToString().c_str());
    return 1;
  }
  Say("port " + std::to_string((*server)->port()));
  if (control.WaitForEof()) {
    // A thread is stopped in the middle of the protocol: nothing to drain.
    std::fflush(stdout);
    _exit(0);
  }
  (*server)->Shutdown();
  return 0;
}

int RunHost(naarpc::Transport& base, Control& control, const std::string& address, int port,
            int function) {
  naarpc::testing::WrappingTransport transport(
      base, [&](std::unique_ptr<Connection> c) -> std::unique_ptr<Connection> {
        auto stop = std::make_unique<StopConnection>(std::move(c), control, /*naa=*/false);
        if (control.Arm("hello")) control.Stop("hello");
        return stop;
      });
  auto session = naarpc::ClientSession::Open(transport, address, uint16_t(port), MatrixLayout());
  if (!session.ok()) {
    std::fprintf(stderr, "fault_peer: open: %s\n", session.status().ToString().c_str());
    Say("open " + std::string(naarpc::StatusCodeName(session.status().code())));
    control.WaitForEof();
    return 1;
  }
  Say("open OK");
  auto a = (*session)->buffer(0), b = (*session)->buffer(1);
  for (size_t i = 0; i < kRegionBytes; ++i) {
    a[i] = std::byte(uint8_t(i * 3 + 1));
    b[i] = std::byte(uint8_t(i * 5 + 7));
  }
  Say("calling");
  Status s = (*session)->Call(uint8_t(function), Deadline::After(std::chrono::seconds(60)));
  std::string result(naarpc::StatusCodeName(s.code()));
  if (s.ok()) {
    auto out1 = (*session)->buffer(2), out2 = (*session)->buffer(3);
    for (size_t i = 0; i < kRegionBytes; ++i) {
      const auto x = uint8_t(a[i]), y = uint8_t(b[i]);
      if (uint8_t(out1[i]) != uint8_t(x ^ y) || uint8_t(out2[i]) != uint8_t(x + y)) {
        result = "WRONG_DATA";
        break;
      }
    }
  } else {
    std::fprintf(stderr, "fault_peer: call: %s\n", s.ToString().c_str());
  }
  Say("result " + result);
  if (control.Arm("idle")) control.Stop("idle");
  control.WaitForEof();
  (*session)->Close().IgnoreError();
  return s.ok() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"one side of a fault-matrix cell (tests/e2e/fault_matrix_test.cc)"};
  app.require_subcommand(1);
  std::string transport_name = "emulated", address = "127.0.0.1", stop_at = "none";
  int port = 0, function = kFill;
  CLI::App* naa = app.add_subcommand("naa", "serve the matrix kernels until stdin closes");
  CLI::App* host = app.add_subcommand("host", "open a session and call once");
  naa->add_option("--stop-at", stop_at)
      ->check(CLI::IsMember(
          {"none", "hello", "mrsp", "data_receiving", "calculating", "data_sending", "idle"}));
  host->add_option("--stop-at", stop_at)
      ->check(CLI::IsMember({"none", "hello", "mrsp", "data_sending", "idle"}));
  for (CLI::App* sub : {naa, host}) {
    sub->add_option("--transport", transport_name)->check(CLI::IsMember({"emulated", "verbs"}));
    sub->add_option("--address", address);
  }
  host->add_option("--port", port)->required()->check(CLI::Range(1, 65535));
  host->add_option("--function", function)->check(CLI::Range(1, 127));
  CLI11_PARSE(app, argc, argv);
  // A test that dies leaves no peer behind, not even a frozen one (SIGKILL
  // ends a stopped process too). The test spawns from its main thread.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) return 1;

  auto transport = naarpc::NewTransport(transport_name);
  if (!transport.ok()) {
    std::fprintf(stderr, "fault_peer: %s\n", transport.status().ToString().c_str());
    return 1;
  }
  Control control(stop_at);
  // Detached: it may be blocked in fgets when the process exits.
  std::thread([&control] { control.ReadCommands(); }).detach();
  if (naa->parsed()) return RunNaa(**transport, control, address);
  return RunHost(**transport, control, address, port, function);
}
