#include "tools/naarpc/bench.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <latch>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "bench/percentiles.h"
#include "bench/transport_pingpong.h"
#include "naarpc/transport_factory.h"
#include "tools/naarpc/dynamic_call.h"
#include "tools/naarpc/progress.h"
#include "tools/naarpc/values.h"

namespace naarpc::cli {
namespace {

using Clock = std::chrono::steady_clock;

// One measured (kind, size, clients) point.
struct Point {
  std::string kind;  // "naarpc" or "raw"
  uint64_t size = 0;
  int clients = 0;
  uint64_t calls = 0;
  uint64_t bytes_per_call = 0;                // both directions
  double p50 = 0, p90 = 0, p99 = 0, max = 0;  // microseconds
  double calls_per_s = 0, mb_per_s = 0;
};

void Summarize(std::vector<double>& us, double seconds, uint64_t bytes_per_call, Point& p) {
  std::sort(us.begin(), us.end());
  p.calls = us.size();
  p.bytes_per_call = bytes_per_call;
  p.p50 = bench::Percentile(us, 50);
  p.p90 = bench::Percentile(us, 90);
  p.p99 = bench::Percentile(us, 99);
  p.max = us.back();
  p.calls_per_s = double(p.calls) / seconds;
  p.mb_per_s = p.calls_per_s * double(bytes_per_call) / 1e6;
}

std::string Human(uint64_t b) {
  char buf[32];
  if (b >= (1ull << 30) && b % (1ull << 30) == 0) {
    std::snprintf(buf, sizeof buf, "%lluG", static_cast<unsigned long long>(b >> 30));
  } else if (b >= (1u << 20) && b % (1u << 20) == 0) {
    std::snprintf(buf, sizeof buf, "%lluM", static_cast<unsigned long long>(b >> 20));
  } else if (b >= 1024 && b % 1024 == 0) {
    std::snprintf(buf, sizeof buf, "%lluK", static_cast<unsigned long long>(b >> 10));
  } else {
    std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(b));
  }
  return buf;
}

// A gnuplot single-quoted string.
std::string Quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// "64 B", "4 KiB", "1 MiB" (plot labels).
std::string SizeLabel(uint64_t b) {
  const std::string h = Human(b);
  return std::isdigit(static_cast<unsigned char>(h.back()))
             ? h + " B"
             : h.substr(0, h.size() - 1) + " " + h.back() + "iB";
}

// This host's address on the route to `host` (UDP connect: nothing is
// sent), or "" if there is none.
std::string LocalAddressTowards(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || res == nullptr) return "";
  std::string out;
  const int fd = socket(res->ai_family, SOCK_DGRAM, 0);
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
    char buf[INET6_ADDRSTRLEN] = {};
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&local);
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&local);
    const void* addr = local.ss_family == AF_INET ? static_cast<const void*>(&v4->sin_addr)
                                                  : static_cast<const void*>(&v6->sin6_addr);
    if (inet_ntop(local.ss_family, addr, buf, sizeof buf) != nullptr) out = buf;
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  return out;
}

// The ping-pong peer of the raw baseline: a child process with one listener
// (and serving thread) per client slot, on `host` if this host has that
// address, else on this host's address towards it (e.g. the RDMA netdev's),
// else on loopback.
class RawPeer {
 public:
  static Result<std::unique_ptr<RawPeer>> Start(const std::string& transport_name,
                                                const std::string& device, const std::string& host,
                                                int slots) {
    int fds[2];
    if (pipe(fds) != 0) return InternalError(std::string("pipe: ") + std::strerror(errno));
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t pid = fork();
    if (pid < 0) return InternalError(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      close(fds[0]);
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives the benchmark
      Child(transport_name, device, host, slots, fds[1]);
    }
    close(fds[1]);
    std::unique_ptr<RawPeer> peer(new RawPeer(pid));
    // One line: "HOST PORT PORT ..." or "error MESSAGE".
    std::string line;
    char c;
    while (read(fds[0], &c, 1) == 1 && c != '\n') line += c;
    close(fds[0]);
    if (line.rfind("ok ", 0) != 0) {
      return UnavailableError(
          "raw baseline peer: " + (line.empty() ? std::string("exited") : line.substr(6)) +
          " (--no-baseline skips it)");
    }
    std::istringstream in(line.substr(3));
    in >> peer->host_;
    unsigned port;
    while (in >> port) peer->ports_.push_back(static_cast<uint16_t>(port));
    return peer;
  }

  ~RawPeer() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }

  const std::string& host() const { return host_; }
  uint16_t port(int slot) const { return ports_[slot]; }

 private:
  explicit RawPeer(pid_t pid) : pid_(pid) {}

  [[noreturn]] static void Child(const std::string& transport_name, const std::string& device,
                                 const std::string& host, int slots, int fd) {
    auto report = [fd](const std::string& line) {
      const std::string l = line + "\n";
      if (write(fd, l.data(), l.size()) != static_cast<ssize_t>(l.size())) _exit(1);
    };
    auto transport = NewTransport(transport_name, device);
    if (!transport.ok()) {
      report("error " + transport.status().ToString());
      _exit(1);
    }
    std::string where = host;
    auto first = (*transport)->Listen(where, 0);
    for (const std::string& other : {LocalAddressTowards(host), std::string("127.0.0.1")}) {
      if (first.ok() || other.empty()) continue;
      where = other;
      first = (*transport)->Listen(where, 0);
    }
    if (!first.ok()) {
      report("error " + first.status().ToString());
      _exit(1);
    }
    std::vector<std::unique_ptr<Listener>> listeners;
    listeners.push_back(std::move(*first));
    while (static_cast<int>(listeners.size()) < slots) {
      auto l = (*transport)->Listen(where, 0);
      if (!l.ok()) {
        report("error " + l.status().ToString());
        _exit(1);
      }
      listeners.push_back(std::move(*l));
    }
    std::string line = "ok " + where;
    for (const auto& l : listeners) line += " " + std::to_string(l->port());
    for (size_t i = 1; i < listeners.size(); ++i) {
      std::thread([&l = *listeners[i]] { bench::ServeTransportPingPong(l); }).detach();
    }
    report(line);
    close(fd);
    bench::ServeTransportPingPong(*listeners[0]);
  }

  const pid_t pid_;
  std::string host_;
  std::vector<uint16_t> ports_;
};

// Runs `clients` threads, each calling `once` (with its own state from
// `open`) until `duration` has passed; latencies in microseconds.
struct Worker {
  std::vector<double> us;
  Status status;
};

// Calls per point per client: always at least this many, so tiny durations
// still give percentiles.
constexpr uint64_t kMinCallsPerClient = 5;

template <typename Client>
Result<Point> Measure(std::vector<std::unique_ptr<Client>>& clients,
                      std::chrono::milliseconds duration, Progress& progress,
                      uint64_t progress_base, const std::string& detail, Status (*once)(Client&)) {
  const size_t n = clients.size();
  std::vector<Worker> workers(n);
  std::latch warmed(static_cast<std::ptrdiff_t>(n));
  std::latch go(1);
  std::atomic<int64_t> start_ns{0};
  std::atomic<int64_t> end_ns{0};
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      Worker& w = workers[i];
      w.status = once(*clients[i]);  // warm-up, not counted
      warmed.count_down();
      go.wait();
      if (!w.status.ok()) return;
      const Clock::time_point end = Clock::time_point(Clock::duration(start_ns.load())) + duration;
      while (true) {
        const Clock::time_point t0 = Clock::now();
        if (t0 >= end && w.us.size() >= kMinCallsPerClient) break;
        w.status = once(*clients[i]);
        if (!w.status.ok()) return;
        w.us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      }
      const int64_t now = Clock::now().time_since_epoch().count();
      int64_t prev = end_ns.load();
      while (prev < now && !end_ns.compare_exchange_weak(prev, now)) {
      }
    });
  }
  warmed.wait();
  const Clock::time_point start = Clock::now();
  start_ns = start.time_since_epoch().count();
  go.count_down();
  // The progress bar is redrawn while the workers run (pacing, not
  // synchronisation: the joins below wait for them).
  for (Clock::time_point now = Clock::now(); progress.enabled() && now < start + duration;
       now = Clock::now()) {
    const auto done = std::chrono::duration_cast<std::chrono::milliseconds>(now - start);
    progress.Update(progress_base + static_cast<uint64_t>(done.count()), detail);
    std::this_thread::sleep_for(
        std::min<Clock::duration>(std::chrono::milliseconds(100), start + duration - now));
  }
  for (std::thread& t : threads) t.join();
  std::vector<double> all;
  for (Worker& w : workers) {
    if (!w.status.ok()) return w.status;
    all.insert(all.end(), w.us.begin(), w.us.end());
  }
  const double seconds =
      std::chrono::duration<double>(Clock::time_point(Clock::duration(end_ns.load())) - start)
          .count();
  Point p;
  Summarize(all, std::max(seconds, 1e-9), 0, p);
  return p;
}

struct NaarpcClient {
  std::unique_ptr<DynamicCall> call;
  const std::map<std::string, Value>* inputs = nullptr;
  std::chrono::milliseconds deadline{0};
};

Status CallOnce(NaarpcClient& c) {
  // Outputs stay in the registered buffers, as the raw ping-pong's do.
  return c.call->Invoke(*c.inputs, nullptr, Deadline::After(c.deadline));
}

struct RawClient {
  std::unique_ptr<bench::TransportPingPong> pingpong;
};

Status RawOnce(RawClient& c) {
  return c.pingpong->RoundTrip() ? Status::Ok()
                                 : TransportError("raw ping-pong round trip failed (see above)");
}

// The inputs of one call of payload `size` (0: every parameter full).
Result<std::map<std::string, Value>> InputsFor(const BenchOptions& o, uint64_t size) {
  std::map<std::string, Value> inputs;
  for (const idl::Param& p : o.routine->params) {
    if (!p.is_input()) continue;
    auto given = o.inputs.find(p.name);
    std::string spec = given == o.inputs.end() ? "random" : given->second;
    if (StreamOf(p) && size == 0) {
      return InvalidArgumentError("parameter '" + p.name +
                                  "' is a stream: give --sizes (its bytes per call)");
    }
    if ((p.variable || StreamOf(p)) && size != 0) {
      if (spec != "random" && spec != "seq" && spec != "zeros") {
        return InvalidArgumentError("--in " + p.name + "=" + spec +
                                    ": with --sizes, a variable-length input takes a generator "
                                    "(zeros, seq or random; the size sets its length)");
      }
      const uint64_t n = size / idl::Describe(p.type).size;
      if (!StreamOf(p) && n > p.count) {
        return InvalidArgumentError("--sizes " + Human(size) + ": parameter '" + p.name +
                                    "' takes at most " + std::to_string(p.count) + " x " +
                                    std::string(idl::Describe(p.type).idl) + " (" +
                                    std::to_string(p.data_bytes()) + " bytes)");
      }
      spec += ":" + std::to_string(n);
    }
    auto value = ParseValue(p, spec);
    if (!value.ok()) return value.status().WithContext("--in " + p.name);
    inputs[p.name] = std::move(*value);
  }
  return inputs;
}

std::string CsvHeader() {
  return "routine,transport,dialect,kind,size_bytes,clients,calls,bytes_per_call,p50_us,p90_us,"
         "p99_us,max_us,calls_per_s,mb_per_s\n";
}

std::string CsvRow(const std::string& routine, const BenchOptions& o, const Point& p) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s,%s,%s,%s,%llu,%d,%llu,%llu,%.2f,%.2f,%.2f,%.2f,%.1f,%.3f\n",
                routine.c_str(), o.transport.c_str(),
                o.client.dialect == Dialect::kSpec ? "spec" : "reference", p.kind.c_str(),
                static_cast<unsigned long long>(p.size), p.clients,
                static_cast<unsigned long long>(p.calls),
                static_cast<unsigned long long>(p.bytes_per_call), p.p50, p.p90, p.p99, p.max,
                p.calls_per_s, p.mb_per_s);
  return buf;
}

// gnuplot datablock "$name" of the points matching (kind, clients or any).
std::string Block(const std::string& name, const std::vector<Point>& points,
                  const std::string& kind, int clients, bool by_clients, uint64_t size) {
  std::string out = "$" + name + " << EOD\n";
  for (const Point& p : points) {
    if (p.kind != kind) continue;
    if (!by_clients && p.clients != clients) continue;
    if (by_clients && p.size != size) continue;
    char buf[256];
    std::snprintf(buf, sizeof buf, "%llu %d %.3f %.3f %.3f %.3f %.3f\n",
                  static_cast<unsigned long long>(std::max<uint64_t>(p.size, 1)), p.clients, p.p50,
                  p.p99, p.calls_per_s, p.mb_per_s, p.max);
    out += buf;
  }
  return out + "EOD\n";
}

Status Plot(const std::string& prefix, const std::string& title, const std::vector<Point>& points,
            const BenchOptions& o, const std::vector<uint64_t>& sizes) {
  if (sizes.empty() || o.clients.empty()) return InternalError("--plot: nothing was measured");
  std::string s;
  s += "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) "
       "{ set terminal pngcairo size 960,600 noenhanced } "
       "else { set terminal png size 960,600 noenhanced }\n";
  s += "set grid\nset key top left\n";
  const bool log_x = sizes.size() > 1;
  // One colour per client count (latency, throughput) or size (scaling):
  // naarpc solid, its p99 dashed, raw dotted with open points.
  auto style = [](int i, int kind) {
    const std::string lc = " lc " + std::to_string(i + 1);
    switch (kind) {
      case 0:
        return "with linespoints" + lc + " pt 7";
      case 1:
        return "with linespoints" + lc + " dt 2 pt 7";
      default:
        return "with linespoints" + lc + " dt 3 pt 6";
    }
  };
  std::string lat = "plot ", thr = "plot ";
  int idx = 0;
  for (int c : o.clients) {
    const int i = idx++;
    const std::string n = std::to_string(i);
    s += Block("n" + n, points, "naarpc", c, false, 0);
    s += Block("r" + n, points, "raw", c, false, 0);
    const std::string cl = std::to_string(c) + (c == 1 ? " client" : " clients");
    lat += std::string(lat == "plot " ? "" : ", ") + "$n" + n + " using 1:3 " + style(i, 0) +
           " title 'naarpc p50, " + cl + "', $n" + n + " using 1:4 " + style(i, 1) +
           " title 'naarpc p99, " + cl + "'";
    thr += std::string(thr == "plot " ? "" : ", ") + "$n" + n + " using 1:6 " + style(i, 0) +
           " title 'naarpc, " + cl + "'";
    if (o.baseline) {
      lat += ", $r" + n + " using 1:3 " + style(i, 2) + " title 'raw p50, " + cl + "'";
      thr += ", $r" + n + " using 1:6 " + style(i, 2) + " title 'raw, " + cl + "'";
    }
  }
  std::string size_tics;
  for (uint64_t size : sizes) {
    size_tics += std::string(size_tics.empty() ? "" : ", ") + "'" + SizeLabel(size) + "' " +
                 std::to_string(std::max<uint64_t>(size, 1));
  }
  // Explicit x ranges with a margin: gnuplot omits the label of a tic that
  // falls on the edge of an autoscaled range (e.g. the largest size's).
  auto xrange = [](double lo, double hi) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "set xrange [%.17g:%.17g]\n", lo, hi);
    return std::string(buf);
  };
  const auto [min_size, max_size] = std::minmax_element(sizes.begin(), sizes.end());
  const double smallest = double(std::max<uint64_t>(*min_size, 1));
  const double largest = double(std::max<uint64_t>(*max_size, 1));
  s += "set xlabel 'payload bytes per call'\nset xtics (" + size_tics + ")\n";
  if (log_x) {
    s += "set logscale x 2\n" + xrange(smallest / 1.25, largest * 1.25);
  } else {
    s += xrange(smallest * 0.5, largest * 1.5);
  }
  s += "set output " + Quote(prefix + "_latency.png") + "\n";
  s += "set title " + Quote(title + ": latency vs size") +
       "\nset ylabel 'microseconds'\nset logscale y\n";
  s += lat + "\n";
  s += "set output " + Quote(prefix + "_throughput.png") + "\n";
  s += "set title " + Quote(title + ": throughput vs size") +
       "\nset ylabel 'MB/s (both directions)'\n";
  s += thr + "\n";
  // Scaling: calls/s vs clients, per size.
  std::string client_tics;
  for (int c : o.clients) client_tics += (client_tics.empty() ? "" : ", ") + std::to_string(c);
  s += "unset logscale x\nset logscale y\nset xlabel 'clients'\nset ylabel 'calls/s'\n";
  s += "set xtics (" + client_tics + ")\n";
  const auto [fewest, most] = std::minmax_element(o.clients.begin(), o.clients.end());
  const double client_margin = std::max(0.5, 0.05 * (*most - *fewest));
  s += xrange(*fewest - client_margin, *most + client_margin);
  std::string sc = "plot ";
  idx = 0;
  for (uint64_t size : sizes) {
    const int i = idx++;
    const std::string n = std::to_string(i);
    s += Block("s" + n, points, "naarpc", 0, true, size);
    s += Block("q" + n, points, "raw", 0, true, size);
    sc += std::string(sc == "plot " ? "" : ", ") + "$s" + n + " using 2:5 " + style(i, 0) +
          " title 'naarpc, " + SizeLabel(size) + "'";
    if (o.baseline) {
      sc += ", $q" + n + " using 2:5 " + style(i, 2) + " title 'raw, " + SizeLabel(size) + "'";
    }
  }
  s += "set output " + Quote(prefix + "_scaling.png") + "\n";
  s += "set title " + Quote(title + ": scaling vs clients") + "\n" + sc + "\nset output\n";

  const std::string log = prefix + "_gnuplot.log";
  const std::string script = prefix + "_plots.gp";
  {
    std::ofstream out(script);
    out << s;
    if (!out) return InternalError("--plot: cannot write " + script);
  }
  // gnuplot SCRIPT, its output into the log (no shell: any path works).
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::string arg0 = "gnuplot", arg1 = script;
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, "gnuplot", &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    return FailedPreconditionError(
        "--plot: cannot run gnuplot (" + std::string(std::strerror(spawned)) +
        "): install gnuplot-nox (apt-get install gnuplot-nox), or omit --plot; "
        "the CSV has the numbers");
  }
  int rc = 0;
  while (waitpid(pid, &rc, 0) < 0 && errno == EINTR) {
  }
  if (rc != 0) {
    return InternalError("--plot: gnuplot failed (exit " + std::to_string(WEXITSTATUS(rc)) +
                         "); its messages are in " + log + ", the script in " + script);
  }
  std::remove(log.c_str());
  return Status::Ok();
}

}  // namespace

Result<uint64_t> ParseSize(std::string_view text) {
  const std::string t(text);
  size_t digits = 0;
  while (digits < t.size() && t[digits] >= '0' && t[digits] <= '9') ++digits;
  if (digits == 0 || digits > 12) {
    return InvalidArgumentError("'" + t + "' is not a size (e.g. 64, 4K, 1M, 64M)");
  }
  uint64_t v = std::stoull(t.substr(0, digits));
  std::string unit = t.substr(digits);
  if (unit.size() > 1 && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  if (unit.size() == 2 && unit[1] == 'i') unit.pop_back();  // KiB
  int shift = 0;
  if (unit.empty() || unit == "B" || unit == "b") {
    shift = 0;
  } else if (unit == "K" || unit == "k") {
    shift = 10;
  } else if (unit == "M" || unit == "m") {
    shift = 20;
  } else if (unit == "G" || unit == "g") {
    shift = 30;
  } else {
    return InvalidArgumentError("'" + t + "': unknown unit '" + t.substr(digits) +
                                "' (K, M, G: binary)");
  }
  if (v > (uint64_t{1} << 40) >> shift) {
    return InvalidArgumentError("'" + t + "' is more than 1 TiB");
  }
  return v << shift;
}

Status RunBench(const BenchOptions& o) {
  const idl::Routine& r = *o.routine;
  const std::string name = o.service->name + "." + r.name;
  std::vector<uint64_t> sizes = o.sizes;
  bool has_variable_input = false;
  for (const idl::Param& p : r.params) {
    has_variable_input |= (p.variable || StreamOf(p)) && p.is_input();
  }
  if (!sizes.empty() && !has_variable_input) {
    return InvalidArgumentError("--sizes: " + name +
                                " has no variable-length input, so its "
                                "payload is fixed; omit --sizes");
  }
  // Check every size before measuring anything.
  std::vector<std::map<std::string, Value>> inputs;
  if (sizes.empty()) sizes.push_back(0);
  for (uint64_t size : sizes) {
    NAARPC_ASSIGN_OR_RETURN(auto in, InputsFor(o, size));
    inputs.push_back(std::move(in));
  }
  const int max_clients = *std::max_element(o.clients.begin(), o.clients.end());

  // The raw peer first: it forks, and no transport may exist yet.
  std::unique_ptr<RawPeer> raw;
  if (o.baseline) {
    NAARPC_ASSIGN_OR_RETURN(raw, RawPeer::Start(o.transport, o.device, o.host, max_clients));
  }
  NAARPC_ASSIGN_OR_RETURN(auto transport, NewTransport(o.transport, o.device));
  const std::chrono::milliseconds deadline =
      o.call_deadline.count() > 0 ? o.call_deadline : std::chrono::milliseconds(r.deadline_ms);

  std::printf(
      "naarpc bench: %s on %s:%u (transport %s, dialect %s%s), %.3g s per point\n", name.c_str(),
      o.host.c_str(), unsigned{o.port}, std::string(transport->name()).c_str(),
      o.client.dialect == Dialect::kSpec ? "spec" : "reference",
      o.client.memory_windows.value_or(r.memory_windows) ? ", memory windows" : "", o.duration.count() / 1000.0);
  for (const auto& [host, port] : o.more_naas) {
    std::printf("  and on %s:%u (client c calls NAA c mod %zu)\n", host.c_str(), unsigned{port},
                1 + o.more_naas.size());
  }
  if (raw) {
    std::printf(
        "raw baseline: %s transport ping-pong on %s (this host; one WRITE_WITH_IMM of "
        "the call's request bytes each way, no naarpc engine)\n",
        std::string(transport->name()).c_str(), raw->host().c_str());
  }
  std::printf("%-8s %7s | %8s %9s %9s %9s %9s %10s %9s | %9s %9s %6s\n", "size", "clients", "calls",
              "p50 us", "p90 us", "p99 us", "max us", "calls/s", "MB/s", "raw p50", "raw MB/s",
              "p50 x");
  std::fflush(stdout);

  Progress progress("bench " + name,
                    sizes.size() * o.clients.size() * (raw ? 2 : 1) * o.duration.count(),
                    o.progress);
  uint64_t progress_base = 0;
  std::vector<Point> points;
  for (size_t si = 0; si < sizes.size(); ++si) {
    for (int clients : o.clients) {
      const std::string detail = Human(sizes[si]) + " B, " + std::to_string(clients) +
                                 (clients == 1 ? " client" : " clients");
      // naarpc: one session (connection) per client.
      std::vector<std::unique_ptr<NaarpcClient>> calls;
      for (int c = 0; c < clients; ++c) {
        const size_t naa = static_cast<size_t>(c) % (1 + o.more_naas.size());
        auto call = DynamicCall::Open(*transport, naa == 0 ? o.host : o.more_naas[naa - 1].first,
                                      naa == 0 ? o.port : o.more_naas[naa - 1].second,
                                      *o.service, r, o.client, Deadline::After(deadline));
        if (!call.ok()) {
          progress.Finish();
          return call.status();
        }
        auto client = std::make_unique<NaarpcClient>();
        client->call = std::move(*call);
        client->inputs = &inputs[si];
        client->deadline = deadline;
        calls.push_back(std::move(client));
      }
      auto point = Measure<NaarpcClient>(calls, o.duration, progress, progress_base,
                                         "naarpc " + detail, &CallOnce);
      progress_base += o.duration.count();
      if (!point.ok()) {
        progress.Finish();
        return point.status().WithContext(name + " at " + detail);
      }
      const uint64_t sent = calls[0]->call->last_bytes_sent();
      const uint64_t bytes = sent + calls[0]->call->last_bytes_received();
      for (auto& c : calls) c->call->session().Close().IgnoreError();
      Point p = *point;
      p.kind = "naarpc";
      p.size = sizes[si] != 0 ? sizes[si] : sent;
      p.clients = clients;
      p.bytes_per_call = bytes;
      p.mb_per_s = p.calls_per_s * double(bytes) / 1e6;
      points.push_back(p);

      Point q;
      if (raw) {
        std::vector<std::unique_ptr<RawClient>> pingpongs;
        for (int c = 0; c < clients; ++c) {
          auto pp = bench::TransportPingPong::Open(*transport, raw->host(), raw->port(c),
                                                   std::max<uint64_t>(sent, 1));
          if (!pp.ok()) {
            progress.Finish();
            return pp.status().WithContext("raw baseline");
          }
          pingpongs.push_back(std::make_unique<RawClient>(RawClient{std::move(*pp)}));
        }
        auto rp = Measure<RawClient>(pingpongs, o.duration, progress, progress_base,
                                     "raw " + detail, &RawOnce);
        progress_base += o.duration.count();
        if (!rp.ok()) {
          progress.Finish();
          return rp.status().WithContext("raw baseline at " + detail);
        }
        q = *rp;
        q.kind = "raw";
        q.size = p.size;
        q.clients = clients;
        q.bytes_per_call = 2 * std::max<uint64_t>(sent, 1);
        q.mb_per_s = q.calls_per_s * double(q.bytes_per_call) / 1e6;
        points.push_back(q);
      }
      progress.Finish();
      std::printf("%-8s %7d | %8llu %9.1f %9.1f %9.1f %9.1f %10.0f %9.1f |", Human(p.size).c_str(),
                  clients, static_cast<unsigned long long>(p.calls), p.p50, p.p90, p.p99, p.max,
                  p.calls_per_s, p.mb_per_s);
      if (raw) {
        std::printf(" %9.1f %9.1f %6.2f\n", q.p50, q.mb_per_s, p.p50 / q.p50);
      } else {
        std::printf(" %9s %9s %6s\n", "-", "-", "-");
      }
      std::fflush(stdout);
    }
  }
  raw.reset();

  if (!o.csv_path.empty()) {
    std::ofstream csv(o.csv_path, std::ios::trunc);
    csv << CsvHeader();
    for (const Point& p : points) csv << CsvRow(name, o, p);
    if (!csv.flush()) return InternalError("--csv: cannot write " + o.csv_path);
    std::printf("CSV: %s\n", o.csv_path.c_str());
  }
  if (!o.plot_prefix.empty()) {
    std::vector<uint64_t> shown;
    for (const Point& p : points) {
      if (std::find(shown.begin(), shown.end(), p.size) == shown.end()) shown.push_back(p.size);
    }
    NAARPC_RETURN_IF_ERROR(Plot(o.plot_prefix, name, points, o, shown));
    std::printf("plots: %s_latency.png %s_throughput.png %s_scaling.png\n", o.plot_prefix.c_str(),
                o.plot_prefix.c_str(), o.plot_prefix.c_str());
  }
  return Status::Ok();
}

}  // namespace naarpc::cli
