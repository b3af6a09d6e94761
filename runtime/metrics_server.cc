// The metrics endpoint (naarpc/metrics_server.h), on cpp-httplib.
#include "naarpc/metrics_server.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "naarpc/log.h"
#include "runtime/httplib_config.h"

namespace naarpc {
namespace {

using Clock = std::chrono::steady_clock;

// What a connection may cost (docs/operating.md, "The metrics endpoint").
constexpr size_t kWorkers = 4;
constexpr auto kRequestTime = std::chrono::seconds(2);   // the whole request
constexpr auto kResponseTime = std::chrono::seconds(5);  // the whole response
constexpr size_t kMaxRequestBytes = 64 * 1024;

// A connection as httplib reads and writes it, with one deadline for the
// whole request and one for the whole response (httplib's own timeouts are
// per read, so a client trickling bytes would hold a worker forever), and
// a bound on the request's size.
class DeadlineStream final : public httplib::Stream {
 public:
  explicit DeadlineStream(int fd) : fd_(fd), request_deadline_(Clock::now() + kRequestTime) {}

  bool is_readable() const override { return pos_ < len_ || Wait(POLLIN, request_deadline_); }
  bool is_writable() const override { return Wait(POLLOUT, ResponseDeadline()); }

  ssize_t read(char* ptr, size_t size) override {
    if (pos_ == len_) {
      if (received_ >= kMaxRequestBytes) return -1;
      ssize_t n;
      do {
        if (!Wait(POLLIN, request_deadline_)) return -1;
        n = recv(fd_, buf_, std::min(sizeof buf_, kMaxRequestBytes - received_), MSG_DONTWAIT);
      } while (n < 0 && (errno == EAGAIN || errno == EINTR));
      if (n <= 0) return n;
      received_ += static_cast<size_t>(n);
      pos_ = 0;
      len_ = static_cast<size_t>(n);
    }
    const size_t n = std::min(size, len_ - pos_);
    std::memcpy(ptr, buf_ + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }

  // All of it or -1: httplib writes headers without looping on short writes.
  ssize_t write(const char* ptr, size_t size) override {
    const Clock::time_point deadline = ResponseDeadline();
    size_t done = 0;
    while (done < size) {
      if (!Wait(POLLOUT, deadline)) return -1;
      const ssize_t n = send(fd_, ptr + done, size - done, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN && errno != EINTR) return -1;
      if (n > 0) done += static_cast<size_t>(n);
    }
    return static_cast<ssize_t>(size);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    Address(getpeername, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    Address(getsockname, ip, port);
  }
  socket_t socket() const override { return fd_; }

 private:
  // The response's deadline runs from its first write.
  Clock::time_point ResponseDeadline() const {
    if (!response_deadline_) response_deadline_ = Clock::now() + kResponseTime;
    return *response_deadline_;
  }

  // False at the deadline or on an error.
  bool Wait(short events, Clock::time_point deadline) const {
    for (;;) {
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{fd_, events, 0};
      const int r = poll(&p, 1, static_cast<int>(left));
      if (r > 0) return true;
      if (r < 0 && errno != EINTR) return false;
    }
  }

  void Address(int (*name)(int, sockaddr*, socklen_t*), std::string& ip, int& port) const {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (name(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0 &&
        getnameinfo(reinterpret_cast<sockaddr*>(&a), len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
      ip = host;
      port = std::atoi(serv);
    }
  }

  const int fd_;
  const Clock::time_point request_deadline_;
  mutable std::optional<Clock::time_point> response_deadline_;
  char buf_[4096];
  size_t pos_ = 0, len_ = 0, received_ = 0;
};

// httplib's server, one request per connection through a DeadlineStream
// (overriding httplib 0.11's private virtual per-connection step, around
// its protected process_request); Stop() ends the connections being served.
class HttpServer final : public httplib::Server {
 public:
  // Shuts the open connections down, and any accepted later as it takes them.
  void EndConnections() {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (int fd : open_) shutdown(fd, SHUT_RDWR);
  }

 private:
  bool process_and_close_socket(socket_t sock) override {
    bool ok = false;
    if (Track(sock)) {
      DeadlineStream stream(sock);
      bool closed = false;
      ok = process_request(stream, /*close_connection=*/true, closed, nullptr);
    }
    {
      // Under the lock: Stop() never shuts down a descriptor reused meanwhile.
      std::lock_guard<std::mutex> lock(mu_);
      open_.erase(sock);
      shutdown(sock, SHUT_RDWR);
      close(sock);
    }
    return ok;
  }

  bool Track(int fd) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return false;
    open_.insert(fd);
    return true;
  }

  std::mutex mu_;
  std::set<int> open_;
  bool stopping_ = false;
};

// Why host:port cannot be bound (": Address already in use"), found by
// binding again: httplib reports only failure.
std::string BindProblem(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* list = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &list);
  if (rc != 0) return std::string(": cannot resolve '") + host + "': " + gai_strerror(rc);
  std::string problem = ": no address";
  for (const addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    int yes = 1;
    const bool bound = fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes) == 0 &&
                       bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 1) == 0;
    problem = bound ? " (a second attempt could)" : std::string(": ") + std::strerror(errno);
    if (fd >= 0) close(fd);
    if (bound) break;
  }
  freeaddrinfo(list);
  return problem;
}

}  // namespace

class MetricsServer::Impl {
 public:
  std::shared_ptr<StatsRegistry> registry;
  HttpServer http;
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
  // A few workers, idle on a condition variable between connections: a
  // connection holds one for at most its request and response deadlines.
  impl->http.new_task_queue = [] { return new httplib::ThreadPool(kWorkers); };
  // SO_REUSEADDR binds during TIME_WAIT after a restart; httplib's default
  // SO_REUSEPORT would let a second process share the port.
  impl->http.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  Impl* raw = impl.get();
  impl->http.Get("/metrics", [raw](const httplib::Request&, httplib::Response& res) {
    res.set_content(RenderPrometheusText(*raw->registry), "text/plain; version=0.0.4; charset=utf-8");
  });
  const std::string bind_host = host.empty() ? "0.0.0.0" : host;
  impl->port = port == 0 ? impl->http.bind_to_any_port(bind_host)
                         : (impl->http.bind_to_port(bind_host, port) ? port : -1);
  if (impl->port <= 0) {
    return UnavailableError("metrics server: cannot listen on " + bind_host + ":" +
                            std::to_string(port) + BindProblem(bind_host, port));
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
  // The join waits for the workers: end their connections.
  impl_->http.EndConnections();
  impl_->thread.join();
}

}  // namespace naarpc
