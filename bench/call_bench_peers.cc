#include "bench/call_bench_peers.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "bench/transport_pingpong.h"
#include "naarpc/naa_server.h"
#include "naarpc/transport_factory.h"
#include "runtime/transport_impl/verbs/verbs_transport.h"

namespace naarpc::bench::call_bench {
namespace {

class IdentityKernel : public NaaHandler {
 public:
  uint8_t Handle(NaaCall& call) override {
    return call.params.size() == 1 ? kNaaStatusSuccess : kNaaStatusBadRegionLayout;
  }
};

// An interceptor that does nothing (its hooks still run on every call).
class NoopInterceptor final : public Interceptor {
 public:
  Status OnCallStart(const CallInfo& call) override {
    calls_.fetch_add(call.function_code != 0, std::memory_order_relaxed);
    return Status::Ok();
  }
  void OnCallEnd(const CallInfo&, const Status&) override {}

 private:
  std::atomic<uint64_t> calls_{0};
};

// In a child: says why it cannot serve, and exits.
[[noreturn]] void ExitWith(const char* who, const Status& status) {
  std::fprintf(stderr, "%s: %s\n", who, status.ToString().c_str());
  _exit(1);
}

// Child: echo server on `listen_fd`.
[[noreturn]] void RawEchoServer(int listen_fd, int wait_ms) {
  for (;;) {
    int fd = accept(listen_fd, nullptr, nullptr);
    if (fd < 0) _exit(1);
    if (!TuneSocket(fd, wait_ms)) {
      std::perror("raw echo: setsockopt");
      _exit(1);
    }
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

}  // namespace

void Pin(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);
}

Result<std::unique_ptr<Transport>> MakeTransport(const Options& o) {
  if (o.transport == "verbs" && (o.poll_spin_us >= 0 || o.predictive_wake >= 0)) {
    VerbsOptions opt;
    if (o.poll_spin_us >= 0) opt.poll_spin = std::chrono::microseconds(o.poll_spin_us);
    if (o.predictive_wake >= 0) opt.predictive_wake = o.predictive_wake != 0;
    return NewVerbsTransport(opt);
  }
  return NewTransport(o.transport);
}

std::shared_ptr<InterceptorChain> NoopChain() {
  auto chain = std::make_shared<InterceptorChain>();
  chain->Add(std::make_shared<NoopInterceptor>());
  return chain;
}

std::optional<NaaChild> StartNaas(const Options& o, int cpu,
                                  const std::vector<ServerOptions>& options) {
  return NaaChild::Start(options.size(), [&](const NaaChild::ReportPorts& report) {
    Pin(cpu);
    auto transport = MakeTransport(o);
    if (!transport.ok()) ExitWith("NAA", transport.status());
    IdentityKernel kernel;
    std::vector<std::unique_ptr<NaaServer>> servers;
    std::vector<uint16_t> ports;
    for (const ServerOptions& server_options : options) {
      auto server = NaaServer::Start(**transport, o.address, 0, kernel, server_options);
      if (!server.ok()) ExitWith("NAA", server.status());
      ports.push_back((*server)->port());
      servers.push_back(std::move(*server));
    }
    report(ports);
    for (;;) pause();  // serving, until killed
  });
}

std::optional<NaaChild> StartPingPong(const Options& o, int cpu) {
  return NaaChild::Start(1, [&](const NaaChild::ReportPorts& report) {
    Pin(cpu);
    auto transport = MakeTransport(o);
    if (!transport.ok()) ExitWith("ping-pong", transport.status());
    auto listener = (*transport)->Listen(o.address, 0);
    if (!listener.ok()) ExitWith("ping-pong", listener.status());
    report({(*listener)->port()});
    ServeTransportPingPong(**listener);
  });
}

std::optional<NaaChild> StartTcpEcho(int cpu, int wait_ms) {
  return NaaChild::Start(1, [&](const NaaChild::ReportPorts& report) {
    Pin(cpu);
    const int lfd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int reuse = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &reuse, sizeof reuse);
    if (bind(lfd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(lfd, 4) != 0) {
      std::perror("raw listen");
      _exit(1);
    }
    socklen_t sl = sizeof sa;
    getsockname(lfd, reinterpret_cast<sockaddr*>(&sa), &sl);
    report({ntohs(sa.sin_port)});
    RawEchoServer(lfd, wait_ms);
  });
}

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
    // A timed wait (--raw-wait-ms) that ended waits again, as naarpc's do.
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    if (r <= 0) return false;
    p += r;
    n -= size_t(r);
  }
  return true;
}

bool TuneSocket(int fd, int wait_ms) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) return false;
  if (wait_ms == 0) return true;
  timeval tv{wait_ms / 1000, (wait_ms % 1000) * 1000};
  return setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0;
}

}  // namespace naarpc::bench::call_bench
