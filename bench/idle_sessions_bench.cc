// idle_sessions_bench: what idle sessions cost a software NAA. For each
// count N, a child process serves an echo routine with default
// ServerOptions (max_connections raised to fit N); this process opens N
// sessions to it (connect + MRSP + one call each, so every session is known
// to work), then leaves them idle and measures the child: its threads, the
// CPU it used over the idle window, and its resident memory.
//
//   bazel run -c opt //bench:idle_sessions_bench -- [--sessions 1 100 1000 10000]
//       [--idle_seconds=30] [--transport=emulated|verbs] [--address=127.0.0.1]
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/naa_child.h"
#include "naarpc/client_session.h"
#include "naarpc/naa_server.h"
#include "naarpc/transport_factory.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint8_t kEcho = 1;

class Echo final : public naarpc::NaaHandler {
 public:
  uint8_t Handle(naarpc::NaaCall& call) override {
    auto in = call.params[0].data, out = call.params[1].data;
    std::memcpy(out.data(), in.data(), std::min(in.size(), out.size()));
    return naarpc::kNaaStatusSuccess;
  }
};

std::vector<naarpc::RegionSpec> Layout() {
  return {{"in", naarpc::Direction::kIn, 64}, {"out", naarpc::Direction::kOut, 64}};
}

// Raises the descriptor limit as far as this process may (root: to the
// system's nr_open); returns the soft limit in effect.
rlim_t RaiseDescriptorLimit(rlim_t want) {
  rlimit lim{};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  if (lim.rlim_cur >= want) return lim.rlim_cur;
  rlimit more{want, std::max(want, lim.rlim_max)};
  if (::setrlimit(RLIMIT_NOFILE, &more) != 0) {
    more = {lim.rlim_max, lim.rlim_max};
    ::setrlimit(RLIMIT_NOFILE, &more);
  }
  ::getrlimit(RLIMIT_NOFILE, &lim);
  return lim.rlim_cur;
}

struct ProcStat {
  long threads = 0;
  long rss_kib = 0;
  double cpu_s = 0;  // user + system
};

ProcStat Read(pid_t pid) {
  ProcStat st;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("Threads:", 0) == 0) st.threads = std::stol(line.substr(8));
    if (line.rfind("VmRSS:", 0) == 0) st.rss_kib = std::stol(line.substr(6));
  }
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces): utime is the 14th.
  std::istringstream rest(all.substr(all.rfind(')') + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  st.cpu_s = double(utime + stime) / double(::sysconf(_SC_CLK_TCK));
  return st;
}

struct Row {
  size_t sessions = 0;
  ProcStat before, after;
  double idle_cpu_percent = 0;
  std::string error;
};

Row Measure(const std::string& transport_name, const std::string& address, size_t sessions,
            int idle_seconds) {
  Row row;
  row.sessions = sessions;
  // Both processes: the NAA holds 3 descriptors per emulated connection
  // (socket, its notify epoll set and timer), this one 1 per session.
  const rlim_t needed = rlim_t(sessions) * 3 + 256;
  if (const rlim_t limit = RaiseDescriptorLimit(needed); limit < needed) {
    row.error = "needs about " + std::to_string(needed) + " descriptors in the NAA's process; the "
                "limit here is " + std::to_string(limit) + " (raising it needs CAP_SYS_RESOURCE)";
    return row;
  }
  using naarpc::bench::NaaChild;
  std::optional<NaaChild> child = NaaChild::Start(1, [&](const NaaChild::ReportPorts& report) {
    auto transport = naarpc::NewTransport(transport_name);
    if (!transport.ok()) ::_exit(2);
    Echo echo;
    naarpc::ServerOptions options;  // defaults, but room for every session
    options.max_connections = std::max(options.max_connections, sessions + 16);
    options.max_connections_per_peer = options.max_connections;
    options.log = [](std::string_view) {};
    auto server = naarpc::NaaServer::Start(**transport, address, 0, echo, options);
    if (!server.ok()) ::_exit(3);
    report({(*server)->port()});
    for (;;) ::pause();  // serving, until killed
  });
  if (!child) {
    row.error = "the server did not start";
    return row;
  }
  const uint16_t port = child->port();
  auto transport = naarpc::NewTransport(transport_name);
  if (!transport.ok()) {
    row.error = transport.status().ToString();
    return row;
  }
  std::vector<std::unique_ptr<naarpc::ClientSession>> open;
  open.reserve(sessions);
  for (size_t i = 0; i < sessions; ++i) {
    auto s = naarpc::ClientSession::Open(**transport, address, port, Layout());
    naarpc::Status called = s.ok() ? (*s)->Call(kEcho, naarpc::Deadline::After(std::chrono::seconds(60)))
                                   : s.status();
    if (!called.ok()) {
      row.error = "session " + std::to_string(i) + ": " + called.ToString();
      break;
    }
    open.push_back(std::move(s).value());
  }
  if (row.error.empty()) {
    row.before = Read(child->pid());
    const auto start = Clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(idle_seconds));  // the idle window measured
    row.after = Read(child->pid());
    const double wall = std::chrono::duration<double>(Clock::now() - start).count();
    row.idle_cpu_percent = 100.0 * (row.after.cpu_s - row.before.cpu_s) / wall;
  }
  open.clear();
  child->Stop();
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"idle_sessions_bench: threads, idle CPU and memory of a software NAA per idle session"};
  std::vector<size_t> counts = {1, 100, 1000, 10000};
  int idle_seconds = 30;
  std::string transport = "emulated", address = "127.0.0.1";
  app.add_option("--sessions", counts, "idle session counts to measure");
  app.add_option("--idle_seconds", idle_seconds, "length of the idle window");
  app.add_option("--transport", transport, "emulated or verbs");
  app.add_option("--address", address, "address the NAA listens on");
  CLI11_PARSE(app, argc, argv);

  std::printf("idle sessions on one software NAA (%s, default ServerOptions), idle window %d s\n\n",
              transport.c_str(), idle_seconds);
  std::printf("%-9s| %-8s| %-15s| %-9s| %s\n", "sessions", "threads", "idle CPU (core)", "RSS MiB",
              "RSS per session KiB");
  std::printf("---------|---------|----------------|----------|--------------------\n");
  long base_rss = -1;
  size_t base_sessions = 0;
  int failed = 0;
  for (size_t n : counts) {
    Row r = Measure(transport, address, n, idle_seconds);
    if (!r.error.empty()) {
      std::printf("%-9zu| not measured: %s\n", n, r.error.c_str());
      if (r.error.rfind("needs about", 0) != 0) ++failed;
      continue;
    }
    std::string per = "-";
    if (base_rss >= 0 && n > base_sessions) {
      per = std::to_string((r.after.rss_kib - base_rss) / long(n - base_sessions));
    }
    if (base_rss < 0) {
      base_rss = r.after.rss_kib;
      base_sessions = n;
    }
    std::printf("%-9zu| %-8ld| %-15s| %-9.1f| %s\n", n, r.after.threads,
                (std::to_string(r.idle_cpu_percent).substr(0, 5) + " %").c_str(),
                double(r.after.rss_kib) / 1024.0, per.c_str());
  }
  return failed == 0 ? 0 : 1;
}
