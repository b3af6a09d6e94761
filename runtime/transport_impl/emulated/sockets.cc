#include "runtime/transport_impl/emulated/sockets.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "runtime/sockaddr_text.h"
#include "runtime/transport_impl/emulated/frame.h"

namespace naarpc {
namespace emulated {
namespace {

timespec ToTimespec(Clock::time_point wake, bool* infinite) {
  *infinite = wake == Clock::time_point::max();
  timespec ts{0, 0};
  if (*infinite) return ts;
  auto left = wake - Clock::now();
  if (left <= Clock::duration::zero()) return ts;
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
  constexpr int64_t kMaxSec = 1'000'000'000;
  ts.tv_sec = static_cast<time_t>(std::min<int64_t>(ns / 1'000'000'000, kMaxSec));
  ts.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  return ts;
}

}  // namespace

int PollUntil(pollfd* fds, nfds_t n, Clock::time_point wake) {
  for (;;) {
    bool infinite;
    timespec ts = ToTimespec(wake, &infinite);
    int r = ::ppoll(fds, n, infinite ? nullptr : &ts, nullptr);
    if (r < 0 && errno == EINTR) continue;
    return r;
  }
}

int WaitFd(int fd, short events, Deadline deadline, int cancel_fd) {
  pollfd p[2] = {{fd, events, 0}, {cancel_fd, POLLIN, 0}};
  int r = PollUntil(p, cancel_fd >= 0 ? 2 : 1, deadline.when());
  if (r < 0) return -2;
  if (r == 0) return 0;
  if (cancel_fd >= 0 && (p[1].revents & POLLIN)) return -1;
  return 1;
}

uint16_t PortOf(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
}

std::string PeerName(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "?";
  return SockaddrToString(reinterpret_cast<const sockaddr*>(&a));
}

Result<std::vector<SockAddr>> Resolve(std::string host, uint16_t port, bool passive) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (passive && (host.empty() || host == "*")) host = "0.0.0.0";
  if (host.empty()) return InvalidArgumentError("emulated transport: empty host name");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return UnavailableError("emulated transport: cannot resolve '" + host +
                            "': " + ::gai_strerror(rc));
  }
  std::vector<SockAddr> addrs;
  for (const addrinfo* r = res; r != nullptr; r = r->ai_next) {
    if ((r->ai_family != AF_INET && r->ai_family != AF_INET6) ||
        r->ai_addrlen > sizeof(sockaddr_storage)) {
      continue;
    }
    SockAddr a;
    std::memcpy(&a.storage, r->ai_addr, r->ai_addrlen);
    a.length = r->ai_addrlen;
    addrs.push_back(a);
  }
  ::freeaddrinfo(res);
  if (addrs.empty()) {
    return UnavailableError("emulated transport: '" + host + "' has no IPv4 or IPv6 address");
  }
  return addrs;
}

ConnectAttempt ConnectTo(const SockAddr& addr, const SockAddr* source, Deadline deadline) {
  ConnectAttempt out;
  out.fd = UniqueFd(::socket(addr.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (out.fd.get() < 0) {
    out.err = errno;
    return out;
  }
  if (source != nullptr && source->family() == addr.family() &&
      ::bind(out.fd.get(), source->get(), source->length) != 0) {
    out.err = errno;
    out.fd.Reset();
    return out;
  }
  if (::connect(out.fd.get(), addr.get(), addr.length) == 0) return out;
  out.err = errno;
  if (out.err == EINPROGRESS) {
    int r = WaitFd(out.fd.get(), POLLOUT, deadline, -1);
    if (r == 0) {
      out.timed_out = true;
      return out;
    }
    socklen_t len = sizeof(out.err);
    if (r < 0 || ::getsockopt(out.fd.get(), SOL_SOCKET, SO_ERROR, &out.err, &len) != 0) {
      out.err = errno;
    }
  }
  if (out.err != 0) out.fd.Reset();
  return out;
}

void SetNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

Status Handshake(int fd, const std::string& peer, Deadline deadline, int cancel_fd) {
  uint8_t out[kHelloSize];
  EncodeHello(out);
  auto wait = [&](short ev) -> Status {
    int r = WaitFd(fd, ev, deadline, cancel_fd);
    if (r == 1) return Status::Ok();
    if (r == 0) {
      return DeadlineExceededError("emulated transport: hello exchange with " +
                                   peer + " timed out");
    }
    if (r == -1) return UnavailableError("emulated transport: listener shut down");
    return UnavailableError("emulated transport: poll failed: " + Errno(errno));
  };
  for (size_t off = 0; off < kHelloSize;) {
    ssize_t n = ::send(fd, out + off, kHelloSize - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      NAARPC_RETURN_IF_ERROR(wait(POLLOUT));
    } else if (!(n < 0 && errno == EINTR)) {
      return UnavailableError("emulated transport: sending hello to " + peer +
                              " failed: " + Errno(errno));
    }
  }
  uint8_t in[kHelloSize];
  for (size_t off = 0; off < kHelloSize;) {
    ssize_t n = ::recv(fd, in + off, kHelloSize - off, MSG_DONTWAIT);
    if (n > 0) {
      off += static_cast<size_t>(n);
    } else if (n == 0) {
      return UnavailableError("emulated transport: " + peer +
                              " closed the connection during the hello exchange");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      NAARPC_RETURN_IF_ERROR(wait(POLLIN));
    } else if (errno != EINTR) {
      return UnavailableError("emulated transport: reading hello from " + peer +
                              " failed: " + Errno(errno));
    }
  }
  return CheckHello(in, peer);
}

}  // namespace emulated
}  // namespace naarpc
