// Per-call memory windows (docs/protocol.md 4.5): what binding and
// invalidating the result region's window costs per call, as a ratio of the
// same call without windows, at 64 B, 4 KiB and 1 MiB (in and out of that
// size). One NAA, two sessions (plain, windows) used in alternating rounds
// in one run; the median of the rounds' means is reported.
//   bazel run -c opt //bench:memory_window_bench [-- --iterations N]
//   verbs (Soft-RoCE guest): --transport verbs --address <rxe netdev address>
//   one row (e.g. to profile it): --size 1048576
//   one session's calls only (callgrind: difference two --iterations):
//   --only plain|windows
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "naarpc/client_session.h"
#include "naarpc/naa_server.h"
#include "runtime/transport_impl/emulated/emulated_transport.h"
#include "runtime/transport_impl/verbs/verbs_transport.h"

namespace naarpc {
namespace {

class Echo : public NaaHandler {
 public:
  uint8_t Handle(NaaCall& call) override {
    std::memcpy(call.params[1].data.data(), call.params[0].data.data(), call.params[1].data.size());
    return kNaaStatusSuccess;
  }
};

double MeanMicros(ClientSession& s, int calls) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) {
    Status st = s.Call(1, Deadline::After(std::chrono::seconds(30)));
    if (!st.ok()) {
      std::fprintf(stderr, "call failed: %s\n", st.ToString().c_str());
      std::exit(1);
    }
  }
  const std::chrono::duration<double, std::micro> d = std::chrono::steady_clock::now() - t0;
  return d.count() / calls;
}

int Main(int argc, char** argv) {
  int iterations = 2000;
  std::string transport_name = "emulated", address = "127.0.0.1";
  size_t only_size = 0;  // --size: one row only (profiling)
  std::string only;       // --only plain|windows: one session's calls only
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--iterations") iterations = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--transport") transport_name = argv[i + 1];
    else if (a == "--address") address = argv[i + 1];
    else if (a == "--size") only_size = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--only") only = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (!only.empty() && only != "plain" && only != "windows") {
    std::fprintf(stderr, "--only %s: expected plain or windows\n", only.c_str());
    return 2;
  }
  std::unique_ptr<Transport> transport;
  if (transport_name == "verbs") {
    auto t = NewVerbsTransport();
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", t.status().ToString().c_str());
      return 1;
    }
    transport = std::move(t).value();
  } else {
    transport = NewEmulatedTransport();
  }
  Echo echo;
  auto server = NaaServer::Start(*transport, address, 0, echo, {});
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  std::printf("memory_window_bench: %s transport, median of 7 alternating rounds\n",
              transport_name.c_str());
  std::printf("| bytes in/out | calls/round | plain us/call | windows us/call | windows / plain |\n");
  std::printf("|---|---|---|---|---|\n");
  for (size_t n : {size_t{64}, size_t{4096}, size_t{1} << 20}) {
    if (only_size != 0 && n != only_size) continue;
    std::vector<RegionSpec> layout = {{"in", Direction::kIn, n}, {"out", Direction::kOut, n}};
    ClientOptions with;
    with.memory_windows = true;
    auto plain = ClientSession::Open(*transport, address, (*server)->port(), layout);
    auto windowed = ClientSession::Open(*transport, address, (*server)->port(), layout, with);
    if (!plain.ok() || !windowed.ok()) {
      std::fprintf(stderr, "open: %s / %s\n", plain.status().ToString().c_str(),
                   windowed.status().ToString().c_str());
      return 1;
    }
    const int calls = n >= (size_t{1} << 20) ? std::max(1, iterations / 20) : iterations;
    const bool run_plain = only != "windows", run_windowed = only != "plain";
    if (run_plain) MeanMicros(**plain, calls / 10 + 1);  // warm-up
    if (run_windowed) MeanMicros(**windowed, calls / 10 + 1);
    std::vector<double> a(7, 0.0), b(7, 0.0);
    for (int round = 0; round < 7; ++round) {
      if (run_plain) a[round] = MeanMicros(**plain, calls);
      if (run_windowed) b[round] = MeanMicros(**windowed, calls);
    }
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    std::printf("| %zu | %d | %.2f | %.2f | %.2fx |\n", n, calls, a[3], b[3], b[3] / a[3]);
    std::fflush(stdout);
  }
  (*server)->Shutdown();
  return 0;
}

}  // namespace
}  // namespace naarpc

int main(int argc, char** argv) { return naarpc::Main(argc, argv); }
