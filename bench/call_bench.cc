// call_bench: one naarpc call vs. payload size, side by side with a raw TCP
// ping-pong of the same bytes, measured in the same run and with the same
// CPU placement (the software NAA / echo server runs in a child process).
//
// naarpc call: one inout region of N bytes; the host writes N bytes, the
// NAA's kernel leaves them as they are, the NAA writes N bytes back.
// Raw TCP: the client sends N bytes, the server reads them and sends them
// back. Both use TCP_NODELAY sockets on loopback.
//
//   bazel run //bench:call_bench -- [--placement=both|same|split]
//       [--transport=emulated|verbs] [--address=127.0.0.1] [--min-time=0.3]
//       [--iterations=N] [--poll-spin-us=US] [--predictive-wake=0|1] [--dialect=spec|reference] [--machine]
//
// --machine adds one "result ..." line per payload size (key=value pairs) for
// scripts such as bench/guest/verbs_bench.sh.
//
// --stats-ab=ROUNDS measures instead the cost of statistics and
// interceptors (docs/operating.md): the same call through a generated
// client's call path (SessionPool::Lease) with them off (no statistics, no
// interceptor, on both sides) and on (statistics on both sides plus one
// no-op interceptor on each), alternating off/on in ROUNDS rounds against
// two NAAs in one process; reports the medians and the on/off ratio.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif
#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/percentiles.h"
#include "bench/transport_pingpong.h"
#include "naarpc/client_session.h"
#include "naarpc/impl/codegen_support.h"
#include "naarpc/interceptor.h"
#include "naarpc/naa_server.h"
#include "naarpc/transport_factory.h"
#include "runtime/transport_impl/verbs/verbs_transport.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint8_t kIdentity = 1;

class IdentityKernel : public naarpc::NaaHandler {
 public:
  uint8_t Handle(naarpc::NaaCall& call) override {
    return call.params.size() == 1 ? naarpc::kNaaStatusSuccess
                                   : naarpc::kNaaStatusBadRegionLayout;
  }
};

void Pin(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);
}

struct Stats {
  double median_us = 0, min_us = 0, mean_us = 0;
  double p10_us = 0, p90_us = 0, p99_us = 0;
  size_t iterations = 0;
};

Stats Summarize(std::vector<double>& us) {
  Stats s;
  std::sort(us.begin(), us.end());
  s.iterations = us.size();
  s.median_us = naarpc::bench::Percentile(us, 50);
  s.min_us = us.front();
  s.p10_us = naarpc::bench::Percentile(us, 10);
  s.p90_us = naarpc::bench::Percentile(us, 90);
  s.p99_us = naarpc::bench::Percentile(us, 99);
  double sum = 0;
  for (double v : us) sum += v;
  s.mean_us = sum / double(us.size());
  return s;
}

// --baseline: "tcp" (a TCP ping-pong) or "transport" (the same transport's
// WRITE_WITH_IMM ping-pong without naarpc's engine, bench/transport_pingpong.h).
std::string g_baseline;
// --timer=steady: time each call with steady_clock even where RDTSCP exists.
bool g_steady_timer = false;
// --iterations: overrides IterationsFor() (0 = built-in counts).
size_t g_iterations = 0;
// --poll-spin-us: VerbsOptions::poll_spin for both sides (-1 = default).
int g_poll_spin_us = -1;
// --predictive-wake: VerbsOptions::predictive_wake for both sides (-1 = default).
int g_predictive_wake = -1;
// --dialect: the host's wire dialect (the NAA follows the host's MRSP).
naarpc::ClientOptions g_client_options;

size_t IterationsFor(size_t bytes) {
  if (g_iterations > 0) return g_iterations;
  if (bytes <= 4096) return 4000;
  if (bytes <= (1 << 20)) return 400;
  return 12;
}

// Per-call timestamps. Like perftest's get_cycles(), the x86 time-stamp
// counter where RDTSCP exists: clock_gettime costs ~0.8 us in a QEMU TCG
// guest (HPET clocksource), which would inflate every sample. RDTSCP also
// names the CPU, so a sample that migrated between CPUs (whose counters need
// not agree) is dropped. Ticks become microseconds with a rate calibrated
// against steady_clock over the whole measurement.
class CallTimer {
 public:
  CallTimer() : use_tsc_(!g_steady_timer && HasRdtscp()) {}
  struct Stamp {
    uint64_t ticks;
    uint32_t cpu;
  };
  Stamp Now() const {
#if defined(__x86_64__)
    if (use_tsc_) {
      unsigned aux = 0;
      uint64_t t = __rdtscp(&aux);
      return {t, aux};
    }
#endif
    return {uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                         Clock::now().time_since_epoch()).count()),
            0};
  }
  const char* source() const { return use_tsc_ ? "rdtscp" : "steady_clock"; }

 private:
  static bool HasRdtscp() {
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (!__get_cpuid(0x80000001, &a, &b, &c, &d)) return false;
    return (d & (1u << 27)) != 0;
#else
    return false;
#endif
  }
  bool use_tsc_;
};

// Times `one()` for at least `min_time` and IterationsFor(bytes) runs.
template <typename F>
Stats Measure(size_t bytes, double min_time, F&& one) {
  // Warm-up: a few calls, and for small sizes at least 50 ms (caches, and
  // code translation in emulated CPUs such as the Soft-RoCE guest).
  const int warmup = bytes > (1u << 20) ? 1 : 3;
  for (int i = 0; i < warmup; ++i) one();
  if (bytes <= (1u << 16)) {
    const auto warm_end = Clock::now() + std::chrono::milliseconds(50);
    for (int i = 0; Clock::now() < warm_end && i < 100000; ++i) one();
  }
  const CallTimer timer;
  std::vector<uint64_t> ticks;
  const size_t want = IterationsFor(bytes);
  ticks.reserve(want);
  const auto start = Clock::now();
  const CallTimer::Stamp first = timer.Now();
  double elapsed = 0;
  size_t dropped = 0;
  for (size_t i = 0;; ++i) {
    // The clock is read every 16 calls only (see CallTimer).
    if (i % 16 == 0) {
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      if (ticks.size() >= want && elapsed >= min_time) break;
      if (ticks.size() >= 100 * want) break;
    }
    const CallTimer::Stamp t0 = timer.Now();
    if (!one()) break;
    const CallTimer::Stamp t1 = timer.Now();
    if (t0.cpu == t1.cpu && t1.ticks >= t0.ticks) {
      ticks.push_back(t1.ticks - t0.ticks);
    } else {
      ++dropped;
    }
  }
  const CallTimer::Stamp last = timer.Now();
  const double span_us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  const double us_per_tick =
      last.ticks > first.ticks ? span_us / double(last.ticks - first.ticks) : 0.0;
  std::vector<double> us;
  us.reserve(ticks.size());
  for (uint64_t t : ticks) us.push_back(double(t) * us_per_tick);
  if (us.empty()) us.push_back(0);
  if (dropped > us.size() / 10) {
    std::fprintf(stderr, "call_bench: %zu samples dropped (CPU migration); pin the client\n",
                 dropped);
  }
  return Summarize(us);
}

// ---- raw TCP echo -----------------------------------------------------------

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}
bool ReadAll(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r <= 0) return false;
    p += r;
    n -= size_t(r);
  }
  return true;
}

void TuneSocket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Child: echo server. Protocol: 8-byte size, then ping-pongs of that size.
[[noreturn]] void RawEchoServer(int listen_fd, int cpu) {
  Pin(cpu);
  for (;;) {
    int fd = accept(listen_fd, nullptr, nullptr);
    if (fd < 0) _exit(1);
    TuneSocket(fd);
    uint64_t size = 0;
    std::vector<char> buf;
    while (ReadAll(fd, reinterpret_cast<char*>(&size), 8)) {
      buf.resize(size);
      while (ReadAll(fd, buf.data(), size)) {
        if (!WriteAll(fd, buf.data(), size)) break;
      }
      break;
    }
    close(fd);
  }
}

// The transport by name; verbs with --poll-spin-us / --predictive-wake when given.
naarpc::Result<std::unique_ptr<naarpc::Transport>> MakeTransport(const std::string& name) {
  if (name == "verbs" && (g_poll_spin_us >= 0 || g_predictive_wake >= 0)) {
    naarpc::VerbsOptions opt;
    if (g_poll_spin_us >= 0) opt.poll_spin = std::chrono::microseconds(g_poll_spin_us);
    if (g_predictive_wake >= 0) opt.predictive_wake = g_predictive_wake != 0;
    return naarpc::NewVerbsTransport(opt);
  }
  return naarpc::NewTransport(name);
}

// Child: the transport ping-pong server; reports its port through the pipe.
[[noreturn]] void PingPongProcess(const std::string& transport_name, const std::string& address,
                                  int cpu, int port_pipe) {
  Pin(cpu);
  auto transport = MakeTransport(transport_name);
  if (!transport.ok()) {
    std::fprintf(stderr, "ping-pong: %s\n", transport.status().ToString().c_str());
    _exit(1);
  }
  auto listener = (*transport)->Listen(address, 0);
  if (!listener.ok()) {
    std::fprintf(stderr, "ping-pong: %s\n", listener.status().ToString().c_str());
    _exit(1);
  }
  uint16_t port = (*listener)->port();
  if (write(port_pipe, &port, sizeof port) != sizeof port) _exit(1);
  naarpc::bench::ServeTransportPingPong(**listener);
}

// ---- naarpc NAA --------------------------------------------------------------

[[noreturn]] void NaaProcess(const std::string& transport_name, const std::string& address,
                             int cpu, int port_pipe) {
  Pin(cpu);
  auto transport = MakeTransport(transport_name);
  if (!transport.ok()) {
    std::fprintf(stderr, "NAA: %s\n", transport.status().ToString().c_str());
    _exit(1);
  }
  IdentityKernel kernel;
  auto server = naarpc::NaaServer::Start(**transport, address, 0, kernel);
  if (!server.ok()) {
    std::fprintf(stderr, "NAA: %s\n", server.status().ToString().c_str());
    _exit(1);
  }
  uint16_t port = (*server)->port();
  if (write(port_pipe, &port, sizeof port) != sizeof port) _exit(1);
  pause();
  _exit(0);
}

// ---- statistics and interceptors on vs off (--stats-ab) ----------------------

std::string Human(size_t b) {
  char buf[32];
  if (b >= (1u << 20)) std::snprintf(buf, sizeof buf, "%zu MiB", b >> 20);
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%zu KiB", b >> 10);
  else std::snprintf(buf, sizeof buf, "%zu B", b);
  return buf;
}


// An interceptor that does nothing (its hooks still run on every call).
class NoopInterceptor final : public naarpc::Interceptor {
 public:
  naarpc::Status OnCallStart(const naarpc::CallInfo& call) override {
    calls_.fetch_add(call.function_code != 0, std::memory_order_relaxed);
    return naarpc::Status::Ok();
  }
  void OnCallEnd(const naarpc::CallInfo&, const naarpc::Status&) override {}

 private:
  std::atomic<uint64_t> calls_{0};
};

std::shared_ptr<naarpc::InterceptorChain> NoopChain() {
  auto chain = std::make_shared<naarpc::InterceptorChain>();
  chain->Add(std::make_shared<NoopInterceptor>());
  return chain;
}

// Two NAAs: statistics and interceptors off (first port), on (second).
[[noreturn]] void NaaPairProcess(const std::string& transport_name, const std::string& address,
                                 int cpu, int port_pipe) {
  Pin(cpu);
  auto transport = MakeTransport(transport_name);
  if (!transport.ok()) _exit(1);
  IdentityKernel kernel;
  naarpc::ServerOptions off;
  off.stats = nullptr;
  naarpc::ServerOptions on;
  on.interceptors = NoopChain();
  auto a = naarpc::NaaServer::Start(**transport, address, 0, kernel, off);
  auto b = naarpc::NaaServer::Start(**transport, address, 0, kernel, on);
  if (!a.ok() || !b.ok()) _exit(1);
  uint16_t ports[2] = {(*a)->port(), (*b)->port()};
  if (write(port_pipe, ports, sizeof ports) != sizeof ports) _exit(1);
  pause();
  _exit(0);
}

int RunStatsAB(const std::string& label, int client_cpu, int server_cpu,
               const std::string& transport_name, const std::string& address,
               const std::vector<size_t>& sizes, double min_time, int rounds) {
  Pin(client_cpu);
  int pipefd[2];
  if (pipe(pipefd) != 0) return 1;
  const pid_t naa_pid = fork();
  if (naa_pid == 0) {
    close(pipefd[0]);
    NaaPairProcess(transport_name, address, server_cpu, pipefd[1]);
  }
  close(pipefd[1]);
  uint16_t ports[2] = {0, 0};
  if (read(pipefd[0], ports, sizeof ports) != sizeof ports) {
    std::fprintf(stderr, "NAA process failed to start\n");
    return 1;
  }
  close(pipefd[0]);
  auto transport = MakeTransport(transport_name);
  if (!transport.ok()) return 1;
  std::printf("\n== %s: client CPU %d, server CPU %d, transport %s: statistics and "
              "interceptors off vs on, %d alternating rounds ==\n",
              label.c_str(), client_cpu, server_cpu, transport_name.c_str(), rounds);
  std::printf("%-9s | %10s %10s %7s | per-round ratios\n", "payload", "off us", "on us", "on/off");
  int rc = 0;
  for (size_t bytes : sizes) {
    naarpc::codegen::StubOptions off_options, on_options;
    off_options.session = on_options.session = g_client_options;
    off_options.stats = nullptr;
    on_options.interceptors = NoopChain();
    const std::vector<naarpc::RegionSpec> regions = {
        {"data", naarpc::Direction::kInOut, bytes}};
    auto off_pool = std::make_shared<naarpc::codegen::SessionPool>(
        **transport, address, ports[0], "bench.Identity", regions, off_options);
    auto on_pool = std::make_shared<naarpc::codegen::SessionPool>(
        **transport, address, ports[1], "bench.Identity", regions, on_options);
    const auto deadline = naarpc::Deadline::After(std::chrono::seconds(60));
    auto off_lease = off_pool->Acquire(deadline);
    auto on_lease = on_pool->Acquire(deadline);
    if (!off_lease.ok() || !on_lease.ok()) {
      std::fprintf(stderr, "open failed\n");
      rc = 1;
      break;
    }
    bool failed = false;
    auto call = [&](naarpc::codegen::SessionPool::Lease& lease) {
      naarpc::Status s =
          lease.Call(kIdentity, naarpc::Deadline::After(std::chrono::seconds(60)), {});
      failed |= !s.ok();
      return s.ok();
    };
    std::vector<double> off_medians, on_medians, ratios;
    for (int r = 0; r < rounds && !failed; ++r) {
      // Alternating which goes first, so a drift favours neither.
      Stats off_stats, on_stats;
      if (r % 2 == 0) {
        off_stats = Measure(bytes, min_time, [&] { return call(*off_lease); });
        on_stats = Measure(bytes, min_time, [&] { return call(*on_lease); });
      } else {
        on_stats = Measure(bytes, min_time, [&] { return call(*on_lease); });
        off_stats = Measure(bytes, min_time, [&] { return call(*off_lease); });
      }
      off_medians.push_back(off_stats.median_us);
      on_medians.push_back(on_stats.median_us);
      ratios.push_back(on_stats.median_us / off_stats.median_us);
    }
    if (failed) {
      std::fprintf(stderr, "call failed\n");
      rc = 1;
      break;
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
    };
    const double off_us = median(off_medians), on_us = median(on_medians);
    std::string per_round;
    for (double x : ratios) {
      char buf[16];
      std::snprintf(buf, sizeof buf, " %.3f", x);
      per_round += buf;
    }
    std::printf("%-9s | %10.2f %10.2f %7.3f |%s\n", Human(bytes).c_str(), off_us, on_us,
                on_us / off_us, per_round.c_str());
    std::printf("result stats_ab placement=%s bytes=%zu off_median_us=%.3f on_median_us=%.3f "
                "ratio=%.4f median_round_ratio=%.4f\n",
                client_cpu == server_cpu ? "same" : "split", bytes, off_us, on_us, on_us / off_us,
                median(ratios));
    std::fflush(stdout);
  }
  kill(naa_pid, SIGKILL);
  waitpid(naa_pid, nullptr, 0);
  std::printf("(medians over the rounds of each round's median round trip; on = statistics on "
              "both sides + one no-op interceptor each)\n");
  return rc;
}

struct Row {
  size_t bytes;
  Stats naarpc, raw;
};

int RunPlacement(const std::string& label, int client_cpu, int server_cpu,
                 const std::string& transport_name, const std::string& address,
                 const std::vector<size_t>& sizes, double min_time, bool machine) {
  Pin(client_cpu);
  // Raw TCP echo server.
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int reuse = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &reuse, sizeof reuse);
  if (bind(lfd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(lfd, 4) != 0) {
    std::perror("raw listen");
    return 1;
  }
  socklen_t sl = sizeof sa;
  getsockname(lfd, reinterpret_cast<sockaddr*>(&sa), &sl);
  const bool tcp_baseline = g_baseline == "tcp";
  const bool no_baseline = g_baseline == "none";
  int raw_pipe[2];
  if (pipe(raw_pipe) != 0) return 1;
  const pid_t raw_pid = fork();
  if (raw_pid == 0) {
    close(raw_pipe[0]);
    if (no_baseline) _exit(0);
    if (tcp_baseline) RawEchoServer(lfd, server_cpu);
    close(lfd);
    PingPongProcess(transport_name, address, server_cpu, raw_pipe[1]);
  }
  close(lfd);
  close(raw_pipe[1]);
  uint16_t raw_port = 0;
  if (!tcp_baseline && !no_baseline &&
      read(raw_pipe[0], &raw_port, sizeof raw_port) != sizeof raw_port) {
    std::fprintf(stderr, "ping-pong process failed to start\n");
    kill(raw_pid, SIGKILL);
    return 1;
  }
  close(raw_pipe[0]);

  int pipefd[2];
  if (pipe(pipefd) != 0) return 1;
  const pid_t naa_pid = fork();
  if (naa_pid == 0) {
    close(pipefd[0]);
    NaaProcess(transport_name, address, server_cpu, pipefd[1]);
  }
  close(pipefd[1]);
  uint16_t naa_port = 0;
  if (read(pipefd[0], &naa_port, sizeof naa_port) != sizeof naa_port) {
    std::fprintf(stderr, "NAA process failed to start\n");
    kill(raw_pid, SIGKILL);
    return 1;
  }
  close(pipefd[0]);

  auto transport = MakeTransport(transport_name);
  if (!transport.ok()) {
    std::fprintf(stderr, "%s\n", transport.status().ToString().c_str());
    return 1;
  }
  std::vector<Row> rows;
  int rc = 0;
  for (size_t bytes : sizes) {
    Row row{bytes, {}, {}};
    // naarpc
    auto session = naarpc::ClientSession::Open(
        **transport, address, naa_port, {{"data", naarpc::Direction::kInOut, bytes}},
        g_client_options);
    for (int attempt = 1; !session.ok() && attempt < 3; ++attempt) {
      // Reported, then retried: a failed open is a finding, not a reason to
      // lose the rest of the run.
      std::fprintf(stderr, "open (%zu bytes) failed, retrying: %s\n", bytes,
                   session.status().ToString().c_str());
      std::printf("warning: open of the %zu-byte session failed once: %s\n", bytes,
                  session.status().ToString().c_str());
      session = naarpc::ClientSession::Open(
          **transport, address, naa_port, {{"data", naarpc::Direction::kInOut, bytes}},
        g_client_options);
    }
    if (!session.ok()) {
      std::fprintf(stderr, "open: %s\n", session.status().ToString().c_str());
      rc = 1;
      break;
    }
    std::memset((*session)->buffer(0).data(), 0x5a, bytes);
    bool failed = false;
    row.naarpc = Measure(bytes, min_time, [&] {
      naarpc::Status s = (*session)->Call(kIdentity, naarpc::Deadline::After(std::chrono::seconds(60)));
      if (!s.ok()) {
        std::fprintf(stderr, "call: %s\n", s.ToString().c_str());
        failed = true;
      }
      return s.ok();
    });
    (*session)->Close().IgnoreError();
    if (failed) { rc = 1; break; }
    if (no_baseline) {
      // naarpc only.
    } else if (tcp_baseline) {
      int fd = socket(AF_INET, SOCK_STREAM, 0);
      if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
        std::perror("raw connect");
        rc = 1;
        break;
      }
      TuneSocket(fd);
      uint64_t size = bytes;
      WriteAll(fd, reinterpret_cast<char*>(&size), 8);
      std::vector<char> buf(bytes, 0x5a);
      row.raw = Measure(bytes, min_time, [&] {
        return WriteAll(fd, buf.data(), bytes) && ReadAll(fd, buf.data(), bytes);
      });
      close(fd);
    } else {
      auto pingpong = naarpc::bench::TransportPingPong::Open(**transport, address, raw_port, bytes);
      if (!pingpong.ok()) {
        std::fprintf(stderr, "ping-pong open: %s\n", pingpong.status().ToString().c_str());
        rc = 1;
        break;
      }
      row.raw = Measure(bytes, min_time, [&] { return (*pingpong)->RoundTrip(); });
    }
    rows.push_back(row);
  }
  kill(naa_pid, SIGKILL);
  kill(raw_pid, SIGKILL);
  waitpid(naa_pid, nullptr, 0);
  waitpid(raw_pid, nullptr, 0);

  std::printf("\n== %s: client CPU %d, server CPU %d, transport %s ==\n", label.c_str(),
              client_cpu, server_cpu, transport_name.c_str());
  const std::string raw_name = tcp_baseline ? "tcp" : transport_name == "verbs" ? "verbs" : "emu";
  std::printf("baseline: %s\n",
              no_baseline    ? "none (--baseline=none)"
              : tcp_baseline ? "raw TCP ping-pong of the same bytes (loopback, TCP_NODELAY)"
                             : ("raw " + transport_name +
                                " transport: one WRITE_WITH_IMM each way, no naarpc engine")
                                   .c_str());
  std::printf("%-9s | %12s %12s %7s | %12s %12s %7s\n", "payload", "naarpc us",
              ("raw " + raw_name + " us").substr(0, 12).c_str(), "ratio", "naarpc MB/s",
              "raw MB/s", "ratio");
  std::printf("----------+-------------------------------------+-------------------------------------\n");
  for (const Row& r : rows) {
    // Bandwidth counts the bytes moved both ways per round trip.
    const double nbw = 2.0 * double(r.bytes) / r.naarpc.median_us;
    if (no_baseline) {
      std::printf("%-9s | %12.1f %12s %7s | %12.1f %12s %7s\n", Human(r.bytes).c_str(),
                  r.naarpc.median_us, "-", "-", nbw, "-", "-");
      continue;
    }
    const double rbw = 2.0 * double(r.bytes) / r.raw.median_us;
    std::printf("%-9s | %12.1f %12.1f %7.2f | %12.1f %12.1f %7.2f\n", Human(r.bytes).c_str(),
                r.naarpc.median_us, r.raw.median_us, r.naarpc.median_us / r.raw.median_us, nbw,
                rbw, nbw / rbw);
  }
  std::printf("(median round trip per call; latency ratio = naarpc/raw, lower is better;\n"
              " bandwidth ratio = naarpc/raw, higher is better; timestamps: %s)\n",
              CallTimer().source());
  if (machine) {
    const char* placement = client_cpu == server_cpu ? "same" : "split";
    for (const Row& r : rows) {
      std::printf("result placement=%s transport=%s bytes=%zu iterations=%zu "
                  "naarpc_median_us=%.3f naarpc_min_us=%.3f naarpc_mean_us=%.3f "
                  "raw_median_us=%.3f naarpc_p10_p90_p99_us=%.1f/%.1f/%.1f "
                  "raw_p10_p90_p99_us=%.1f/%.1f/%.1f raw_mean_us=%.3f\n",
                  placement, transport_name.c_str(), r.bytes, r.naarpc.iterations,
                  r.naarpc.median_us, r.naarpc.min_us, r.naarpc.mean_us, r.raw.median_us,
                  r.naarpc.p10_us, r.naarpc.p90_us, r.naarpc.p99_us, r.raw.p10_us, r.raw.p90_us,
                  r.raw.p99_us, r.raw.mean_us);
    }
  }
  std::fflush(stdout);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"naarpc call benchmark: naarpc vs. raw TCP ping-pong of the same bytes"};
  std::string placement = "both";
  std::string transport = "emulated";
  std::string address = "127.0.0.1";
  double min_time = 0.3;
  std::vector<size_t> sizes = {64, 1024, 4096, 65536, 1 << 20, 16 << 20, 64 << 20};
  app.add_option("--placement", placement, "same (both on CPU 0), split (CPU 0 / CPU 1), both")
      ->check(CLI::IsMember({"same", "split", "both"}));
  app.add_option("--transport", transport, "emulated or verbs")
      ->check(CLI::IsMember({"emulated", "verbs", "auto"}));
  app.add_option("--address", address, "address the NAA listens on");
  app.add_option("--min-time", min_time, "minimum seconds per measurement")->check(CLI::PositiveNumber);
  app.add_option("--sizes", sizes, "payload sizes in bytes");
  bool machine = false;
  app.add_option("--iterations", g_iterations,
                 "minimum timed calls per size (0 = 4000 up to 4 KiB, 400 up to 1 MiB, 12 above)");
  app.add_option("--poll-spin-us", g_poll_spin_us,
                 "verbs only: CQ busy-poll before sleeping, both sides (-1 = VerbsOptions default)");
  app.add_option("--predictive-wake", g_predictive_wake,
                 "verbs only: 1/0 = VerbsOptions::predictive_wake on/off, both sides (-1 = default)")
      ->check(CLI::Range(-1, 1));
  std::string dialect = "spec";
  app.add_option("--dialect", dialect,
                 "wire dialect: spec (metadata region) or reference (INPUT/OUTPUT flags)")
      ->check(CLI::IsMember({"spec", "reference"}));
  bool metadata_every_call = false;
  app.add_flag("--metadata-every-call", metadata_every_call,
               "spec dialect: rewrite the metadata region with every call (default: first call only)");
  std::string timer = "tsc";
  app.add_option("--timer", timer,
                 "per-call timestamps: tsc (RDTSCP where available, like perftest) or steady "
                 "(clock_gettime; ~0.8 us per read in a TCG guest)")
      ->check(CLI::IsMember({"tsc", "steady"}));
  app.add_option("--baseline", g_baseline,
                 "tcp (raw TCP ping-pong), transport (the transport's own WRITE_WITH_IMM "
                 "ping-pong, no engine) or none; default: tcp for emulated, transport for verbs")
      ->check(CLI::IsMember({"tcp", "transport", "none"}));
  app.add_flag("--machine", machine, "also print one 'result key=value...' line per size");
  int stats_ab = 0;
  app.add_option("--stats-ab", stats_ab,
                 "instead: statistics and interceptors off vs on, this many alternating rounds "
                 "(the generated clients' call path)")
      ->check(CLI::Range(0, 1000));
  CLI11_PARSE(app, argc, argv);
  g_steady_timer = timer == "steady";
  if (g_baseline.empty()) g_baseline = transport == "verbs" ? "transport" : "tcp";
  g_client_options.dialect =
      dialect == "reference" ? naarpc::Dialect::kReference : naarpc::Dialect::kSpec;
  g_client_options.metadata_every_call = metadata_every_call;

  const int cpus = int(sysconf(_SC_NPROCESSORS_ONLN));
  int rc = 0;
  if (stats_ab > 0) {
    if (placement == "same" || placement == "both") {
      rc |= RunStatsAB("same CPU", 0, 0, transport, address, sizes, min_time, stats_ab);
    }
    if ((placement == "split" || placement == "both") && cpus >= 2) {
      rc |= RunStatsAB("split CPUs", 0, 1, transport, address, sizes, min_time, stats_ab);
    }
    return rc;
  }
  if (placement == "same" || placement == "both") {
    rc |= RunPlacement("same CPU", 0, 0, transport, address, sizes, min_time, machine);
  }
  if (placement == "split" || placement == "both") {
    if (cpus < 2) {
      std::printf("split placement needs 2 CPUs; this machine has %d\n", cpus);
    } else {
      rc |= RunPlacement("split CPUs", 0, 1, transport, address, sizes, min_time, machine);
    }
  }
  return rc;
}
