// MetricsServer (naarpc/metrics_server.h): a port in use is refused, a
// stopped server's port binds again, and idle, partial or trickling
// connections keep neither a scrape from its answer nor Stop() from
// returning. Nothing here asserts a duration: kHangGuard only turns a hang
// into a failure.
#include "naarpc/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/httplib_config.h"

namespace naarpc {
namespace {

constexpr auto kHangGuard = std::chrono::seconds(60);

// A TCP connection to 127.0.0.1:port.
class Connection {
 public:
  explicit Connection(uint16_t port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = fd_ >= 0 && connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Connection() {
    if (fd_ >= 0) close(fd_);
  }
  bool connected() const { return connected_; }
  // False once the server has closed the connection.
  bool Send(const std::string& s) {
    return send(fd_, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size());
  }
  // Everything until the server closes (or the hang guard).
  std::string ReadAll() {
    std::string out;
    const auto give_up = std::chrono::steady_clock::now() + kHangGuard;
    char buf[4096];
    while (std::chrono::steady_clock::now() < give_up) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 1000) <= 0) continue;
      const ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }

 private:
  int fd_;
  bool connected_ = false;
};

// A client that sends a request's first line, then one header byte after
// another for as long as it runs. Its pace only makes it slow, not silent
// (under any read timeout); no outcome depends on it.
class Trickler {
 public:
  explicit Trickler(uint16_t port) : connection_(port) {
    connected_ = connection_.connected() && connection_.Send("GET /metrics HTTP/1.1\r\nX-Slow: ");
    thread_ = std::thread([this] {
      while (!stop_.load() && connection_.Send("a")) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
  }
  ~Trickler() { Stop(); }
  bool connected() const { return connected_; }
  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }

 private:
  Connection connection_;
  bool connected_ = false;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::shared_ptr<StatsRegistry> Registry() {
  auto registry = std::make_shared<StatsRegistry>();
  registry->Get(CallSide::kNaa, "Svc.Routine", "127.0.0.1").RecordStart();
  return registry;
}

httplib::Result Scrape(uint16_t port) {
  httplib::Client http("127.0.0.1", port);
  http.set_read_timeout(kHangGuard);
  return http.Get("/metrics");
}

TEST(MetricsServerTest, APortInUseIsRefused) {
  auto registry = Registry();
  auto first = MetricsServer::Start(registry, "127.0.0.1", 0);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const std::string port = std::to_string((*first)->port());
  for (const std::string host : {"127.0.0.1", "0.0.0.0"}) {
    auto second = MetricsServer::Start(registry, host, (*first)->port());
    ASSERT_FALSE(second.ok()) << host;
    EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
    EXPECT_EQ(second.status().message(),
              "metrics server: cannot listen on " + host + ":" + port + ": Address already in use");
  }
  // The first one still answers every scrape.
  auto res = Scrape((*first)->port());
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

TEST(MetricsServerTest, AStoppedServersPortBindsAgain) {
  auto registry = Registry();
  auto first = MetricsServer::Start(registry, "127.0.0.1", 0);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const uint16_t port = (*first)->port();
  {
    // The server closes first (one request per connection): its side of the
    // connection stays in TIME_WAIT on the port.
    Connection c(port);
    ASSERT_TRUE(c.connected());
    ASSERT_TRUE(c.Send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
    const std::string response = c.ReadAll();
    EXPECT_EQ(response.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << response;
    EXPECT_NE(response.find("\r\nConnection: close\r\n"), std::string::npos) << response;
    EXPECT_NE(response.find("naarpc_calls_in_flight{side=\"naa\",routine=\"Svc.Routine\""),
              std::string::npos);
  }
  (*first)->Stop();
  auto again = MetricsServer::Start(registry, "127.0.0.1", port);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  auto res = Scrape(port);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

TEST(MetricsServerTest, IdlePartialAndTricklingConnectionsDoNotBlockAScrape) {
  auto server = MetricsServer::Start(Registry(), "127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const uint16_t port = (*server)->port();
  // More than the server's workers, so a worker must also come free.
  Trickler trickler(port);
  ASSERT_TRUE(trickler.connected());
  std::vector<std::unique_ptr<Connection>> idle;
  for (int i = 0; i < 8; ++i) {
    idle.push_back(std::make_unique<Connection>(port));
    ASSERT_TRUE(idle.back()->connected());
  }
  Connection partial(port);
  ASSERT_TRUE(partial.connected());
  ASSERT_TRUE(partial.Send("GET /metr"));

  auto res = Scrape(port);
  trickler.Stop();
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_NE(res->body.find("# TYPE naarpc_calls_total counter\n"), std::string::npos);
}

TEST(MetricsServerTest, StopEndsTheConnectionsBeingServed) {
  auto server = MetricsServer::Start(Registry(), "127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const uint16_t port = (*server)->port();
  Trickler trickler(port);
  ASSERT_TRUE(trickler.connected());
  Connection idle(port);
  ASSERT_TRUE(idle.connected());
  // Served: a worker has read part of it.
  Connection partial(port);
  ASSERT_TRUE(partial.connected());
  ASSERT_TRUE(partial.Send("GET /metrics HTTP/1.1\r\n"));

  auto stopped = std::async(std::launch::async, [&] { (*server)->Stop(); });
  const bool returned = stopped.wait_for(kHangGuard) == std::future_status::ready;
  trickler.Stop();  // lets a Stop() that waits for it return
  EXPECT_TRUE(returned) << "Stop() waits for the clients";
  stopped.get();
  // The server's side is closed: the partial request got no answer.
  EXPECT_EQ(partial.ReadAll().rfind("HTTP/1.1 200", 0), std::string::npos);
}

}  // namespace
}  // namespace naarpc
