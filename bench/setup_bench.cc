// setup_bench: what a new session costs before its first result, for R
// regions of S bytes each: Open (connect + the host's registrations + the
// MRSP, in which the NAA allocates and registers its memory) and the first
// call (every region's bytes written, a 64-byte result back). Open is also
// given in its two phases, as the session measured them (SetupTimes): the
// connect, and the registrations + MRSP (what the NAAICE library's
// naaice_register_mrs + naaice_do_mrsp cover). Alongside, in
// the same run and placement, the transport's own connection set-up (Connect
// and Accept, no memory), the floor any protocol on it pays. The NAA runs in
// a child process; each row is the median of --repeat fresh sessions.
//
//   bazel run -c opt //bench:setup_bench -- [--transport=emulated|verbs]
//       [--address=127.0.0.1] [--regions 1 8 32] [--sizes 4096 1048576 67108864]
//       [--repeat=5] [--max-total=2147483648]
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/naa_child.h"
#include "naarpc/client_session.h"
#include "naarpc/naa_server.h"
#include "naarpc/transport_factory.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint8_t kFunction = 1;
constexpr size_t kResultBytes = 64;

// Answers every call with success; the last region is the result.
class ResultKernel : public naarpc::NaaHandler {
 public:
  uint8_t Handle(naarpc::NaaCall&) override { return naarpc::kNaaStatusSuccess; }
};

// Child: the NAA on one port, a bare listener (Accept, hold until the host
// leaves) on another; reports both ports.
[[noreturn]] void NaaProcess(const std::string& transport_name, const std::string& address,
                             const naarpc::bench::NaaChild::ReportPorts& report) {
  auto transport = naarpc::NewTransport(transport_name);
  if (!transport.ok()) {
    std::fprintf(stderr, "NAA: %s\n", transport.status().ToString().c_str());
    _exit(1);
  }
  ResultKernel kernel;
  naarpc::ServerOptions options;
  options.max_regions = 64;
  auto server = naarpc::NaaServer::Start(**transport, address, 0, kernel, options);
  auto listener = (*transport)->Listen(address, 0);
  if (!server.ok() || !listener.ok()) {
    std::fprintf(stderr, "NAA: %s %s\n", server.status().ToString().c_str(),
                 listener.status().ToString().c_str());
    _exit(1);
  }
  report({(*server)->port(), (*listener)->port()});
  for (;;) {
    auto conn = (*listener)->Accept(naarpc::Deadline::Infinite());
    if (!conn.ok()) continue;
    naarpc::Completion c[4];
    for (;;) {  // until the host disconnects
      auto n = (*conn)->PollCompletions(c, naarpc::Deadline::Infinite());
      if (!n.ok()) break;
    }
  }
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::string Human(size_t b) {
  char buf[32];
  if (b >= (1u << 20)) {
    std::snprintf(buf, sizeof buf, "%zu MiB", b >> 20);
  } else if (b >= 1024) {
    std::snprintf(buf, sizeof buf, "%zu KiB", b >> 10);
  } else {
    std::snprintf(buf, sizeof buf, "%zu B", b);
  }
  return buf;
}

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

}  // namespace

int main(int argc, char** argv) {
  std::string transport_name = "emulated";
  std::string address = "127.0.0.1";
  std::vector<size_t> region_counts = {1, 8, 32};
  std::vector<size_t> sizes = {4096, size_t{1} << 20, size_t{64} << 20};
  int repeat = 5;
  size_t max_total = size_t{2} << 30;
  CLI::App app{"naarpc set-up benchmark: Open + first call vs. the transport's own set-up"};
  app.add_option("--transport", transport_name, "emulated, verbs or auto")
      ->check(CLI::IsMember({"emulated", "verbs", "auto"}));
  app.add_option("--address", address, "address the NAA listens on");
  app.add_option("--regions", region_counts, "regions per session (one row each)");
  app.add_option("--sizes", sizes, "bytes per region (one row each)");
  app.add_option("--repeat", repeat, "fresh sessions per row (median)")->check(CLI::PositiveNumber);
  app.add_option("--max-total", max_total, "rows whose regions add up to more are left out");
  CLI11_PARSE(app, argc, argv);

  std::optional<naarpc::bench::NaaChild> naa = naarpc::bench::NaaChild::Start(
      2, [&](const naarpc::bench::NaaChild::ReportPorts& report) {
        NaaProcess(transport_name, address, report);
      });
  if (!naa) {
    std::fprintf(stderr, "the NAA did not start\n");
    return 1;
  }
  const uint16_t ports[2] = {naa->port(0), naa->port(1)};
  auto transport = naarpc::NewTransport(transport_name);
  if (!transport.ok()) {
    std::fprintf(stderr, "%s\n", transport.status().ToString().c_str());
    return 1;
  }
  const auto deadline = [] { return naarpc::Deadline::After(std::chrono::seconds(60)); };

  // The floor: the transport's own connection set-up.
  std::vector<double> raw;
  for (int i = 0; i < repeat; ++i) {
    const auto t0 = Clock::now();
    auto conn = (*transport)->Connect(address, ports[1], deadline());
    const auto t1 = Clock::now();
    if (!conn.ok()) {
      std::fprintf(stderr, "connect: %s\n", conn.status().ToString().c_str());
      return 1;
    }
    raw.push_back(Ms(t1 - t0));
    (*conn)->Disconnect().IgnoreError();
  }
  const double raw_ms = Median(raw);

  std::printf("== set-up, transport %s: median of %d fresh sessions per row ==\n",
              (*transport)->name().data(), repeat);
  std::printf("transport connect alone (no memory, no MRSP): %.2f ms\n", raw_ms);
  std::printf("regions x size    | open ms | connect ms | reg + MRSP ms | first call ms | "
              "to first result ms | open / connect\n");
  std::printf("------------------+---------+------------+---------------+---------------+"
              "--------------------+---------------\n");
  int rc = 0;
  for (size_t count : region_counts) {
    for (size_t size : sizes) {
      if (count * size > max_total) continue;
      std::vector<naarpc::RegionSpec> specs;
      for (size_t r = 0; r < count; ++r) {
        specs.push_back({"in" + std::to_string(r), naarpc::Direction::kIn, size});
      }
      specs.push_back({"result", naarpc::Direction::kOut, kResultBytes});
      std::vector<double> open, first, connect, mrsp;
      for (int i = 0; i < repeat && rc == 0; ++i) {
        const auto t0 = Clock::now();
        auto session = naarpc::ClientSession::Open(**transport, address, ports[0], specs, {},
                                                   deadline());
        const auto t1 = Clock::now();
        if (!session.ok()) {
          std::fprintf(stderr, "open (%zu x %zu): %s\n", count, size,
                       session.status().ToString().c_str());
          rc = 1;
          break;
        }
        naarpc::Status s = (*session)->Call(kFunction, deadline());
        const auto t2 = Clock::now();
        if (!s.ok()) {
          std::fprintf(stderr, "call (%zu x %zu): %s\n", count, size, s.ToString().c_str());
          rc = 1;
          break;
        }
        open.push_back(Ms(t1 - t0));
        first.push_back(Ms(t2 - t1));
        connect.push_back(Ms((*session)->setup_times().connect));
        mrsp.push_back(Ms((*session)->setup_times().register_and_mrsp));
        (*session)->Close().IgnoreError();
      }
      if (rc != 0) break;
      std::vector<double> total(open.size());
      for (size_t i = 0; i < open.size(); ++i) total[i] = open[i] + first[i];
      const std::string row = std::to_string(count) + " x " + Human(size);
      std::printf("%-17s | %7.2f | %10.2f | %13.2f | %13.2f | %18.2f | %9.1fx\n", row.c_str(),
                  Median(open), Median(connect), Median(mrsp), Median(first), Median(total),
                  Median(open) / raw_ms);
    }
  }
  naa->Stop();
  return rc;
}
