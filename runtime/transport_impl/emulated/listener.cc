// The emulated transport's listener (listener.h).
#include "runtime/transport_impl/emulated/listener.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/sockaddr_text.h"
#include "runtime/transport_impl/emulated/connection.h"
#include "runtime/transport_impl/emulated/frame.h"
#include "runtime/transport_impl/emulated/sockets.h"
#include "runtime/unique_fd.h"

namespace naarpc {
namespace emulated {
namespace {

// Accepts with every hello exchange in progress at once: a peer that is
// slow, silent or hostile never delays another. At most
// EmulatedOptions::max_pending_handshakes are in progress; past that the
// oldest is dropped (a flood of idle sockets cannot lock legitimate hosts
// out), and Accept reports the drops. Each has handshake_timeout to finish.
// A failed handshake is reported as "handshake with <peer> failed: <why>".
class EmuListener final : public Listener {
 public:
  EmuListener(UniqueFd fd, UniqueFd event_fd, uint16_t port, EmulatedOptions opts)
      : fd_(std::move(fd)), event_fd_(std::move(event_fd)), port_(port), opts_(std::move(opts)) {}

  // Concurrent callers take turns (the handshakes in progress are shared);
  // each still returns by its own deadline.
  Result<std::unique_ptr<Connection>> Accept(Deadline deadline) override {
    {
      std::unique_lock<std::mutex> lock(turn_mu_);
      if (!turn_cv_.wait_until(lock, deadline.when(), [this] { return !accepting_; })) {
        return DeadlineExceededError("emulated transport: accept timed out");
      }
      accepting_ = true;
    }
    struct EndTurn {
      EmuListener* l;
      ~EndTurn() {
        {
          std::lock_guard<std::mutex> lock(l->turn_mu_);
          l->accepting_ = false;
        }
        l->turn_cv_.notify_one();
      }
    } end_turn{this};
    std::vector<pollfd> fds;
    for (;;) {
      if (shutdown_.load(std::memory_order_acquire)) {
        return UnavailableError("emulated transport: listener shut down");
      }
      if (dropped_ > 0) {
        const std::string peer = std::move(last_dropped_);
        return UnavailableError(
            "emulated transport: handshake with " + peer +
            " failed: dropped, the oldest of more than " +
            std::to_string(opts_.max_pending_handshakes) +
            " in progress (EmulatedOptions::max_pending_handshakes; " +
            std::to_string(std::exchange(dropped_, 0)) + " dropped since the last report)");
      }
      // Finished and timed-out handshakes first: each is one accept.
      const Clock::time_point now = Clock::now();
      for (size_t i = 0; i < pending_.size(); ++i) {
        Pending& h = pending_[i];
        if (!h.result && h.deadline <= now) {
          h.result = DeadlineExceededError(
              "emulated transport: handshake with " + h.peer + " failed: the hello exchange with it "
              "timed out (" + std::to_string(opts_.handshake_timeout.count()) +
              " ms, EmulatedOptions::handshake_timeout)");
        }
        if (!h.result) continue;
        Pending done = std::move(h);
        pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
        NAARPC_RETURN_IF_ERROR(*done.result);
        std::unique_ptr<Connection> conn(
            new EmuConnection(std::move(done.fd), /*listener_side=*/true, done.peer, opts_));
        // Before the connection's first progress step: nothing the peer
        // sent has been taken off the socket yet, so the hook's receives are
        // there for its first messages, as they are before rdma_accept.
        if (hook_) {
          auto context = hook_(*conn);
          if (!context.ok()) {
            --i;  // pending_[i] is the next one now
            continue;  // refused: closed
          }
          conn->SetAcceptContext(std::move(context).value());
        }
        return conn;
      }
      Clock::time_point wake = deadline.when();
      fds.clear();
      fds.push_back({fd_.get(), POLLIN, 0});
      fds.push_back({event_fd_.get(), POLLIN, 0});
      for (const Pending& h : pending_) {
        fds.push_back({h.fd.get(), static_cast<short>(POLLIN | (h.sent < kHelloSize ? POLLOUT : 0)), 0});
        wake = std::min(wake, h.deadline);
      }
      int r = PollUntil(fds.data(), fds.size(), wake);
      if (r < 0) return UnavailableError("emulated transport: poll failed: " + Errno(errno));
      if (fds[1].revents & POLLIN) return UnavailableError("emulated transport: listener shut down");
      // Progress on the handshakes polled (new ones come after them).
      for (size_t k = 0; k + 2 < fds.size(); ++k) {
        if (fds[2 + k].revents != 0) Step(pending_[k]);
      }
      if (fds[0].revents & POLLIN) NAARPC_RETURN_IF_ERROR(AcceptNew());
      if (r == 0 && deadline.expired()) {
        return DeadlineExceededError("emulated transport: accept timed out");
      }
    }
  }

  uint16_t port() const override { return port_; }

  bool SetAcceptHook(AcceptHook hook) override {
    hook_ = std::move(hook);
    return true;
  }

  void Shutdown() override {
    shutdown_.store(true, std::memory_order_release);
    uint64_t one = 1;
    ssize_t n = ::write(event_fd_.get(), &one, sizeof(one));
    (void)n;
  }

 private:
  struct Pending {
    UniqueFd fd;
    std::string peer;
    Clock::time_point deadline;
    size_t sent = 0;  // of our hello
    size_t got = 0;   // of theirs
    uint8_t in[kHelloSize] = {};
    std::optional<Status> result;  // set once finished: OK, or why it failed
  };

  // Takes every connection waiting in the backlog; sends each our hello.
  Status AcceptNew() {
    for (;;) {
      int cfd = ::accept4(fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (cfd < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::Ok();
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          return ResourceExhaustedError("emulated transport: accept failed: " + Errno(errno));
        }
        return UnavailableError("emulated transport: accept failed: " + Errno(errno));
      }
      if (opts_.max_pending_handshakes > 0 && pending_.size() >= opts_.max_pending_handshakes) {
        // The oldest: most likely a stalled peer. Reported by Accept.
        ++dropped_;
        last_dropped_ = pending_.front().peer;
        pending_.erase(pending_.begin());
      }
      Pending h;
      h.fd = UniqueFd(cfd);
      SetNoDelay(cfd);
      h.peer = PeerName(cfd);
      h.deadline = Clock::now() + opts_.handshake_timeout;
      pending_.push_back(std::move(h));
      Step(pending_.back());  // usually sends our hello at once
    }
  }

  // Sends what is left of our hello and reads theirs; sets h.result once
  // both are through (OK if theirs is valid) or the exchange failed.
  static void Step(Pending& h) {
    if (!h.result) {
      Result<bool> done = Exchange(h);
      if (!done.ok()) {
        std::string why = done.status().message();
        for (const std::string& prefix : {std::string("emulated transport: "), h.peer + " "}) {
          if (std::string_view(why).starts_with(prefix)) why.erase(0, prefix.size());
        }
        h.result = Status(done.status().code(),
                          "emulated transport: handshake with " + h.peer + " failed: " + why);
      } else if (*done) {
        h.result = Status::Ok();
      }
    }
  }
  static Result<bool> Exchange(Pending& h) {
    uint8_t out[kHelloSize];
    EncodeHello(out);
    while (h.sent < kHelloSize) {
      ssize_t n = ::send(h.fd.get(), out + h.sent, kHelloSize - h.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        h.sent += static_cast<size_t>(n);
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        break;
      } else if (!(n < 0 && errno == EINTR)) {
        return UnavailableError("emulated transport: sending hello to " + h.peer + " failed: " +
                                Errno(errno));
      }
    }
    while (h.got < kHelloSize) {
      ssize_t n = ::recv(h.fd.get(), h.in + h.got, kHelloSize - h.got, MSG_DONTWAIT);
      if (n > 0) {
        h.got += static_cast<size_t>(n);
      } else if (n == 0) {
        return UnavailableError("emulated transport: " + h.peer +
                                " closed the connection during the hello exchange");
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return false;
      } else if (errno != EINTR) {
        return UnavailableError("emulated transport: reading hello from " + h.peer +
                                " failed: " + Errno(errno));
      }
    }
    NAARPC_RETURN_IF_ERROR(CheckHello(h.in, h.peer));
    return h.sent == kHelloSize;
  }

  UniqueFd fd_, event_fd_;
  uint16_t port_;
  EmulatedOptions opts_;
  AcceptHook hook_;
  std::atomic<bool> shutdown_{false};
  // One Accept at a time (a turn); pending_ belongs to the caller whose
  // turn it is.
  std::mutex turn_mu_;
  std::condition_variable turn_cv_;
  bool accepting_ = false;  // guarded by turn_mu_
  std::vector<Pending> pending_;
  // Handshakes dropped (max_pending_handshakes) not yet reported, the last one's peer.
  uint64_t dropped_ = 0;
  std::string last_dropped_;
};

}  // namespace

Result<std::unique_ptr<Listener>> Listen(const std::string& host, uint16_t port,
                                         const EmulatedOptions& opts) {
  NAARPC_ASSIGN_OR_RETURN(std::vector<SockAddr> addrs, Resolve(host, port, /*passive=*/true));
  const SockAddr& addr = addrs.front();  // as the verbs transport: the preferred one
  UniqueFd fd(::socket(addr.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return ResourceExhaustedError("emulated transport: socket: " + Errno(errno));
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), addr.get(), addr.length) != 0) {
    return UnavailableError("emulated transport: cannot listen on " +
                            SockaddrToString(addr.get()) + ": " + Errno(errno));
  }
  if (::listen(fd.get(), SOMAXCONN) != 0) {
    return UnavailableError("emulated transport: listen: " + Errno(errno));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len);
  UniqueFd efd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (efd.get() < 0) return ResourceExhaustedError("emulated transport: eventfd: " + Errno(errno));
  return std::unique_ptr<Listener>(
      new EmuListener(std::move(fd), std::move(efd), PortOf(bound), opts));
}

}  // namespace emulated
}  // namespace naarpc
