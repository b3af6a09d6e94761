// Sockets of the emulated transport: waiting on descriptors, name
// resolution, non-blocking connect, and the connecting side's hello
// exchange. Internal to the package.
#ifndef NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_SOCKETS_H_
#define NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_SOCKETS_H_

#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "naarpc/deadline.h"
#include "naarpc/status.h"
#include "runtime/unique_fd.h"

namespace naarpc {
namespace emulated {

using Clock = std::chrono::steady_clock;

// ppoll until `wake`; returns ppoll's result (EINTR is retried).
int PollUntil(pollfd* fds, nfds_t n, Clock::time_point wake);

// Waits for `events` on fd, or for cancel_fd (if >= 0) to become readable.
// Returns 1 ready, 0 deadline, -1 cancelled, -2 poll error.
int WaitFd(int fd, short events, Deadline deadline, int cancel_fd);

// An IPv4 or IPv6 socket address.
struct SockAddr {
  sockaddr_storage storage{};
  socklen_t length = 0;
  int family() const { return storage.ss_family; }
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

uint16_t PortOf(const sockaddr_storage& a);
// The peer's address as text, "?" if unknown.
std::string PeerName(int fd);

// The addresses `host` names, in getaddrinfo's order of preference: IPv4
// and IPv6 literals (bracketed or not) and names. Passive (to listen on):
// "", "*" and "0.0.0.0" are every IPv4 address, "::" every IPv6 one (and
// IPv4 too where the host's IPV6_V6ONLY default is off).
Result<std::vector<SockAddr>> Resolve(std::string host, uint16_t port, bool passive);

// Outcome of one non-blocking connect attempt.
struct ConnectAttempt {
  UniqueFd fd;          // connected, when err == 0
  int err = 0;          // errno of the failure
  bool timed_out = false;
};

// `source`: the local address to bind first, or null.
ConnectAttempt ConnectTo(const SockAddr& addr, const SockAddr* source, Deadline deadline);

void SetNoDelay(int fd);

// Exchanges hellos on a connected non-blocking socket (the connecting
// side; the listener runs its exchanges side by side, listener.cc).
Status Handshake(int fd, const std::string& peer, Deadline deadline, int cancel_fd);

}  // namespace emulated
}  // namespace naarpc

#endif  // NAARPC_RUNTIME_TRANSPORT_IMPL_EMULATED_SOCKETS_H_
