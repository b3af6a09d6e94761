#include "naarpc/naa_server.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "naarpc/metrics_server.h"
#include "runtime/engine/endpoint.h"
#include "runtime/engine/event_engine.h"
#include "runtime/naa/connection_server.h"
#include "runtime/naa/server_shared.h"

namespace naarpc {

using internal::ConnectionServer;
using internal::ServerShared;

class NaaServer::Impl {
 public:
  Transport& transport;
  NaaHandler& handler;
  ServerOptions options;
  std::unique_ptr<Listener> listener;
  std::thread accept_thread;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> accepted{0};
  std::shared_ptr<ServerShared> shared;
  std::mutex mu;
  std::condition_variable closed_cv;       // notified when `open` drops
  // Drives every connection; after `shared` (a connection ends before).
  std::unique_ptr<internal::EventEngine> engine;
  std::unique_ptr<MetricsServer> metrics;  // ServerOptions::metrics_port
  size_t open = 0;                         // guarded by mu
  bool shut_down = false;                  // guarded by mu

  Impl(Transport& t, NaaHandler& h, const ServerOptions& o)
      : transport(t), handler(h), options(o), shared(std::make_shared<ServerShared>(o)) {}

  void AcceptLoop() {
    while (!stopping.load()) {
      auto conn = listener->Accept(Deadline::Infinite());
      if (!conn.ok()) {
        if (stopping.load()) break;
        // A peer's failed handshake costs nothing (the transport's message
        // names the peer); only running out of descriptors backs off.
        if (conn.status().code() == StatusCode::kResourceExhausted) {
          shared->Log("naarpc NAA: accept failed: " + conn.status().ToString());
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        } else {
          shared->Log("naarpc NAA: " + conn.status().message());
        }
        continue;
      }
      accepted.fetch_add(1);
      std::unique_ptr<Connection> c = std::move(conn).value();
      const std::string peer = c->peer_name();
      auto server =
          std::make_shared<ConnectionServer>(std::move(c), handler, shared, stopping, *engine);
      // A slot, per peer: short of slots, an idle session of a peer holding
      // more is reclaimed (docs/server.md, "What one peer can hold").
      std::weak_ptr<ConnectionServer> weak = server;
      auto admitted = shared->admission.Admit(internal::PeerHost(peer), [weak] {
        if (auto reclaimed = weak.lock()) reclaimed->Reclaim();
      });
      if (!admitted.ok()) {
        shared->Log("naarpc NAA: " + admitted.status().message() +
                    "; closing the connection from " + peer);
        server->Interrupt();
        continue;
      }
      server->SetAdmission(*admitted);
      {
        std::lock_guard<std::mutex> lock(mu);
        ++open;
      }
      server->SetOnEnd([this] {
        std::lock_guard<std::mutex> lock(mu);
        --open;
        closed_cv.notify_all();
      });
      Status begun = server->Begin();
      // Driven once at once: its first Drive() arms the notification
      // (the descriptor waits for nothing before that, transport.h).
      if (begun.ok()) begun = engine->Add(server, Deadline::Now());
      if (!begun.ok()) server->Abort(begun);
    }
  }
};

NaaServer::NaaServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

NaaServer::~NaaServer() { Shutdown(); }

Result<std::unique_ptr<NaaServer>> NaaServer::Start(Transport& transport, const std::string& host,
                                                    uint16_t port, NaaHandler& handler,
                                                    const ServerOptions& options) {
  if (options.max_regions == 0) return InvalidArgumentError("max_regions must be > 0");
  if (options.max_connections == 0) return InvalidArgumentError("max_connections must be > 0");
  if (options.max_threads == 0) return InvalidArgumentError("max_threads must be > 0");
  if (options.max_handshakes_per_peer == 0) {
    return InvalidArgumentError("max_handshakes_per_peer must be > 0");
  }
  ServerOptions resolved = options;
  if (resolved.max_total_bytes == 0) {
    // Default: half of the physical memory.
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    resolved.max_total_bytes =
        pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) / 2 : uint64_t{8} << 30;
  }
  auto impl = std::make_unique<Impl>(transport, handler, resolved);
  internal::EventEngine::Options engine_options;
  engine_options.threads = resolved.engine_threads;
  engine_options.max_threads = resolved.max_threads;
  auto engine = internal::EventEngine::Start(engine_options);
  if (!engine.ok()) return engine.status();
  impl->engine = std::move(engine).value();
  // The metrics endpoint first: it listens once the NAA does.
  if (resolved.metrics_port.has_value()) {
    if (resolved.stats == nullptr) {
      return InvalidArgumentError("metrics_port needs statistics (ServerOptions::stats is null)");
    }
    auto metrics =
        MetricsServer::Start(resolved.stats, resolved.metrics_host, *resolved.metrics_port);
    if (!metrics.ok()) return metrics.status();
    impl->metrics = std::move(metrics).value();
  }
  auto listener = transport.Listen(host, port);
  if (!listener.ok()) {
    return listener.status().WithContext("listening on " + HostPort(host, port));
  }
  impl->listener = std::move(listener).value();
  // The MRSP receive is posted before the host can send its request (the
  // transport runs this before accepting): no RNR wait at set-up.
  // A connection it fails on is refused (the listener goes on with the
  // next): said in the log, like every other refusal.
  impl->listener->SetAcceptHook(
      [shared = impl->shared](Connection& conn) -> Result<std::shared_ptr<void>> {
        auto ep = std::make_shared<internal::Endpoint>();
        Status s = ep->SetUp(conn);
        if (s.ok()) s = ep->PostMrspReceive();
        if (!s.ok()) {
          shared->Log("naarpc NAA [" + conn.peer_name() +
                      "]: refused: preparing its MRSP receive failed: " + s.ToString());
          return s;
        }
        return std::shared_ptr<void>(std::move(ep));
      });
  Impl* raw = impl.get();
  impl->accept_thread = std::thread([raw] { raw->AcceptLoop(); });
  return std::unique_ptr<NaaServer>(new NaaServer(std::move(impl)));
}

uint16_t NaaServer::port() const { return impl_->listener->port(); }
uint16_t NaaServer::metrics_port() const {
  return impl_->metrics != nullptr ? impl_->metrics->port() : 0;
}
uint64_t NaaServer::connections_accepted() const { return impl_->accepted.load(); }
size_t NaaServer::connections_open() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->open;
}

bool NaaServer::WaitForOpenConnectionsAtMost(size_t n, Deadline deadline) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  auto few = [&] { return impl_->open <= n; };
  if (deadline.infinite()) {
    impl_->closed_cv.wait(lock, few);
    return true;
  }
  return impl_->closed_cv.wait_until(lock, deadline.when(), few);
}

void NaaServer::Shutdown() {
  if (!impl_) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->shut_down) return;
    impl_->shut_down = true;
  }
  impl_->stopping.store(true);
  impl_->listener->Shutdown();
  if (impl_->accept_thread.joinable()) impl_->accept_thread.join();
  // Every connection ends now, a call in flight too (its host gets
  // kDisconnected); a running kernel is still waited for (it uses the
  // connection's memory), one that overran its limit at most shutdown_grace.
  impl_->engine->InterruptAll();
  impl_->shared->kernel_watchdog.Stop();  // every connection has ended
  impl_->engine->Stop();
  if (impl_->metrics != nullptr) impl_->metrics->Stop();
  // What still runs now are kernels that overran their limit.
  if (size_t left = impl_->shared->running_kernels.WaitNone(impl_->options.shutdown_grace);
      left > 0) {
    impl_->shared->Log("naarpc NAA: shutdown: " + std::to_string(left) +
                       " kernel(s) that overran their time limit still running after " +
                       std::to_string(impl_->options.shutdown_grace.count()) +
                       " ms; left to finish by themselves (the handler must outlive them)");
  }
}

}  // namespace naarpc
