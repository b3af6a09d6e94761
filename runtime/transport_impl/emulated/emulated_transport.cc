// The emulated transport: Connect and Listen (emulated_transport.h). The
// pieces: frame.h (the wire), sockets.h, memory_table.h (keys, windows),
// completion_queue.h, connection.h (the queue pair), listener.h.
#include "runtime/transport_impl/emulated/emulated_transport.h"

#include <cerrno>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/transport_impl/emulated/connection.h"
#include "runtime/transport_impl/emulated/frame.h"
#include "runtime/transport_impl/emulated/listener.h"
#include "runtime/transport_impl/emulated/sockets.h"
#include "runtime/unique_fd.h"

namespace naarpc {
namespace emulated {
namespace {

class EmuTransport final : public Transport {
 public:
  explicit EmuTransport(EmulatedOptions opts) : opts_(std::move(opts)) {}

  std::string_view name() const override { return "emulated"; }

  Result<std::unique_ptr<Transport>> WithLocalAddress(
      const std::string& local_address) const override {
    EmulatedOptions o = opts_;
    o.source_address = local_address;
    return NewEmulatedTransport(std::move(o));
  }

  using Transport::Connect;
  Result<std::unique_ptr<Connection>> Connect(const std::string& host, uint16_t port,
                                              Deadline deadline,
                                              const ConnectOptions& options) override {
    if (port == 0) return InvalidArgumentError("emulated transport: Connect to port 0");
    NAARPC_ASSIGN_OR_RETURN(std::vector<SockAddr> addrs, Resolve(host, port, /*passive=*/false));
    const std::string target = HostPort(host, port);
    std::optional<SockAddr> source;
    if (!opts_.source_address.empty()) {
      auto local = Resolve(opts_.source_address, 0, /*passive=*/false);
      if (!local.ok()) return local.status().WithContext("emulated transport: source address");
      source = local->front();
    }
    for (int attempt = 0;; ++attempt) {
      // Each address in turn (a name may have IPv6 and IPv4 ones); the
      // first that accepts wins, otherwise the first address's error.
      ConnectAttempt c;
      int first_err = 0;
      for (const SockAddr& addr : addrs) {
        c = ConnectTo(addr, source ? &*source : nullptr, deadline);
        if (c.timed_out) {
          return DeadlineExceededError("emulated transport: connecting to " + target +
                                       " timed out");
        }
        if (c.err == 0) break;
        if (first_err == 0) first_err = c.err;
        if (c.err == EMFILE || c.err == ENFILE || c.err == ENOBUFS || c.err == ENOMEM) {
          return ResourceExhaustedError("emulated transport: socket: " + Errno(c.err));
        }
      }
      const int err = c.err == 0 ? 0 : first_err;
      if (err == ECONNREFUSED && options.retry_refused && attempt < opts_.connect_retries) {
        auto wake = std::min(deadline.when(), Clock::now() + opts_.connect_retry_delay);
        std::this_thread::sleep_until(wake);
        if (!deadline.expired()) continue;
      }
      if (err != 0) {
        return UnavailableError("emulated transport: cannot connect to " + target + ": " +
                                Errno(err));
      }
      UniqueFd fd = std::move(c.fd);
      SetNoDelay(fd.get());
      std::string peer = PeerName(fd.get());
      NAARPC_RETURN_IF_ERROR(Handshake(fd.get(), peer, deadline, -1));
      return std::unique_ptr<Connection>(
          new EmuConnection(std::move(fd), /*listener_side=*/false, peer, opts_));
    }
  }
  Result<std::unique_ptr<Listener>> Listen(const std::string& host, uint16_t port) override {
    return emulated::Listen(host, port, opts_);
  }

 private:
  EmulatedOptions opts_;
};

}  // namespace
}  // namespace emulated

std::unique_ptr<Transport> NewEmulatedTransport(EmulatedOptions options) {
  return std::make_unique<emulated::EmuTransport>(std::move(options));
}

}  // namespace naarpc
