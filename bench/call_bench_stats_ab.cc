// --stats-ab: the cost of statistics and interceptors (docs/operating.md),
// through a generated client's call path (SessionPool::Lease).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/call_bench.h"
#include "bench/call_bench_measure.h"
#include "bench/call_bench_peers.h"
#include "naarpc/impl/codegen_support.h"

namespace naarpc::bench::call_bench {

int RunStatsAB(const Options& o, const std::string& label, int client_cpu, int server_cpu,
               int rounds) {
  Pin(client_cpu);
  // Two NAAs: statistics and interceptors off (port 0) and on (port 1).
  ServerOptions off;
  off.stats = nullptr;
  ServerOptions on;
  on.interceptors = NoopChain();
  std::optional<NaaChild> naas = StartNaas(o, server_cpu, {off, on});
  if (!naas) {
    std::fprintf(stderr, "NAA process failed to start\n");
    return 1;
  }
  auto transport = MakeTransport(o);
  if (!transport.ok()) return 1;
  std::printf("\n== %s: client CPU %d, server CPU %d, transport %s: statistics and "
              "interceptors off vs on, %d alternating rounds ==\n",
              label.c_str(), client_cpu, server_cpu, o.transport.c_str(), rounds);
  std::printf("%-9s | %10s %10s %7s | per-round ratios\n", "payload", "off us", "on us", "on/off");
  int rc = 0;
  for (size_t bytes : o.sizes) {
    codegen::StubOptions off_options, on_options;
    off_options.session = on_options.session = o.client;
    off_options.stats = nullptr;
    on_options.interceptors = NoopChain();
    const std::vector<RegionSpec> regions = {{"data", Direction::kInOut, bytes}};
    auto off_pool = std::make_shared<codegen::SessionPool>(
        **transport, o.address, naas->port(0), "bench.Identity", kIdentity, regions, off_options);
    auto on_pool = std::make_shared<codegen::SessionPool>(
        **transport, o.address, naas->port(1), "bench.Identity", kIdentity, regions, on_options);
    const auto deadline = Deadline::After(std::chrono::seconds(60));
    auto off_lease = off_pool->Acquire(deadline);
    auto on_lease = on_pool->Acquire(deadline);
    if (!off_lease.ok() || !on_lease.ok()) {
      std::fprintf(stderr, "open failed\n");
      rc = 1;
      break;
    }
    bool failed = false;
    auto call = [&](codegen::SessionPool::Lease& lease) {
      Status s = lease.Call(kIdentity, Deadline::After(std::chrono::seconds(60)), {});
      failed |= !s.ok();
      return s.ok();
    };
    std::vector<double> off_medians, on_medians, ratios;
    for (int r = 0; r < rounds && !failed; ++r) {
      // Alternating which goes first, so a drift favours neither.
      Stats off_stats, on_stats;
      if (r % 2 == 0) {
        off_stats = Measure(o, bytes, [&] { return call(*off_lease); });
        on_stats = Measure(o, bytes, [&] { return call(*on_lease); });
      } else {
        on_stats = Measure(o, bytes, [&] { return call(*on_lease); });
        off_stats = Measure(o, bytes, [&] { return call(*off_lease); });
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
  naas->Stop();
  std::printf("(medians over the rounds of each round's median round trip; on = statistics on "
              "both sides + one no-op interceptor each)\n");
  return rc;
}

}  // namespace naarpc::bench::call_bench
