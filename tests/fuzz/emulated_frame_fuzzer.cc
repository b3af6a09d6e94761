// libFuzzer target for the emulated transport's receive path: the frame
// decoder and everything it drives (sequence checks, RNR, rkey / bounds /
// access checks, payload placement, acks, NAKs). Each input is the byte
// stream a hostile peer sends after a valid hello to a connection that has
// registered memory and posted receives.
//
// Peer bytes cannot know this process's addresses and keys, so the harness
// patches frame headers as it walks them, steered by the header's reserved
// bytes (which the transport ignores): bit 0 of byte 2 puts `addr` near the
// writable region (in bounds or straddling either end), bit 1 uses its rkey,
// bit 2 uses the rkey of a region without remote write access, bit 3 sets
// the sequence number the target expects next.
//
// Besides crashes and sanitizer reports it aborts if
//  * the connection neither goes down nor drains after the peer closes (a
//    hang: the deadline below is a guard, not a measurement);
//  * bytes land outside the writable region (guard bytes around it), or in
//    the region registered without remote write;
//  * a completion names a receive that was not posted, reports more bytes
//    than its buffer holds, or succeeds after the connection reported an
//    error; or a posted receive never completes (not even flushed).
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "naarpc/deadline.h"
#include "naarpc/transport.h"
#include "runtime/transport_impl/emulated/emulated_transport.h"

namespace {

using namespace naarpc;

constexpr size_t kHdrSize = 32;
constexpr size_t kRegionSize = 4096;
constexpr size_t kGuardSize = 256;
constexpr uint8_t kGuardByte = 0xa5;
constexpr size_t kReadOnlySize = 256;
constexpr uint8_t kReadOnlyByte = 0x5a;
// Guards against a hang only (the peer has closed; the target must notice).
constexpr auto kHangGuard = std::chrono::seconds(30);

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "emulated_frame_fuzzer: invariant broken: %s\n", what);
  std::abort();
}

void PutLe(uint8_t* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t GetLe(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

struct Fixture {
  std::unique_ptr<Transport> transport;
  std::unique_ptr<Listener> listener;
};

Fixture& TheFixture() {
  static Fixture* f = [] {
    auto* fx = new Fixture;
    EmulatedOptions o;
    o.rnr_retry_count = 0;
    fx->transport = NewEmulatedTransport(o);
    auto l = fx->transport->Listen("127.0.0.1", 0);
    if (!l.ok()) Fail("cannot listen");
    fx->listener = std::move(*l);
    return fx;
  }();
  return *f;
}

// A blocking TCP socket to the listener that has sent its hello.
int RawPeer(uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int fd = -1;
  // Hundreds of thousands of short connections: the kernel may briefly
  // have no local port to offer (EADDRNOTAVAIL); that is not the target's.
  for (int attempt = 0;; ++attempt) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) Fail("socket");
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) break;
    int err = errno;
    if (err == EINTR) {  // libFuzzer's timer signal: the connect goes on
      pollfd p{fd, POLLOUT, 0};
      while (::poll(&p, 1, -1) < 0 && errno == EINTR) {
      }
      socklen_t len = sizeof err;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err == 0) break;
    }
    ::close(fd);
    if (err != EADDRNOTAVAIL || attempt == 1000) {
      std::fprintf(stderr, "connect: %s\n", std::strerror(err));
      Fail("connect to the listener");
    }
    ::usleep(1000);
  }
  // Close with RST: no TIME_WAIT pile-up over many executions.
  linger lg{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  uint8_t hello[16] = {};
  PutLe(hello, 0x4e414545, 4);  // "NAEE"
  PutLe(hello + 4, 1, 2);       // wire version
  ssize_t sent;
  do {
    sent = ::send(fd, hello, sizeof(hello), MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent != static_cast<ssize_t>(sizeof(hello))) Fail("send hello");
  return fd;
}

void SendAll(int fd, const std::vector<uint8_t>& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the target may have shut the connection down
    off += static_cast<size_t>(n);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  Fixture& fx = TheFixture();
  const int peer = RawPeer(fx.listener->port());
  auto accepted = fx.listener->Accept(Deadline::After(kHangGuard));
  if (!accepted.ok()) Fail("accept of a valid hello failed");
  std::unique_ptr<Connection> conn = std::move(*accepted);

  // Writable region between guards; a region without remote write access.
  std::vector<uint8_t> arena(kGuardSize + kRegionSize + kGuardSize, kGuardByte);
  uint8_t* region = arena.data() + kGuardSize;
  std::memset(region, 0, kRegionSize);
  std::vector<uint8_t> read_only(kReadOnlySize, kReadOnlyByte);
  auto mr = conn->RegisterMemory(region, kRegionSize, kAccessLocalWrite | kAccessRemoteWrite);
  auto ro = conn->RegisterMemory(read_only.data(), kReadOnlySize, kAccessLocalWrite);
  if (!mr.ok() || !ro.ok()) Fail("register");

  // Receives: count and sizes from the first byte.
  const size_t receives = data[0] % 5;
  std::vector<uint32_t> recv_len(receives);
  for (size_t i = 0; i < receives; ++i) {
    recv_len[i] = static_cast<uint32_t>(64u << (i + (data[0] >> 5)) % 6);
    LocalBuffer b{(*mr)->remote_addr() + i * 512, recv_len[i], (*mr)->lkey()};
    if (!conn->PostRecv(100 + i, b).ok()) Fail("post receive");
  }

  // The peer's stream, headers patched as described above.
  std::vector<uint8_t> stream;
  size_t pos = 1;
  uint64_t next_seq = 1;
  while (size - pos >= kHdrSize) {
    uint8_t h[kHdrSize];
    std::memcpy(h, data + pos, kHdrSize);
    pos += kHdrSize;
    const uint8_t steer = h[2];
    const uint8_t type = h[0];
    const uint32_t length = static_cast<uint32_t>(GetLe(h + 4, 4));
    if (steer & 0x01) {
      const uint64_t span = kRegionSize + 2 * 64;
      PutLe(h + 16, (*mr)->remote_addr() - 64 + GetLe(h + 16, 8) % span, 8);
    }
    if (steer & 0x02) PutLe(h + 24, (*mr)->rkey(), 4);
    if (steer & 0x04) {
      PutLe(h + 24, (*ro)->rkey(), 4);
      PutLe(h + 16, (*ro)->remote_addr() + GetLe(h + 16, 8) % kReadOnlySize, 8);
    }
    const bool request = type >= 1 && type <= 3;
    if (request && (steer & 0x08)) PutLe(h + 8, next_seq, 8);
    if (request) ++next_seq;
    stream.insert(stream.end(), h, h + kHdrSize);
    if (request) {
      const size_t payload = std::min<size_t>(length, size - pos);
      stream.insert(stream.end(), data + pos, data + pos + payload);
      pos += payload;
    }
  }
  stream.insert(stream.end(), data + pos, data + size);
  SendAll(peer, stream);
  ::shutdown(peer, SHUT_WR);

  // The target must process everything and go down (the peer closed).
  bool saw_error = false;
  std::vector<bool> consumed(receives, false);
  const Deadline guard = Deadline::After(kHangGuard);
  for (;;) {
    Completion c[8];
    auto r = conn->PollCompletions(c, guard);
    if (!r.ok()) {
      if (r.status().code() != StatusCode::kDisconnected) Fail("poll failed with an unexpected code");
      break;
    }
    if (*r == 0) Fail("the connection did not go down after the peer closed");
    for (size_t i = 0; i < *r; ++i) {
      const Completion& cc = c[i];
      if (cc.opcode != WorkOpcode::kRecv && cc.opcode != WorkOpcode::kRecvRdmaWithImm) {
        Fail("completion of work this side never posted");
      }
      if (cc.wr_id < 100 || cc.wr_id >= 100 + receives) Fail("completion of an unknown receive");
      const size_t idx = cc.wr_id - 100;
      if (consumed[idx]) Fail("a receive completed twice");
      consumed[idx] = true;
      if (cc.status == CompletionStatus::kSuccess) {
        if (saw_error) Fail("success after an error completion");
        if (cc.byte_len > recv_len[idx] && cc.opcode == WorkOpcode::kRecv) {
          Fail("SEND longer than its receive buffer completed");
        }
      } else if (cc.status != CompletionStatus::kFlushed) {
        saw_error = true;
      }
    }
  }
  for (size_t i = 0; i < kGuardSize; ++i) {
    if (arena[i] != kGuardByte || arena[kGuardSize + kRegionSize + i] != kGuardByte) {
      Fail("bytes landed outside the registered region");
    }
  }
  for (uint8_t b : read_only) {
    if (b != kReadOnlyByte) Fail("bytes landed in a region without remote write access");
  }
  for (size_t i = 0; i < receives; ++i) {
    if (!consumed[i]) Fail("a posted receive never completed (not even flushed)");
  }
  mr->reset();
  ro->reset();
  conn.reset();
  ::close(peer);
  return 0;
}
