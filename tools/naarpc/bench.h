// `naarpc bench`: latency percentiles and throughput of one routine per
// payload size and client count, next to the raw transport's ping-pong of
// the same sizes measured in the same run; CSV and PNG plots (gnuplot).
#ifndef NAARPC_TOOLS_NAARPC_BENCH_H_
#define NAARPC_TOOLS_NAARPC_BENCH_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "idl/ir.h"
#include "naarpc/client_session.h"
#include "naarpc/status.h"

namespace naarpc::cli {

struct BenchOptions {
  const idl::Service* service = nullptr;
  const idl::Routine* routine = nullptr;
  std::string host;
  uint16_t port = 0;
  // More NAAs (several --target): client c calls NAA c % (1 + size), the
  // first being host:port, so the clients spread round robin over them.
  std::vector<std::pair<std::string, uint16_t>> more_naas;
  std::string transport = "auto";              // NewTransport name
  std::string device;                          // verbs device
  ClientOptions client;                        // dialect, timeouts
  std::chrono::milliseconds call_deadline{0};  // 0: the routine's deadline_ms
  // Payload bytes per call: each size sets the element count of every
  // variable-length input and input stream (bytes / element size; a size
  // that is not a whole number of elements is refused; 0: empty). Empty: the
  // routine's full size once.
  std::vector<uint64_t> sizes;
  // --in NAME=SPEC per input (ParseValue); unnamed inputs are random. With
  // sizes, variable-length inputs take a generator: zeros, seq or random.
  std::map<std::string, std::string> inputs;
  std::vector<int> clients{1};               // concurrent clients (threads, a session each)
  std::chrono::milliseconds duration{2000};  // per (size, clients) point
  bool baseline = true;                      // measure the raw transport ping-pong too
  std::string csv_path;                      // empty: no CSV
  std::string plot_prefix;                   // empty: no plots; else PREFIX_latency.png, ...
  bool progress = false;                     // a progress bar on stderr
};

// Runs the benchmark, printing a table on stdout. The raw baseline's
// ping-pong peer runs in a child process on this host (forked before any
// transport exists). Errors name the problem (a size above a parameter's
// maximum, an unreachable target, a failed call, gnuplot missing).
Status RunBench(const BenchOptions& options);

// "64", "4K", "1M", "64M", "1G" (binary units; "KiB" etc. too) -> bytes.
Result<uint64_t> ParseSize(std::string_view text);

}  // namespace naarpc::cli

#endif  // NAARPC_TOOLS_NAARPC_BENCH_H_
