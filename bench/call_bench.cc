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
//       [--iterations=N] [--blocks=N] [--poll-spin-us=US] [--predictive-wake=0|1] [--dialect=spec|reference]
//       [--naa-stats=on|off] [--raw-wait-ms=MS] [--machine]
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
//
// This file is the command line; bench/call_bench.h lists the other parts.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/call_bench.h"

int main(int argc, char** argv) {
  namespace cb = naarpc::bench::call_bench;
  CLI::App app{"naarpc call benchmark: naarpc vs. raw TCP ping-pong of the same bytes"};
  cb::Options o;
  std::string placement = "both";
  o.sizes = {64, 1024, 4096, 65536, 1 << 20, 16 << 20, 64 << 20};
  app.add_option("--placement", placement, "same (both on CPU 0), split (CPU 0 / CPU 1), both")
      ->check(CLI::IsMember({"same", "split", "both"}));
  app.add_option("--transport", o.transport, "emulated or verbs")
      ->check(CLI::IsMember({"emulated", "verbs", "auto"}));
  app.add_option("--address", o.address, "address the NAA listens on");
  app.add_option("--min-time", o.min_time, "minimum seconds per measurement")
      ->check(CLI::PositiveNumber);
  app.add_option("--sizes", o.sizes, "payload sizes in bytes");
  app.add_option("--iterations", o.iterations,
                 "minimum timed calls per size (0 = 4000 up to 4 KiB, 400 up to 1 MiB, 12 above)");
  app.add_option("--poll-spin-us", o.poll_spin_us,
                 "verbs only: CQ busy-poll before sleeping, both sides (-1 = VerbsOptions default)");
  app.add_option("--predictive-wake", o.predictive_wake,
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
  app.add_option("--baseline", o.baseline,
                 "tcp (raw TCP ping-pong), transport (the transport's own WRITE_WITH_IMM "
                 "ping-pong, no engine) or none; default: tcp for emulated, transport for verbs")
      ->check(CLI::IsMember({"tcp", "transport", "none"}));
  app.add_option("--blocks", o.blocks,
                 "naarpc and the baseline in this many pairs of alternating blocks of "
                 "--iterations calls (default 100) on connections open throughout; "
                 "ratio = median of the pairs' ratios (0 = one measurement each)")
      ->check(CLI::Range(0, 10000));
  std::string naa_stats = "on";
  app.add_option("--naa-stats", naa_stats,
                 "on (default, as NaaServer's) or off: the NAA's per-routine statistics, "
                 "whose two timestamps per call are system calls where the clocksource is not "
                 "the TSC")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--raw-wait-ms", o.raw_wait_ms,
                 "tcp baseline: both ends wait in recv() with SO_RCVTIMEO of this many ms, as "
                 "naarpc bounds its waits by a deadline (0 = untimed, a plain ping-pong)")
      ->check(CLI::Range(0, 3600000));
  app.add_flag("--machine", o.machine, "also print one 'result key=value...' line per size");
  int stats_ab = 0;
  app.add_option("--stats-ab", stats_ab,
                 "instead: statistics and interceptors off vs on, this many alternating rounds "
                 "(the generated clients' call path)")
      ->check(CLI::Range(0, 1000));
  CLI11_PARSE(app, argc, argv);
  o.steady_timer = timer == "steady";
  o.naa_stats = naa_stats == "on";
  if (o.baseline.empty()) o.baseline = o.transport == "verbs" ? "transport" : "tcp";
  if (o.raw_wait_ms > 0 && (o.baseline != "tcp" || stats_ab > 0)) {
    std::fprintf(stderr, "--raw-wait-ms applies to the TCP baseline only (--baseline %s%s)\n",
                 o.baseline.c_str(), stats_ab > 0 ? ", --stats-ab" : "");
    return 2;
  }
  o.client.dialect =
      dialect == "reference" ? naarpc::Dialect::kReference : naarpc::Dialect::kSpec;
  o.client.metadata_every_call = metadata_every_call;

  const int cpus = int(sysconf(_SC_NPROCESSORS_ONLN));
  int rc = 0;
  if (stats_ab > 0) {
    if (placement == "same" || placement == "both") {
      rc |= cb::RunStatsAB(o, "same CPU", 0, 0, stats_ab);
    }
    if ((placement == "split" || placement == "both") && cpus >= 2) {
      rc |= cb::RunStatsAB(o, "split CPUs", 0, 1, stats_ab);
    }
    return rc;
  }
  if (placement == "same" || placement == "both") {
    rc |= cb::RunPlacement(o, "same CPU", 0, 0);
  }
  if (placement == "split" || placement == "both") {
    if (cpus < 2) {
      std::printf("split placement needs 2 CPUs; this machine has %d\n", cpus);
    } else {
      rc |= cb::RunPlacement(o, "split CPUs", 0, 1);
    }
  }
  return rc;
}
