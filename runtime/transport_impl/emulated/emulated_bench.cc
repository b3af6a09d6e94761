// Emulated transport vs raw TCP on loopback: small-message round trip and
// 64 MiB bandwidth. Usage: emulated_bench [--iterations N] [--big-iterations N]
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "runtime/transport_impl/emulated/emulated_transport.h"

namespace naarpc {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kSmall = 64;
constexpr size_t kBig = 64 << 20;

double Us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "failed: %s\n", what);
    std::exit(1);
  }
}

// ---- raw TCP ----

void RawPair(int* a, int* b) {
  int l = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  Check(::bind(l, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0, "bind");
  ::listen(l, 1);
  socklen_t len = sizeof(addr);
  ::getsockname(l, reinterpret_cast<sockaddr*>(&addr), &len);
  *a = ::socket(AF_INET, SOCK_STREAM, 0);
  Check(::connect(*a, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0, "connect");
  *b = ::accept(l, nullptr, nullptr);
  ::close(l);
  int one = 1;
  ::setsockopt(*a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(*b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void SendAll(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::send(fd, p, n, 0);
    Check(r > 0, "send");
    p += r;
    n -= static_cast<size_t>(r);
  }
}
void RecvAll(int fd, uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    Check(r > 0, "recv");
    p += r;
    n -= static_cast<size_t>(r);
  }
}

// Returns {round trip us, big transfer us}.
std::pair<double, double> RawTcp(int iters, int big_iters) {
  int a, b;
  RawPair(&a, &b);
  std::vector<uint8_t> buf_a(kBig), buf_b(kBig);
  std::thread echo([&] {
    for (int i = 0; i < iters; ++i) {
      RecvAll(b, buf_b.data(), kSmall);
      SendAll(b, buf_b.data(), kSmall);
    }
    for (int i = 0; i < big_iters; ++i) {
      RecvAll(b, buf_b.data(), kBig);
      SendAll(b, buf_b.data(), 1);
    }
  });
  auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) {
    SendAll(a, buf_a.data(), kSmall);
    RecvAll(a, buf_a.data(), kSmall);
  }
  auto t1 = Clock::now();
  for (int i = 0; i < big_iters; ++i) {
    SendAll(a, buf_a.data(), kBig);
    RecvAll(a, buf_a.data(), 1);
  }
  auto t2 = Clock::now();
  echo.join();
  ::close(a);
  ::close(b);
  return {Us(t1 - t0) / iters, Us(t2 - t1) / big_iters};
}

// ---- emulated ----

void Poll(Connection& c, size_t n) {
  Completion comp[8];
  for (size_t got = 0; got < n;) {
    auto r = c.PollCompletions(std::span<Completion>(comp, n - got), Deadline::After(std::chrono::seconds(30)));
    Check(r.ok() && *r > 0, "poll");
    for (size_t i = 0; i < *r; ++i) Check(comp[i].status == CompletionStatus::kSuccess, "status");
    got += *r;
  }
}

std::pair<double, double> Emulated(int iters, int big_iters) {
  // Every request here is unsignaled (the transport's bare cost): an
  // unbounded send queue, where an RC queue would need a signaled request
  // at least once per depth.
  EmulatedOptions options;
  options.send_queue_depth = 0;
  auto t = NewEmulatedTransport(options);
  auto l = t->Listen("127.0.0.1", 0);
  Check(l.ok(), "listen");
  std::unique_ptr<Connection> server;
  std::thread acc([&] { auto r = (*l)->Accept(Deadline::Infinite());
    Check(r.ok(), "accept");
    server = std::move(*r); });
  auto cr = t->Connect("127.0.0.1", (*l)->port(), Deadline::Infinite());
  Check(cr.ok(), "connect");
  acc.join();
  auto& client = *cr;
  std::vector<uint8_t> buf_a(kBig), buf_b(kBig);
  auto ma = client->RegisterMemory(buf_a.data(), kBig, kAccessLocalWrite | kAccessRemoteWrite).value();
  auto mb = server->RegisterMemory(buf_b.data(), kBig, kAccessLocalWrite | kAccessRemoteWrite).value();
  auto local = [](const std::unique_ptr<MemoryRegion>& mr, size_t n) {
    return LocalBuffer{mr->remote_addr(), static_cast<uint32_t>(n), mr->lkey()};
  };
  std::thread echo([&] {
    Check(server->PostRecv(0, local(mb, kSmall)).ok(), "recv");
    for (int i = 0; i < iters; ++i) {
      Poll(*server, 1);  // request
      Check(server->PostRecv(0, local(mb, kSmall)).ok(), "recv");
      SendRequest s;
      s.opcode = WorkOpcode::kSend;
      s.local = local(mb, kSmall);
      s.signaled = false;
      Check(server->PostSend(std::span<const SendRequest>(&s, 1)).ok(), "send");
    }
    for (int i = 0; i < big_iters; ++i) {
      Poll(*server, 1);  // the big write-with-imm
      Check(server->PostRecv(0, local(mb, kSmall)).ok(), "recv");
      SendRequest s;
      s.opcode = WorkOpcode::kSend;
      s.signaled = false;
      Check(server->PostSend(std::span<const SendRequest>(&s, 1)).ok(), "send");
    }
    Completion c[1];
    server->PollCompletions(c, Deadline::After(std::chrono::milliseconds(100))).status().IgnoreError();
  });
  Check(client->PostRecv(0, local(ma, kSmall)).ok(), "recv");
  auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) {
    SendRequest s;
    s.opcode = WorkOpcode::kSend;
    s.local = local(ma, kSmall);
    s.signaled = false;
    Check(client->PostSend(std::span<const SendRequest>(&s, 1)).ok(), "send");
    Poll(*client, 1);  // reply
    Check(client->PostRecv(0, local(ma, kSmall)).ok(), "recv");
  }
  auto t1 = Clock::now();
  for (int i = 0; i < big_iters; ++i) {
    SendRequest s;
    s.opcode = WorkOpcode::kRdmaWriteWithImm;
    s.local = local(ma, kBig);
    s.remote_addr = mb->remote_addr();
    s.rkey = mb->rkey();
    s.signaled = false;
    Check(client->PostSend(std::span<const SendRequest>(&s, 1)).ok(), "write");
    Poll(*client, 1);  // the reply
    Check(client->PostRecv(0, local(ma, kSmall)).ok(), "recv");
  }
  auto t2 = Clock::now();
  echo.join();
  return {Us(t1 - t0) / iters, Us(t2 - t1) / big_iters};
}

}  // namespace
}  // namespace naarpc

int main(int argc, char** argv) {
  CLI::App app{"emulated transport vs raw TCP on loopback: 64 B round trip, 64 MiB transfer"};
  int iters = 20000;
  int big = 20;
  app.add_option("--iterations", iters, "64 B round trips per measurement")
      ->check(CLI::Range(1, 100'000'000));
  app.add_option("--big-iterations", big, "64 MiB transfers per measurement")
      ->check(CLI::Range(1, 100'000));
  CLI11_PARSE(app, argc, argv);
  for (int round = 0; round < 2; ++round) {
    auto raw = naarpc::RawTcp(iters, big);
    auto emu = naarpc::Emulated(iters, big);
    std::printf("round trip %zu B: raw %.2f us, emulated %.2f us (x%.2f)\n", naarpc::kSmall,
                raw.first, emu.first, emu.first / raw.first);
    std::printf("64 MiB transfer: raw %.0f us (%.2f GB/s), emulated %.0f us (%.2f GB/s) (bw x%.2f)\n",
                raw.second, naarpc::kBig / raw.second / 1e3, emu.second,
                naarpc::kBig / emu.second / 1e3, raw.second / emu.second);
  }
  return 0;
}
