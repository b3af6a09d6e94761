// naarpc quickstart: a software NAA and its client in one process.
//   ./tools/bazel run //examples:quickstart
// 1. start a software NAA serving VectorArith (services/vector/vector.naa.yaml)
//    on the emulated transport (RDMA semantics over TCP), 127.0.0.1, any port;
// 2. connect a generated client and call Add a few times;
// 3. print the results and the per-call latency.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "naarpc/naa_server.h"
#include "naarpc/transport_factory.h"
#include "services/vector/vector.naa.h"
#include "services/vector/vector_service.h"

namespace vec = naarpc::services::vector;

int main() {
  constexpr int kCalls = 10;  // >= 2
  constexpr size_t kN = 1024;  // Add's vector length, fixed by the IDL

  auto transport = naarpc::NewTransport("emulated");
  if (!transport.ok()) {
    std::fprintf(stderr, "transport: %s\n", transport.status().ToString().c_str());
    return 1;
  }

  // The software NAA: the generated skeleton + our kernels (vector_service.cc).
  vec::VectorArithServiceImpl service;
  auto server = naarpc::NaaServer::Start(**transport, "127.0.0.1", /*port=*/0, service);
  if (!server.ok()) {
    std::fprintf(stderr, "server: %s\n", server.status().ToString().c_str());
    return 1;
  }
  const uint16_t port = (*server)->port();
  std::printf("software NAA (VectorArith) listening on 127.0.0.1:%u (emulated transport)\n\n",
              unsigned{port});

  // The generated client stub; it connects on the first call.
  vec::VectorArithClient client(**transport, "127.0.0.1", port);

  std::vector<float> a(kN), b(kN), out(kN);
  std::vector<double> micros;
  for (int call = 0; call < kCalls; ++call) {
    for (size_t i = 0; i < kN; ++i) {
      a[i] = static_cast<float>(i);
      b[i] = static_cast<float>(call * 100);
    }
    const auto start = std::chrono::steady_clock::now();
    naarpc::Status st = client.Add(a, b, out);
    const auto end = std::chrono::steady_clock::now();
    if (!st.ok()) {
      std::fprintf(stderr, "Add failed: %s\n", st.ToString().c_str());
      return 1;
    }
    micros.push_back(std::chrono::duration<double, std::micro>(end - start).count());
    size_t wrong = 0;  // check every element against the host's own sum
    for (size_t i = 0; i < kN; ++i) wrong += out[i] != a[i] + b[i];
    char line[160];
    std::snprintf(line, sizeof line, "call %2d: Add([%g, %g, ...], [%g, %g, ...]) = [%g, %g, ..., %g]",
                  call + 1, a[0], a[1], b[0], b[1], out[0], out[1], out[kN - 1]);
    std::printf("%-66s %9.1f us  %s%s\n", line, micros.back(),
                wrong == 0 ? "ok" : "MISMATCH", call == 0 ? "  (incl. connect + MRSP)" : "");
    if (wrong != 0) return 1;
  }

  // Per-call latency once connected (call 1 also connects and runs the MRSP).
  std::vector<double> steady(micros.begin() + 1, micros.end());
  std::sort(steady.begin(), steady.end());
  const size_t n = steady.size();
  std::printf("\nAdd of %zu x f32, calls 2..%d (session reused): min %.1f us, median %.1f us, "
              "max %.1f us\n",
              kN, kCalls, steady.front(), (steady[(n - 1) / 2] + steady[n / 2]) / 2,
              steady.back());
  std::printf("first call (connect + MRSP + call): %.1f us\n", micros.front());

  (*server)->Shutdown();
  return 0;
}
