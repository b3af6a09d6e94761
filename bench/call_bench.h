// call_bench's parts (bench/call_bench.cc holds the command line and the
// file's description): its options, the peers in child processes
// (call_bench_peers.cc), the timed loop (call_bench_measure.h) and its two
// modes, a table per placement (call_bench_placement.cc) and statistics on
// vs off (call_bench_stats_ab.cc).
#ifndef NAARPC_BENCH_CALL_BENCH_H_
#define NAARPC_BENCH_CALL_BENCH_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "naarpc/client_session.h"

namespace naarpc::bench::call_bench {

// The one routine both NAA processes serve: the region comes back unchanged.
constexpr uint8_t kIdentity = 1;

struct Options {
  std::string transport = "emulated";  // --transport
  std::string address = "127.0.0.1";   // --address: the NAA's
  std::vector<size_t> sizes;           // --sizes: payload bytes, a row each
  double min_time = 0.3;               // --min-time: seconds per measurement
  bool machine = false;                // --machine: also "result ..." lines
  // --baseline: "tcp" (a TCP ping-pong), "transport" (the same transport's
  // WRITE_WITH_IMM ping-pong without naarpc's engine,
  // bench/transport_pingpong.h) or "none".
  std::string baseline;
  // --timer=steady: time each call with steady_clock even where RDTSCP exists.
  bool steady_timer = false;
  // --iterations: overrides IterationsFor() (0 = built-in counts); with
  // --blocks, the calls per block (0 = 100).
  size_t iterations = 0;
  // --blocks: naarpc and its baseline in this many pairs of alternating
  // blocks (ABBA order) on connections open throughout, instead of one
  // measurement each (0). Each pair gives a ratio (naarpc block median /
  // baseline block median); their median is the engine's cost, robust
  // against phases of a shared host that slow either side for a while.
  int blocks = 0;
  // --poll-spin-us: VerbsOptions::poll_spin for both sides (-1 = default).
  int poll_spin_us = -1;
  // --predictive-wake: VerbsOptions::predictive_wake for both sides (-1 = default).
  int predictive_wake = -1;
  // --naa-stats=off: the NAA keeps no per-routine statistics (default on,
  // as NaaServer's default), to size their part of a call.
  bool naa_stats = true;
  // --raw-wait-ms: both ends of the TCP ping-pong wait in recv() with
  // SO_RCVTIMEO set to this many ms, waiting again when one ends (0:
  // untimed, a plain ping-pong), as naarpc's emulated transport bounds each
  // wait: a timed wait arms a kernel timer, which this isolates from the
  // engine's cost.
  int raw_wait_ms = 0;
  // --dialect, --metadata-every-call: the host's wire dialect (the NAA
  // follows the host's MRSP).
  ClientOptions client;
};

// One table: naarpc vs the baseline per payload size, the client on CPU
// `client_cpu` and the peers on `server_cpu`. 0 or 1 (a failure).
int RunPlacement(const Options& o, const std::string& label, int client_cpu, int server_cpu);

// --stats-ab: statistics and interceptors off vs on in `rounds` alternating
// rounds. 0 or 1 (a failure).
int RunStatsAB(const Options& o, const std::string& label, int client_cpu, int server_cpu,
               int rounds);

// "64 B", "4 KiB", "1 MiB" (table rows).
std::string Human(size_t bytes);

}  // namespace naarpc::bench::call_bench

#endif  // NAARPC_BENCH_CALL_BENCH_H_
