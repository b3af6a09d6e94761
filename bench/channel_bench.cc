// channel_bench: calls/s through one VectorArithChannelClient over 1, 2 and
// 4 software NAAs, against a VectorArithClient on one NAA, in one run; and
// the time from killing an NAA to the last call that was in flight on it
// completing on the other one (VectorArith.Dot is idempotent).
//
// Each NAA is a child process (forked before any thread) serving
// services/vector on 127.0.0.1; the client keeps --inflight Dot calls in
// flight (each callback submits its slot's next call) for --seconds per row.
// On a machine with fewer cores than NAAs + client, the NAAs share the CPU:
// the figures then show the channel's overhead, not a speed-up.
//
//   bazel run -c opt //bench:channel_bench -- [--seconds=2] [--inflight=32] [--elements=256]
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/naa_child.h"
#include "naarpc/channel.h"
#include "naarpc/naa_server.h"
#include "naarpc/transport_factory.h"
#include "services/vector/vector.naa.h"
#include "services/vector/vector_service.h"

namespace {

namespace vec = naarpc::services::vector;
using Clock = std::chrono::steady_clock;

using naarpc::bench::NaaChild;

// A software NAA in a child process.
std::optional<NaaChild> StartNaa(size_t max_handshakes) {
  return NaaChild::Start(1, [&](const NaaChild::ReportPorts& report) {
    auto transport = naarpc::NewTransport("emulated");
    if (!transport.ok()) _exit(1);
    vec::VectorArithServiceImpl service;
    naarpc::ServerOptions options;
    options.max_handshakes_per_peer = std::max(options.max_handshakes_per_peer, max_handshakes);
    auto server = naarpc::NaaServer::Start(**transport, "127.0.0.1", 0, service, options);
    if (!server.ok()) _exit(1);
    report({(*server)->port()});
    for (;;) pause();  // serving, until killed
  });
}

struct Slot {
  std::vector<double> a, b;
  double result = 0;
  Clock::time_point submitted;
};

struct Run {
  uint64_t calls = 0, errors = 0;
  double seconds = 0;
  // Failover: time from the kill until the last call in flight at the kill
  // completed (ms), and how many were in flight then.
  double failover_ms = -1;
  size_t in_flight_at_kill = 0;
};

// Keeps `inflight` calls in flight on `client` for `duration`; at `kill_at`
// (if set) runs `kill` once.
Run Drive(vec::VectorArithClientInterface& client, size_t inflight, size_t elements,
          Clock::duration duration, std::optional<Clock::duration> kill_at = std::nullopt,
          std::function<void()> kill = nullptr) {
  std::vector<Slot> slots(inflight);
  for (Slot& s : slots) s.a.assign(elements, 1.0), s.b.assign(elements, 2.0);
  std::atomic<uint64_t> calls{0}, errors{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::condition_variable cv;
  size_t active = inflight;
  Clock::time_point killed{};
  std::atomic<bool> kill_done{false};
  std::atomic<int64_t> last_old_done_ns{0};  // latest completion of a call submitted before the kill
  std::atomic<size_t> old_in_flight{0};
  std::function<void(Slot&)> submit = [&](Slot& s) {
    s.submitted = Clock::now();
    client.DotAsync(s.a, s.b, &s.result, [&, sp = &s](naarpc::Status st) {
      const auto now = Clock::now();
      if (st.ok() && sp->result == 2.0 * static_cast<double>(elements)) {
        calls.fetch_add(1);
      } else {
        errors.fetch_add(1);
      }
      if (kill_done.load() && sp->submitted < killed) {
        const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now - killed).count();
        int64_t prev = last_old_done_ns.load();
        while (ns > prev && !last_old_done_ns.compare_exchange_weak(prev, ns)) {
        }
      }
      if (stop.load()) {
        std::lock_guard<std::mutex> lock(mu);
        if (--active == 0) cv.notify_all();
        return;
      }
      submit(*sp);
    });
  };
  const auto start = Clock::now();
  for (Slot& s : slots) submit(s);
  if (kill_at) {
    std::this_thread::sleep_until(start + *kill_at);  // a benchmark's schedule, not a test's sync
    killed = Clock::now();
    size_t old = 0;
    for (const Slot& s : slots) old += s.submitted < killed;
    old_in_flight = old;
    kill_done = true;
    kill();
  }
  std::this_thread::sleep_until(start + duration);
  stop = true;
  const auto end = Clock::now();
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return active == 0; });
  }
  Run r;
  r.calls = calls.load();
  r.errors = errors.load();
  r.seconds = std::chrono::duration<double>(end - start).count();
  if (kill_at) {
    r.failover_ms = last_old_done_ns.load() / 1e6;
    r.in_flight_at_kill = old_in_flight.load();
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"calls/s through a channel over 1, 2, 4 software NAAs vs one NAA; failover time"};
  double seconds = 2;
  size_t inflight = 32, elements = 256;
  app.add_option("--seconds", seconds, "seconds per row")->check(CLI::PositiveNumber);
  app.add_option("--inflight", inflight, "calls in flight at once")->check(CLI::PositiveNumber);
  app.add_option("--elements", elements, "elements of each Dot input (f64)")
      ->check(CLI::Range(size_t{1}, size_t{65536}));
  CLI11_PARSE(app, argc, argv);

  std::vector<NaaChild> naas;  // killed when they go
  for (int i = 0; i < 4; ++i) {
    std::optional<NaaChild> naa = StartNaa(inflight);
    if (!naa) {
      std::fprintf(stderr, "channel_bench: software NAA %d did not start\n", i);
      return 1;
    }
    naas.push_back(std::move(*naa));
  }
  auto transport = naarpc::NewTransport("emulated");
  if (!transport.ok()) return 1;
  const auto duration = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(seconds));
  std::printf("VectorArith.Dot (2 x %zu f64), emulated transport, %zu calls in flight, %.3g s per "
              "row, %u cores online; NAAs are child processes on this host\n",
              elements, inflight, seconds, std::thread::hardware_concurrency());
  std::printf("%-32s | %12s | %8s | %s\n", "client", "calls/s", "vs 1 NAA", "calls per NAA");
  naarpc::codegen::StubOptions options;
  options.max_sessions_per_routine = inflight;
  double base = 0;
  int rc = 0;
  {
    vec::VectorArithClient plain(**transport, "127.0.0.1", naas[0].port(), options);
    Run r = Drive(plain, inflight, elements, duration);
    base = r.calls / r.seconds;
    std::printf("%-32s | %12.0f | %8.2f | %s\n", "VectorArithClient, 1 NAA", base, 1.0, "-");
    if (r.errors) rc = 1;
  }
  for (size_t n : {1, 2, 4}) {
    std::vector<naarpc::NaaAddress> targets;
    for (size_t i = 0; i < n; ++i) targets.push_back({"127.0.0.1", naas[i].port()});
    auto channel = naarpc::Channel::Create(targets);
    if (!channel.ok()) return 1;
    // Sessions per NAA: the calls in flight spread over them.
    naarpc::codegen::StubOptions per_naa = options;
    per_naa.max_sessions_per_routine = (inflight + n - 1) / n;
    vec::VectorArithChannelClient client(**transport, *channel, per_naa);
    Run r = Drive(client, inflight, elements, duration);
    std::string spread;
    for (const naarpc::NaaCounters& c : (*channel)->Counters()) {
      spread += (spread.empty() ? "" : " ") + std::to_string(c.calls);
    }
    const double rate = r.calls / r.seconds;
    std::printf("%-32s | %12.0f | %8.2f | %s\n",
                ("VectorArithChannelClient, " + std::to_string(n) + " NAA" + (n > 1 ? "s" : ""))
                    .c_str(),
                rate, rate / base, spread.c_str());
    if (r.errors) rc = 1;
  }
  // Failover: a channel over NAAs 2 and 3, NAA 3 killed halfway.
  {
    naarpc::ChannelOptions copt;
    auto channel = naarpc::Channel::Create(
        {{"127.0.0.1", naas[2].port()}, {"127.0.0.1", naas[3].port()}}, copt);
    naarpc::codegen::StubOptions per_naa = options;
    per_naa.max_sessions_per_routine = (inflight + 1) / 2;
    vec::VectorArithChannelClient client(**transport, *channel, per_naa);
    Run r = Drive(client, inflight, elements, duration, duration / 2, [&] { naas[3].Kill(); });
    const auto c = (*channel)->Counters();
    std::printf("failover: NAA killed (SIGKILL) with %zu calls in flight; the last of them "
                "completed on the other NAA %.2f ms later; %llu failed attempt(s) retried, %llu "
                "call(s) lost\n",
                r.in_flight_at_kill, r.failover_ms,
                static_cast<unsigned long long>(c[1].failures),
                static_cast<unsigned long long>(r.errors));
    if (r.errors) rc = 1;
  }
  naas.clear();
  return rc;
}
