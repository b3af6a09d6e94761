// One table per placement: an naarpc call per payload size beside its
// baseline (raw TCP, the transport's own ping-pong, or none), and with
// --machine a "result ..." line per size.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "bench/call_bench.h"
#include "bench/call_bench_measure.h"
#include "bench/call_bench_peers.h"
#include "bench/percentiles.h"
#include "bench/transport_pingpong.h"

namespace naarpc::bench::call_bench {
namespace {

struct Row {
  size_t bytes = 0;
  Stats naarpc, raw;  // with --blocks: over all blocks' calls
  // --blocks: each pair's naarpc / baseline block median; those of the
  // pairs whose two blocks were both fast; and how many blocks of each side
  // were slow (a median above kSlowBlock times the fastest block of either
  // side: calls that fell asleep while a loaded host had descheduled a
  // peer, or a real cost of one side if it has clearly more of them).
  std::vector<double> pair_ratios, fast_pair_ratios;
  std::vector<double> blocks_naarpc, blocks_raw;  // block medians, in pairs
  int slow_naarpc = 0, slow_raw = 0;
};

constexpr size_t kCallsPerBlock = 100;
constexpr double kSlowBlock = 3.0;

double MedianOf(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return Percentile(v, 50);
}

// --blocks: o.blocks pairs of blocks, naarpc and the baseline alternating
// in ABBA order (neither side always runs first), after one unrecorded
// warm-up block of each. False if a call failed.
template <typename A, typename B>
bool MeasureBlocks(const Options& o, size_t bytes, A&& naarpc_one, B&& raw_one, Row& row) {
  Options block = o;
  block.min_time = 0;
  block.iterations = o.iterations > 0 ? o.iterations : kCallsPerBlock;
  bool ok = true;
  auto naarpc = [&] { return ok && (ok = naarpc_one()); };
  auto raw = [&] { return ok && (ok = raw_one()); };
  Measure(block, bytes, naarpc);
  Measure(block, bytes, raw);
  std::vector<double> all_naarpc, all_raw;
  std::vector<double>& blocks_naarpc = row.blocks_naarpc;
  std::vector<double>& blocks_raw = row.blocks_raw;
  for (int i = 0; i < o.blocks && ok; ++i) {
    double n = 0, r = 0;
    if (i % 2 == 0) {
      n = Measure(block, bytes, naarpc, false, &all_naarpc).median_us;
      r = Measure(block, bytes, raw, false, &all_raw).median_us;
    } else {
      r = Measure(block, bytes, raw, false, &all_raw).median_us;
      n = Measure(block, bytes, naarpc, false, &all_naarpc).median_us;
    }
    blocks_naarpc.push_back(n);
    blocks_raw.push_back(r);
    row.pair_ratios.push_back(r > 0 ? n / r : 0);
  }
  if (!ok || all_naarpc.empty() || all_raw.empty()) return false;
  row.naarpc = Summarize(all_naarpc);
  row.raw = Summarize(all_raw);
  double fastest = blocks_naarpc.front();
  for (double v : blocks_naarpc) fastest = std::min(fastest, v);
  for (double v : blocks_raw) fastest = std::min(fastest, v);
  const double slow = kSlowBlock * fastest;
  for (size_t i = 0; i < blocks_naarpc.size(); ++i) {
    row.slow_naarpc += blocks_naarpc[i] > slow;
    row.slow_raw += blocks_raw[i] > slow;
    if (blocks_naarpc[i] <= slow && blocks_raw[i] <= slow) {
      row.fast_pair_ratios.push_back(row.pair_ratios[i]);
    }
  }
  return true;
}

void PrintTable(const Options& o, const std::string& label, int client_cpu, int server_cpu,
                const std::vector<Row>& rows) {
  const bool tcp_baseline = o.baseline == "tcp";
  const bool no_baseline = o.baseline == "none";
  std::printf("\n== %s: client CPU %d, server CPU %d, transport %s%s ==\n", label.c_str(),
              client_cpu, server_cpu, o.transport.c_str(),
              o.naa_stats ? "" : ", NAA statistics off");
  const std::string raw_name = tcp_baseline ? "tcp" : o.transport == "verbs" ? "verbs" : "emu";
  std::string baseline;
  if (no_baseline) {
    baseline = "none (--baseline=none)";
  } else if (tcp_baseline) {
    baseline = "raw TCP ping-pong of the same bytes (loopback, TCP_NODELAY";
    if (o.raw_wait_ms > 0) {
      baseline += ", receives timed: SO_RCVTIMEO " + std::to_string(o.raw_wait_ms) + " ms";
    }
    baseline += ")";
  } else {
    baseline = "raw " + o.transport + " transport: one WRITE_WITH_IMM each way, no naarpc engine";
  }
  std::printf("baseline: %s\n", baseline.c_str());
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
    const double ratio = r.pair_ratios.empty()        ? r.naarpc.median_us / r.raw.median_us
                         : r.fast_pair_ratios.empty() ? MedianOf(r.pair_ratios)
                                                      : MedianOf(r.fast_pair_ratios);
    std::printf("%-9s | %12.1f %12.1f %7.2f | %12.1f %12.1f %7.2f\n", Human(r.bytes).c_str(),
                r.naarpc.median_us, r.raw.median_us, ratio, nbw, rbw, nbw / rbw);
  }
  std::printf("(median round trip per call; latency ratio = naarpc/raw, lower is better;\n"
              " bandwidth ratio = naarpc/raw, higher is better; timestamps: %s)\n",
              CallTimer(o.steady_timer).source());
  if (o.blocks > 0 && !no_baseline) {
    std::printf("(--blocks %d: medians over all blocks' calls; latency ratio = median of the\n"
                " ratios of block medians of the pairs whose blocks were both fast, else of\n"
                " all pairs; a block is slow above %.0fx the fastest block)\n",
                o.blocks, kSlowBlock);
    for (const Row& r : rows) {
      std::printf("%-9s slow blocks naarpc/raw: %d/%d, fast pairs %zu; pair ratios:",
                  Human(r.bytes).c_str(), r.slow_naarpc, r.slow_raw, r.fast_pair_ratios.size());
      for (double x : r.pair_ratios) std::printf(" %.2f", x);
      std::printf("\n");
    }
  }
  if (o.machine) {
    const char* placement = client_cpu == server_cpu ? "same" : "split";
    for (const Row& r : rows) {
      std::printf("result placement=%s transport=%s bytes=%zu iterations=%zu "
                  "naarpc_median_us=%.3f naarpc_min_us=%.3f naarpc_mean_us=%.3f "
                  "raw_median_us=%.3f naarpc_p10_p90_p99_us=%.1f/%.1f/%.1f "
                  "raw_p10_p90_p99_us=%.1f/%.1f/%.1f raw_mean_us=%.3f raw_wait_ms=%d\n",
                  placement, o.transport.c_str(), r.bytes, r.naarpc.iterations,
                  r.naarpc.median_us, r.naarpc.min_us, r.naarpc.mean_us, r.raw.median_us,
                  r.naarpc.p10_us, r.naarpc.p90_us, r.naarpc.p99_us, r.raw.p10_us, r.raw.p90_us,
                  r.raw.p99_us, r.raw.mean_us, o.raw_wait_ms);
      if (!r.pair_ratios.empty()) {
        std::printf("blocks placement=%s bytes=%zu pairs=%zu pair_ratio_median=%.4f "
                    "fast_pairs=%zu fast_pair_ratio_median=%.4f "
                    "slow_blocks_naarpc=%d slow_blocks_raw=%d",
                    placement, r.bytes, r.pair_ratios.size(), MedianOf(r.pair_ratios),
                    r.fast_pair_ratios.size(), MedianOf(r.fast_pair_ratios), r.slow_naarpc,
                    r.slow_raw);
        const struct {
          const char* name;
          const std::vector<double>* list;
          const char* format;
        } lists[] = {{"pair_ratios", &r.pair_ratios, "%s%.4f"},
                     {"fast_pair_ratios", &r.fast_pair_ratios, "%s%.4f"},
                     {"naarpc_blocks_us", &r.blocks_naarpc, "%s%.1f"},
                     {"raw_blocks_us", &r.blocks_raw, "%s%.1f"}};
        for (const auto& [name, list, format] : lists) {
          std::printf(" %s=", name);
          for (size_t i = 0; i < list->size(); ++i) std::printf(format, i ? "," : "", (*list)[i]);
          if (list->empty()) std::printf("-");
        }
        std::printf("\n");
      }
    }
  }
  std::fflush(stdout);
}

// A TCP connection to the echo server on loopback port `port`, set up for
// `bytes`-byte round trips, receives waiting as TuneSocket's `wait_ms`;
// -1 (reported) if it cannot connect or set the socket up.
int ConnectTcp(uint16_t port, size_t bytes, int wait_ms) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sa.sin_port = htons(port);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    std::perror("raw connect");
    close(fd);
    return -1;
  }
  if (!TuneSocket(fd, wait_ms)) {
    std::perror("raw connect: setsockopt");
    close(fd);
    return -1;
  }
  uint64_t size = bytes;
  WriteAll(fd, reinterpret_cast<char*>(&size), 8);
  return fd;
}

// The TCP baseline: `bytes`-byte round trips with the echo server on
// loopback port `port`; nullopt (reported) if it cannot connect.
std::optional<Stats> MeasureTcp(const Options& o, uint16_t port, size_t bytes) {
  const int fd = ConnectTcp(port, bytes, o.raw_wait_ms);
  if (fd < 0) return std::nullopt;
  std::vector<char> buf(bytes, 0x5a);
  Stats stats = Measure(o, bytes, [&] {
    return WriteAll(fd, buf.data(), bytes) && ReadAll(fd, buf.data(), bytes);
  });
  close(fd);
  return stats;
}

}  // namespace

std::string Human(size_t b) {
  char buf[32];
  if (b >= (1u << 20)) std::snprintf(buf, sizeof buf, "%zu MiB", b >> 20);
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%zu KiB", b >> 10);
  else std::snprintf(buf, sizeof buf, "%zu B", b);
  return buf;
}

int RunPlacement(const Options& o, const std::string& label, int client_cpu, int server_cpu) {
  Pin(client_cpu);
  const bool tcp_baseline = o.baseline == "tcp";
  const bool no_baseline = o.baseline == "none";
  // The peers first: they fork, and no transport may exist yet.
  std::optional<NaaChild> raw;
  if (tcp_baseline) {
    raw = StartTcpEcho(server_cpu, o.raw_wait_ms);
    if (!raw) return 1;  // the child said why
  } else if (!no_baseline) {
    raw = StartPingPong(o, server_cpu);
    if (!raw) {
      std::fprintf(stderr, "ping-pong process failed to start\n");
      return 1;
    }
  }
  ServerOptions server_options;
  if (!o.naa_stats) server_options.stats = nullptr;
  std::optional<NaaChild> naa = StartNaas(o, server_cpu, {server_options});
  if (!naa) {
    std::fprintf(stderr, "NAA process failed to start\n");
    return 1;
  }

  auto transport = MakeTransport(o);
  if (!transport.ok()) {
    std::fprintf(stderr, "%s\n", transport.status().ToString().c_str());
    return 1;
  }
  std::vector<Row> rows;
  int rc = 0;
  for (size_t bytes : o.sizes) {
    Row row;
    row.bytes = bytes;
    // naarpc
    const std::vector<RegionSpec> regions = {{"data", Direction::kInOut, bytes}};
    auto session = ClientSession::Open(**transport, o.address, naa->port(), regions, o.client);
    for (int attempt = 1; !session.ok() && attempt < 3; ++attempt) {
      // Reported, then retried: a failed open is a finding, not a reason to
      // lose the rest of the run.
      std::fprintf(stderr, "open (%zu bytes) failed, retrying: %s\n", bytes,
                   session.status().ToString().c_str());
      std::printf("warning: open of the %zu-byte session failed once: %s\n", bytes,
                  session.status().ToString().c_str());
      session = ClientSession::Open(**transport, o.address, naa->port(), regions, o.client);
    }
    if (!session.ok()) {
      std::fprintf(stderr, "open: %s\n", session.status().ToString().c_str());
      rc = 1;
      break;
    }
    std::memset((*session)->buffer(0).data(), 0x5a, bytes);
    bool failed = false;
    auto call = [&] {
      Status s = (*session)->Call(kIdentity, Deadline::After(std::chrono::seconds(60)));
      if (!s.ok()) {
        std::fprintf(stderr, "call: %s\n", s.ToString().c_str());
        failed = true;
      }
      return s.ok();
    };
    if (o.blocks > 0 && !no_baseline) {
      // Both connections open throughout, the blocks interleaved.
      bool measured = false;
      if (tcp_baseline) {
        const int fd = ConnectTcp(raw->port(), bytes, o.raw_wait_ms);
        if (fd >= 0) {
          std::vector<char> buf(bytes, 0x5a);
          measured = MeasureBlocks(o, bytes, call, [&] {
            return WriteAll(fd, buf.data(), bytes) && ReadAll(fd, buf.data(), bytes);
          }, row);
          close(fd);
        }
      } else {
        auto pingpong = TransportPingPong::Open(**transport, o.address, raw->port(), bytes);
        if (!pingpong.ok()) {
          std::fprintf(stderr, "ping-pong open: %s\n", pingpong.status().ToString().c_str());
        } else {
          measured = MeasureBlocks(o, bytes, call, [&] { return (*pingpong)->RoundTrip(); }, row);
        }
      }
      (*session)->Close().IgnoreError();
      if (!measured) {
        std::fprintf(stderr, "--blocks: a call or round trip failed at %zu bytes\n", bytes);
        rc = 1;
        break;
      }
      rows.push_back(row);
      continue;
    }
    row.naarpc = Measure(o, bytes, call);
    (*session)->Close().IgnoreError();
    if (failed) {
      rc = 1;
      break;
    }
    if (no_baseline) {
      // naarpc only.
    } else if (tcp_baseline) {
      std::optional<Stats> tcp = MeasureTcp(o, raw->port(), bytes);
      if (!tcp) {
        rc = 1;
        break;
      }
      row.raw = *tcp;
    } else {
      auto pingpong = TransportPingPong::Open(**transport, o.address, raw->port(), bytes);
      if (!pingpong.ok()) {
        std::fprintf(stderr, "ping-pong open: %s\n", pingpong.status().ToString().c_str());
        rc = 1;
        break;
      }
      row.raw = Measure(o, bytes, [&] { return (*pingpong)->RoundTrip(); });
    }
    rows.push_back(row);
  }
  naa->Stop();
  if (raw) raw->Stop();
  PrintTable(o, label, client_cpu, server_cpu, rows);
  return rc;
}

}  // namespace naarpc::bench::call_bench
