// The RDMA device disappears under live connections (`rdma link delete
// rxe0`): a call in flight must fail promptly with a status that says so,
// both sides must tear down cleanly, and nothing may hang.
//
// Destroys the device, so it only runs where NAARPC_DEVICE_REMOVAL_TEST=1
// (the last step of tools/rxe-vm/guest_suite.sh, which then checks that the
// device goes away once this process has ended, and re-creates it).
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <string>
#include <thread>

#include "runtime/client_session.h"
#include "runtime/naa_server.h"
#include "runtime/transport_impl/verbs/verbs_transport.h"

extern char** environ;

namespace naarpc {
namespace {

using namespace std::chrono_literals;

constexpr uint8_t kBlockingCall = 1;

// Holds each call until released (so the call is in flight while the device
// goes away), then echoes.
class BlockingKernel : public NaaHandler {
 public:
  uint8_t Handle(NaaCall& call) override {
    entered_.store(true);
    const auto give_up = std::chrono::steady_clock::now() + 30s;
    while (!released_.load() && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(1ms);
    }
    return call.function_code == kBlockingCall ? kNaaStatusSuccess : kNaaStatusUnknownFunction;
  }
  std::atomic<bool> entered_{false};
  std::atomic<bool> released_{false};
};

std::string DeviceName() {
  const char* d = std::getenv("NAARPC_RXE_DEVICE");
  return d != nullptr && *d != '\0' ? d : "rxe0";
}

// Starts `rdma link delete <dev>` without fork() (posix_spawn: this process
// has registered memory).
pid_t SpawnLinkDelete(const std::string& dev) {
  std::string link = "link", del = "delete", rdma = "rdma";
  std::string name = dev;
  char* argv[] = {rdma.data(), link.data(), del.data(), name.data(), nullptr};
  pid_t pid = -1;
  if (posix_spawnp(&pid, "rdma", nullptr, nullptr, argv, environ) != 0) return -1;
  return pid;
}

// Waits up to `limit` for `pid`; its exit status, or -1 if still running.
int WaitFor(pid_t pid, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    std::this_thread::sleep_for(20ms);
  }
  return -1;
}

TEST(DeviceRemoval, CallInFlightFailsPromptlyAndEverythingTearsDown) {
  const char* enabled = std::getenv("NAARPC_DEVICE_REMOVAL_TEST");
  if (enabled == nullptr || std::string(enabled) != "1") {
    GTEST_SKIP() << "destroys the RDMA device; runs in the Soft-RoCE guest "
                    "(tools/rxe-vm/guest_suite.sh sets NAARPC_DEVICE_REMOVAL_TEST=1)";
  }
  ASSERT_TRUE(RdmaDeviceAvailable()) << "no RDMA device";
  auto addr = FindRdmaIpv4Address();
  ASSERT_TRUE(addr.ok()) << addr.status().ToString();

  auto transport = NewVerbsTransport();
  ASSERT_TRUE(transport.ok()) << transport.status().ToString();
  BlockingKernel kernel;
  auto server = NaaServer::Start(**transport, *addr, 0, kernel);
  ASSERT_TRUE(server.ok()) << server.status().ToString();

  std::vector<RegionSpec> regions(1);
  regions[0].name = "data";
  regions[0].direction = Direction::kInOut;
  regions[0].size = 4096;
  auto session = ClientSession::Open(**transport, *addr, (*server)->port(), regions);
  ASSERT_TRUE(session.ok()) << session.status().ToString();

  // One call works before the device goes away.
  kernel.released_.store(true);
  ASSERT_TRUE((*session)->Call(kBlockingCall, Deadline::After(10s)).ok());
  kernel.released_.store(false);
  kernel.entered_.store(false);

  // A call in flight: the NAA's kernel holds it.
  auto call = std::async(std::launch::async, [&] {
    const auto start = std::chrono::steady_clock::now();
    Status s = (*session)->Call(kBlockingCall, Deadline::After(60s));
    return std::make_pair(s, std::chrono::steady_clock::now() - start);
  });
  for (int i = 0; i < 1000 && !kernel.entered_.load(); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(kernel.entered_.load()) << "the call never reached the kernel";

  const auto removed_at = std::chrono::steady_clock::now();
  const pid_t rdma = SpawnLinkDelete(DeviceName());
  ASSERT_GT(rdma, 0) << "cannot start `rdma link delete " << DeviceName() << "`";

  ASSERT_EQ(call.wait_for(30s), std::future_status::ready)
      << "the call did not end within 30 s of the device removal";
  auto [status, took] = call.get();
  const auto since_removal = std::chrono::steady_clock::now() - removed_at;
  std::printf("call ended %.1f ms after `rdma link delete` (%.1f ms in flight): %s\n",
              std::chrono::duration<double, std::milli>(since_removal).count(),
              std::chrono::duration<double, std::milli>(took).count(), status.ToString().c_str());
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(status.code() == StatusCode::kDisconnected || status.code() == StatusCode::kUnavailable ||
              status.code() == StatusCode::kTransportError)
      << status.ToString();
  EXPECT_NE(status.message().find("device removed"), std::string::npos) << status.ToString();
  EXPECT_LT(since_removal, 10s);

  // The session is in ERROR; new calls fail at once.
  Status again = (*session)->Call(kBlockingCall, Deadline::After(1s));
  EXPECT_FALSE(again.ok());

  // Teardown: release the kernel and close everything, without hanging.
  kernel.released_.store(true);
  session->reset();
  (*server)->Shutdown();
  server->reset();

  // A new connection over the dying device fails with a status, promptly.
  const auto connect_start = std::chrono::steady_clock::now();
  auto late = ClientSession::Open(**transport, *addr, 12399, regions);
  const auto connect_took = std::chrono::steady_clock::now() - connect_start;
  ASSERT_FALSE(late.ok());
  std::printf("connecting after the removal: %s (%.1f ms)\n", late.status().ToString().c_str(),
              std::chrono::duration<double, std::milli>(connect_took).count());
  EXPECT_LT(connect_took, 15s);
  EXPECT_NE(late.status().message().find("device"), std::string::npos) << late.status().ToString();
  transport->reset();

  // rxe cannot detach a live process from the device (no disassociate
  // support), and librdmacm keeps its device context open until exit, so
  // the kernel completes the removal once this process has ended:
  // guest_suite.sh checks that rxe0 then disappears and can be re-created.
  const int rc = WaitFor(rdma, 1s);
  std::printf("`rdma link delete` %s\n",
              rc == -1 ? "still waiting for this process to exit"
                       : ("exited with " + std::to_string(rc)).c_str());
}

}  // namespace
}  // namespace naarpc
