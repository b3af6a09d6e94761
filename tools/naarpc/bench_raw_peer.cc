#include "tools/naarpc/bench_raw_peer.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <thread>

#include "bench/transport_pingpong.h"
#include "naarpc/transport_factory.h"

namespace naarpc::cli::bench_internal {
namespace {

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

}  // namespace

Result<std::unique_ptr<RawPeer>> RawPeer::Start(const std::string& transport_name,
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

RawPeer::~RawPeer() {
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

void RawPeer::Child(const std::string& transport_name, const std::string& device,
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

}  // namespace naarpc::cli::bench_internal
