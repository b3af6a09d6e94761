// A software NAA of the Where service in a process of its own, for the
// channel tests that kill an NAA (SIGKILL) in the middle of calls, on either
// transport (posix_spawn by tests/channel/channel_transport_test.cc).
//
//   where_peer --transport=T --address=A --id=N
//       serves Where (id N) on port 0 and prints "port P". A call whose x is
//       kHold (channel_peer.h) prints "held <Routine>" and waits until stdin
//       says "release" (then such calls answer at once); other calls answer
//       at once. Serves until stdin reaches EOF.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <string>

#include "naarpc/naa_server.h"
#include "naarpc/transport_factory.h"
#include "tests/channel/channel_peer.h"
#include "tests/channel/where.naa.h"

namespace {

namespace ch = naarpc::testing::channel;

class HoldingWhere final : public ch::WhereService {
 public:
  explicit HoldingWhere(uint32_t id) : id_(id) {}
  ch::WhereError Which(const naarpc::NaaCall&, uint32_t x, uint32_t& id, uint32_t& echo) override {
    MaybeHold(x, "Which");
    id = id_;
    echo = x;
    return ch::WhereError::kOk;
  }
  ch::WhereError Count(const naarpc::NaaCall&, uint32_t x, uint32_t& id) override {
    MaybeHold(x, "Count");
    id = id_;
    return ch::WhereError::kOk;
  }
  // No kernel time limit: a held call waits for the test, not for a clock.
  std::chrono::milliseconds KernelTimeout(uint8_t) const override {
    return std::chrono::milliseconds::zero();
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  void MaybeHold(uint32_t x, const char* routine) {
    if (x != naarpc::testing::kHold) return;
    std::unique_lock<std::mutex> lock(mu_);
    if (released_) return;
    std::printf("held %s\n", routine);
    std::fflush(stdout);
    cv_.wait(lock, [&] { return released_; });
  }

  const uint32_t id_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;  // guarded by mu_
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"a software NAA of the Where service (tests/channel)"};
  std::string transport_name = "emulated", address = "127.0.0.1";
  uint32_t id = 0;
  app.add_option("--transport", transport_name)->check(CLI::IsMember({"emulated", "verbs"}));
  app.add_option("--address", address);
  app.add_option("--id", id)->required();
  CLI11_PARSE(app, argc, argv);

  auto transport = naarpc::NewTransport(transport_name);
  if (!transport.ok()) {
    std::fprintf(stderr, "where_peer: %s\n", transport.status().ToString().c_str());
    return 1;
  }
  HoldingWhere impl(id);
  auto server = naarpc::NaaServer::Start(**transport, address, 0, impl);
  if (!server.ok()) {
    std::fprintf(stderr, "where_peer: %s\n", server.status().ToString().c_str());
    return 1;
  }
  std::printf("port %u\n", unsigned((*server)->port()));
  std::fflush(stdout);
  for (std::string line; std::getline(std::cin, line);) {
    if (line == "release") impl.Release();
  }
  impl.Release();
  (*server)->Shutdown();
  return 0;
}
