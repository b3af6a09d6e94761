// Load: 16 clients x 10,000 calls against one software NAA, every result
// verified, none lost; the process's resident memory stays flat once warm
// (no per-call growth). Emulated transport (the guest is too slow for this
// volume); no timing assertions.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "naarpc/client_session.h"
#include "naarpc/naa_server.h"
#include "runtime/transport_impl/emulated/emulated_transport.h"

namespace naarpc {
namespace {

using namespace std::chrono_literals;

constexpr uint8_t kMix = 1;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
constexpr size_t kWords = 256;

// out[i] = in[i] * 3 + call index seen by the NAA (per connection).
class Mix final : public NaaHandler {
 public:
  uint8_t Handle(NaaCall& call) override {
    auto* in = reinterpret_cast<const uint32_t*>(call.params[0].data.data());
    auto* out = reinterpret_cast<uint32_t*>(call.params[1].data.data());
    for (size_t i = 0; i < kWords; ++i) out[i] = in[i] * 3 + uint32_t(call.call_index);
    return kNaaStatusSuccess;
  }
};

size_t ResidentBytes() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return size_t(resident) * size_t(::sysconf(_SC_PAGESIZE));
}

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : fallback;
}

TEST(Load, SixteenClientsTenThousandVerifiedCallsEachAndFlatMemory) {
  const int clients = EnvInt("NAARPC_LOAD_CLIENTS", 16);
  const int calls = EnvInt("NAARPC_LOAD_CALLS", 10'000);
  auto transport = NewEmulatedTransport();
  Mix mix;
  auto server = NaaServer::Start(*transport, "127.0.0.1", 0, mix);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::vector<RegionSpec> layout = {{"in", Direction::kIn, kWords * 4},
                                          {"out", Direction::kOut, kWords * 4}};
  std::vector<std::unique_ptr<ClientSession>> sessions;
  for (int c = 0; c < clients; ++c) {
    auto s = ClientSession::Open(*transport, "127.0.0.1", (*server)->port(), layout);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    sessions.push_back(std::move(s).value());
  }
  std::atomic<uint64_t> verified{0}, failed{0}, wrong{0};
  std::atomic<size_t> warm_rss{0};
  std::atomic<int> warmed{0};
  auto run = [&](int c) {
    ClientSession& s = *sessions[c];
    auto* in = reinterpret_cast<uint32_t*>(s.buffer(0).data());
    auto* out = reinterpret_cast<const uint32_t*>(s.buffer(1).data());
    for (int k = 0; k < calls; ++k) {
      for (size_t i = 0; i < kWords; ++i) in[i] = uint32_t(c * 1'000'003 + k * 7 + i);
      Status st = s.Call(kMix, Deadline::After(60s));
      if (!st.ok()) {
        ADD_FAILURE() << "client " << c << " call " << k << ": " << st.ToString();
        ++failed;
        return;
      }
      bool ok = true;
      for (size_t i = 0; i < kWords; ++i) ok &= out[i] == in[i] * 3 + uint32_t(k);
      ok ? ++verified : ++wrong;
      // Warm once every client has made 10% of its calls: measure there.
      if (k == calls / 10 && ++warmed == clients) warm_rss = ResidentBytes();
    }
  };
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) threads.emplace_back(run, c);
  for (auto& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0u);
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_EQ(verified.load(), uint64_t(clients) * uint64_t(calls));
  const size_t end_rss = ResidentBytes();
  // Flat: the last 90% of the calls added no more than allocator noise.
  // (Not under sanitizers: ASan's quarantine holds freed memory on purpose.)
  if (warm_rss.load() != 0 && !kSanitized) {
    EXPECT_LT(end_rss, warm_rss.load() + (size_t{8} << 20))
        << "resident memory grew from " << warm_rss.load() << " to " << end_rss << " bytes";
  }
  for (auto& s : sessions) EXPECT_TRUE(s->Close().ok());
  (*server)->Shutdown();
}

}  // namespace
}  // namespace naarpc
