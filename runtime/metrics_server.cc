// The metrics endpoint (naarpc/metrics_server.h), on cpp-httplib.
#include "naarpc/metrics_server.h"

#include <atomic>
#include <thread>

#include "naarpc/log.h"
#include "runtime/httplib_config.h"

namespace naarpc {

class MetricsServer::Impl {
 public:
  std::shared_ptr<StatsRegistry> registry;
  httplib::Server http;
  std::thread thread;
  int port = 0;
  std::atomic<bool> listen_returned{false};
};

MetricsServer::MetricsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MetricsServer::~MetricsServer() { Stop(); }

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    std::shared_ptr<StatsRegistry> registry, const std::string& host, uint16_t port) {
  if (registry == nullptr) return InvalidArgumentError("metrics server: no statistics registry");
  auto impl = std::make_unique<Impl>();
  impl->registry = std::move(registry);
  // One thread answers (scrapes are rare and short).
  impl->http.new_task_queue = [] { return new httplib::ThreadPool(1); };
  Impl* raw = impl.get();
  impl->http.Get("/metrics", [raw](const httplib::Request&, httplib::Response& res) {
    res.set_content(RenderPrometheusText(*raw->registry), "text/plain; version=0.0.4; charset=utf-8");
  });
  const std::string bind_host = host.empty() ? "0.0.0.0" : host;
  impl->port = port == 0 ? impl->http.bind_to_any_port(bind_host)
                         : (impl->http.bind_to_port(bind_host, port) ? port : -1);
  if (impl->port <= 0) {
    return UnavailableError("metrics server: cannot listen on " + bind_host + ":" +
                            std::to_string(port));
  }
  impl->thread = std::thread([raw] {
    raw->http.listen_after_bind();
    raw->listen_returned.store(true);
  });
  Log(LogComponent::kMetrics, LogLevel::kDebug,
      "serving metrics on http://" + bind_host + ":" + std::to_string(impl->port) + "/metrics");
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(impl)));
}

uint16_t MetricsServer::port() const { return static_cast<uint16_t>(impl_->port); }

void MetricsServer::Stop() {
  if (impl_ == nullptr || !impl_->thread.joinable()) return;
  // stop() does nothing before the listening loop has begun: wait for it
  // (or for its end).
  while (!impl_->http.is_running() && !impl_->listen_returned.load()) std::this_thread::yield();
  impl_->http.stop();
  impl_->thread.join();
}

}  // namespace naarpc
